"""Harbor's scripted policies: gold runs the task's `solution/solve.sh` with the env's own
`bash` tool (as the agent, in its working directory: what the agent could do), then submits;
empty submits at once. A suite validates itself with them (gold 100 %, empty 0 %)."""

from __future__ import annotations

import base64
import io
import json
import shlex
import tarfile
from typing import Any

from ..common import Policy
from .reader import HarborTaskError, read_files
from .task import HarborTask

#: The longest a gold run's `bash` call may take when the task sets no agent timeout.
DEFAULT_SOLVE_S = 600


def _call(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def solve_command(task: HarborTask) -> str:
    """A bash command that unpacks `solution/` into a fresh directory of the agent's home (/tmp
    is mounted noexec) and runs `solve.sh` from there in the working directory (Harbor copies
    it to /solution, which only root could make here: a script that names /solution literally
    instead of its own directory needs root, and its gold run fails)."""
    files = read_files(task.folder / "solution")
    if "solve.sh" not in files:
        raise HarborTaskError(f"task {task.id}: solution/solve.sh: missing, so the task has no gold run")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel, data in files.items():
            info = tarfile.TarInfo(rel)
            info.size, info.mode = len(data), 0o755 if rel.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    payload = base64.b64encode(buf.getvalue()).decode()
    env = " ".join(
        f"{k}={shlex.quote(v)}" for k, v in {"DEBIAN_FRONTEND": "noninteractive", **task.solution_env}.items()
    )
    return (
        'd=$(mktemp -d "$HOME/.solution.XXXXXX") && printf %s '
        + shlex.quote(payload)
        + ' | base64 -d | tar -x -C "$d"'
        f' && cd {shlex.quote(task.workdir)} && env {env} "$d/solve.sh"'
    )


def gold_policy(task: HarborTask) -> Policy:
    """Run solution/solve.sh, then submit."""
    limit = int(min(task.agent_timeout_s or DEFAULT_SOLVE_S, 3600))
    replies = [_call("bash", {"command": solve_command(task), "timeout": limit}), _call("submit", {})]

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        turn = sum(m.get("role") == "assistant" for m in messages)
        return replies[min(turn, len(replies) - 1)]

    return policy


def empty_policy(task: HarborTask) -> Policy:
    """Submit at once."""
    return lambda messages, info: _call("submit", {})
