"""`arborl eval` on Harbor task folders: the example suite validates itself (gold 100 %, empty
0 %), and broken tasks are each reported under their own id with the file (and line) at fault,
as the environment or infrastructure error they are, never a 0, while the others run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker
EXAMPLES = Path(__file__).parents[2] / "data" / "harbor"


def arborl_eval(suite: Path, agent: str, run_dir: Path) -> tuple[dict, dict[str, str]]:
    """Run `arborl eval`; (summary.json, instance id → error.txt or "")."""
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "arborl.cli.main",
            "eval",
            f"suite={suite}",
            f"agent={agent}",
            f"run.dir={run_dir}",
        ],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    errors = {}
    for inst in (run_dir / "instances").iterdir():
        err = inst / "sample-0" / "error.txt"
        errors[inst.name] = err.read_text() if err.is_file() else ""
    return summary, errors


def test_the_example_suite_validates_itself(tmp_path, docker_backend):
    gold, errors = arborl_eval(EXAMPLES, "gold", tmp_path / "gold")
    assert gold["instances"] == 5 and gold["resolved_rate"] == 1.0, (gold["headline"], errors)
    empty, _ = arborl_eval(EXAMPLES, "empty", tmp_path / "empty")
    assert empty["resolved_rate"] == 0.0 and empty["statuses"] == {"done": 5}, empty["headline"]


def _task(root: Path, name: str, files: dict[str, str] | None = None) -> None:
    """A copy of the file-edit example, with `files` (relative path → text) replaced."""
    shutil.copytree(EXAMPLES / "edit-config", root / name)
    for rel, text in (files or {}).items():
        (root / name / rel).write_text(textwrap.dedent(text))


def test_broken_tasks_are_reported_each_with_its_file_and_the_others_run(tmp_path, docker_backend):
    suite = tmp_path / "suite"
    _task(suite, "good")
    _task(suite, "bad-key", {"task.toml": "[verifier]\ntimeout_sec = 30\nretries = 2\n"})
    _task(
        suite,
        "needs-internet",
        {
            "environment/Dockerfile": """\
            FROM debian:bookworm-slim
            RUN python3 -c "import urllib.request; urllib.request.urlopen('https://example.com', timeout=20)"
            WORKDIR /app
            COPY service.ini /app/service.ini
            """
        },
    )
    _task(suite, "no-reward", {"tests/test.sh": "#!/bin/bash\necho 'checked, but wrote nothing'\n"})
    not_a_number = "#!/bin/bash\nmkdir -p /logs/verifier\necho passed > /logs/verifier/reward.txt\n"
    _task(suite, "not-a-number", {"tests/test.sh": not_a_number})
    summary, errors = arborl_eval(suite, "gold", tmp_path / "gold")
    assert summary["resolved"] == 1 and summary["statuses"] == {
        "done": 1,
        "env_error": 3,
        "infra_error": 1,
    }, (
        summary["statuses"],
        errors,
    )
    assert errors["good"] == ""
    assert "task bad-key: task.toml: [verifier] retries: unknown key" in errors["bad-key"]
    assert "task needs-internet: environment/Dockerfile:2: " in errors["needs-internet"]
    assert "task no-reward: tests/test.sh wrote no reward" in errors["no-reward"]
    assert (
        "task not-a-number: tests/test.sh wrote /logs/verifier/reward.txt, which is not a reward"
        in errors["not-a-number"]
    )
    # an agent's run on a test.sh that writes nothing is that attempt's 0, with its reason
    empty, _ = arborl_eval(suite, "empty", tmp_path / "empty")
    assert empty["unresolved_by_kind"]["no_reward"] == 1 and empty["unresolved_by_kind"]["bad_reward"] == 1, (
        empty
    )
    assert empty["statuses"] == {"done": 3, "env_error": 1, "infra_error": 1}, empty["statuses"]
