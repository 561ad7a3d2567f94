"""`arborl/Code-v0`: SWE-style repository repair in a sandbox.

The task's repository is written into a sandbox of the task's image (committed to git, so
`git diff` is the agent's patch), then the agent works with four tools: `bash`,
`str_replace_editor`, `run_tests`, `submit`. The reward is the verifier's, computed where the
agent cannot reach (`verifier.py`): the agent's diff is taken, refused if it touches test
infrastructure, and applied to the sandbox reset in place (every process of the episode
killed, every tree restored), where the verifier runs: 1.0 when it passes, else 0.0. It runs
at `submit` (terminated) or when a budget wrapper ends the episode (truncated); the diff is
in the scoring step's info as `model_patch`.

The state hash is a hash of the working tree (paths and contents of every file git would
see, caches excluded), computed in the sandbox in one command: two trajectories that left
the repository in the same state share it.
"""

from __future__ import annotations

import base64
import logging
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from arborl.sandboxes import Sandbox, SandboxSpec
from arborl.tasks import CodeTask
from arborl.tasks.swebench import grade, swe_parts
from arborl.tasks.swebench.harness import extract_test_output
from arborl.tasks.swebench.official import read_statuses

from ..function_calling.mcp import MCPServerConfig, MCPSession, as_configs, close_sessions, open_sessions
from ..tool_calling_env import ToolCallingEnv
from ..toolbox import ToolBox
from .tools import code_tools
from .verifier import GIT_ENV, VerifierRun, capture_patch, run_verifier

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a software engineer working in a repository inside a sandbox with no network. "
    "Use the tools to explore the code, reproduce the problem, edit files and run the tests. "
    "When the problem is solved, call `submit`."
)

DEFAULT_TASK = CodeTask(
    id="arborl/fix-add",
    problem_statement="`add(2, 3)` in calc.py returns -1 instead of 5. Make `add` return the sum.",
    repo_files={
        "calc.py": "def add(a, b):\n    return a - b\n",
        "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    },
    hidden_files={
        "test_hidden.py": "from calc import add\n\n\ndef test_more():\n    assert add(-1, 1) == 0\n"
    },
)

# Setup runs as root in an agent-owned tree: tell git that is fine, for this command only.
_GIT_INIT = (
    "export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'; "
    "if [ ! -d .git ]; then git init -q && git add -A && "
    "git -c user.name=arborl -c user.email=arborl@localhost commit -q --allow-empty -m 'initial state'; fi"
)
# Hash of the tree git would show (tracked + untracked, ignored files and caches excluded).
_TREE_HASH = (
    "{ git ls-files -z -co --exclude-standard 2>/dev/null || find . -path ./.git -prune -o -type f -print0; } "
    r"| grep -zvE '(^|/)(__pycache__|\.pytest_cache|\.git)/|\.pyc$' | sort -z "
    "| xargs -0 -r sha256sum -- 2>/dev/null | sha256sum"
)
_STAGE = "/tmp/.arborl-repo"


def _chown(user: str) -> str:
    return f'if [ "$(id -u)" = 0 ] && id {shlex.quote(user)} >/dev/null 2>&1; then chown -R {shlex.quote(user)}: .; fi'


def repo_files(task: CodeTask) -> tuple[dict[str, str], list[str]]:
    """The sandbox files (absolute path → text) and extra setup for a task's repository.

    A host `repo_path` is read in; binary files travel base64-encoded to a staging path and
    are decoded by a setup command, since a sandbox spec carries text only.
    """
    files = {f"{task.workdir}/{rel}": text for rel, text in task.repo_files.items()}
    setup: list[str] = []
    if task.repo_path:
        root = Path(task.repo_path)
        if not root.is_dir():
            raise FileNotFoundError(f"task {task.id}: repo_path {root} is not a directory")
        for path in sorted(
            p for p in root.rglob("*") if p.is_file() and ".git" not in p.relative_to(root).parts
        ):
            rel = path.relative_to(root).as_posix()
            data = path.read_bytes()
            try:
                files[f"{task.workdir}/{rel}"] = data.decode("utf-8")
            except UnicodeDecodeError:
                staged = f"{_STAGE}/{len(setup)}.b64"
                files[staged] = base64.b64encode(data).decode()
                dest = shlex.quote(f"{task.workdir}/{rel}")
                setup.append(f"mkdir -p $(dirname {dest}) && base64 -d {staged} > {dest} && rm {staged}")
    return files, setup


class CodeEnv(ToolCallingEnv):
    """Repository repair with bash, an editor, tests and a verifier."""

    task_type: ClassVar[type[CodeTask]] = CodeTask
    default_task: ClassVar[CodeTask] = DEFAULT_TASK

    def __init__(
        self,
        *,
        system_prompt: str = SYSTEM_PROMPT,
        command_timeout_s: float = 60.0,
        max_command_timeout_s: float = 600.0,
        max_output_bytes: int = 16 * 1024,
        hash_state: bool = True,
        mcp_servers: Sequence[MCPServerConfig | Mapping[str, Any]] = (),
        **kwargs: Any,
    ) -> None:
        """
        Args:
            system_prompt: the first message of every episode.
            command_timeout_s: default time limit of a `bash` call (the model may ask for
                up to `max_command_timeout_s`).
            max_output_bytes: head+tail kept of each output stream of a command.
            hash_state: compute `info["state_hash"]` from the working tree each step (one
                command in the sandbox); False leaves it "".
            mcp_servers: MCP servers whose tools every episode also gets (see
                `function_calling/mcp.py`; stdio servers start in the episode's sandbox).
            **kwargs: see `ToolCallingEnv` (parser, ...) and `SandboxEnv` (pool, backend, ...).
        """
        super().__init__(**kwargs)
        self.system_prompt = system_prompt
        self.command_timeout_s = command_timeout_s
        self.max_command_timeout_s = max_command_timeout_s
        self.max_output_bytes = max_output_bytes
        self.hash_state = hash_state
        self.mcp_servers = as_configs(mcp_servers)
        self._mcp: list[MCPSession] = []
        self._spec_cache: tuple[CodeTask, SandboxSpec] | None = None
        self._start = "HEAD"  # the commit the episode started from (its diff's base)

    def sandbox_spec(self, task: CodeTask) -> SandboxSpec:
        if self._spec_cache is not None and self._spec_cache[0] == task:
            return self._spec_cache[1]
        files, staged = repo_files(task)
        setup = [*staged, *task.setup]
        if task.git_init:
            setup.append(_GIT_INIT)
        spec = SandboxSpec(
            image=task.image,
            workdir=task.workdir,
            files=files,
            setup=(*setup, _chown(SandboxSpec().user)),
            network=task.network,
        )
        self._spec_cache = (task, spec)
        return spec

    async def on_reset(self, task: CodeTask) -> list[dict[str, str]]:
        self._mcp, served = await open_sessions(self.mcp_servers, self._raw_sandbox)
        self.toolbox = ToolBox([*code_tools(self), *served])
        # Read before the agent acts, so the agent cannot choose the base of its own diff.
        head = await self.sandbox.exec(["git", "rev-parse", "HEAD"], timeout=60, env=GIT_ENV)
        self._start = head.stdout.strip() if head.exit_code == 0 and head.stdout.strip() else "HEAD"
        prompt = (
            f"{task.problem_statement}\n\nThe repository is at {task.workdir}. "
            f"Tests run with `{task.test_command}`."
        )
        return [self.system_message(self.system_prompt), {"role": "user", "content": prompt}]

    async def _raw_sandbox(self) -> Sandbox:
        return self.sandbox.raw

    def _end_episode(self, broken: bool = False) -> None:
        close_sessions(getattr(self, "_mcp", []))  # before the sandbox goes back: nothing more reaches it
        self._mcp = []
        super()._end_episode(broken)

    async def on_finish(self) -> tuple[float, dict[str, Any]]:
        """A budget ended the episode: score the repository as it is."""
        return await self.verify()

    async def capture_patch(self) -> tuple[str | None, str | None]:
        """(the agent's diff so far, None), or (None, why it could not be read); the
        repository and its index are left as they are."""
        return await capture_patch(self.sandbox, self._start)

    async def verify(self) -> tuple[float, dict[str, Any]]:
        """Score the agent's diff on the sandbox reset to where the episode began.

        Ends what is left of the episode in the sandbox: every process is killed and every
        tree restored before the diff is applied (see `verifier.py`)."""
        task: CodeTask = self.task
        close_sessions(self._mcp)  # the reset below kills the servers; their sessions end first
        self._mcp = []
        patch, error = await self.capture_patch()
        if patch is None:
            run = VerifierRun(False, error=f"the diff could not be read: {error}")
            return 0.0, {"verifier": run.info(), "model_patch_error": error}
        await self.sandbox.reset()
        run = await run_verifier(self.sandbox, task, patch)
        if run.result is not None and swe_parts(task) is not None:
            run.passed = _swe_resolved(task, run.result.stdout)
        return (1.0 if run.passed else 0.0), {"verifier": run.info(), "model_patch": patch}

    async def state_hash(self) -> str:
        if not self.hash_state or self._proxy is None:
            return ""
        r = await self.sandbox.exec(_TREE_HASH, timeout=60)
        if r.exit_code != 0 or len(r.stdout) < 16:
            # not "" in silence: the env base counts it (a test fails on it)
            raise RuntimeError(
                f"the working tree's hash failed (exit {r.exit_code}, timed out: {r.timed_out}): "
                f"{r.stderr.strip()[-300:]}"
            )
        return r.stdout[:16]


def _swe_resolved(task: CodeTask, harness_output: str) -> bool:
    """SWE-bench's verdict, read on the host from the harness's test log (never the exit code
    of a process that shares the sandbox with the model's code), with the parser evaluation
    grades with: the same reward as `arborl eval`'s grade."""
    parts = swe_parts(task)
    assert parts is not None
    instance, environment = parts
    statuses, _ = read_statuses(instance.repo, environment.log_parser, extract_test_output(harness_output))
    report = grade(statuses, list(instance.FAIL_TO_PASS), list(instance.PASS_TO_PASS))
    return bool(report["status"] == "FULL")
