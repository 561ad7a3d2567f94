"""Scoring a code episode out of the agent's reach: its diff alone, on a clean sandbox.

The agent's sandbox cannot be trusted as the agent leaves it: a process it left running can
rewrite the tests while they run, a file in its home (`.pth`, `usercustomize.py`) runs inside
any Python that starts there, its `.git` can make git run code. So a code task is scored in
three steps:

1. `capture_patch`: the agent's diff against the commit the episode started from, read in
   its own sandbox (as the agent, with git's configured commands off);
2. `infrastructure_changes` (`screen.py`): a diff that touches test infrastructure scores 0;
3. `run_verifier`: on a clean sandbox of the task's spec (reset in place: every process of
   the episode killed, every tree restored; or a fresh one), the verifier's files are
   written by root into a directory the agent cannot write, the diff is applied as the
   agent with git's configured commands off, the hidden tests are added, and the verifier
   runs as the agent without a user site.
"""

from __future__ import annotations

import ast
import posixpath
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from arborl.sandboxes import ROOT_ENV, ExecResult
from arborl.tasks import VERIFIER_DIR, CodeTask
from arborl.tasks.swebench import parse_log
from arborl.tasks.swebench.harness import GIT_INERT_ARGS, GIT_INERT_ENV

from .patch_screen import infrastructure_changes, sectioned_files

MAX_PATCH_BYTES = 8 * 1024 * 1024
#: No system or global git configuration, and none of the commands the repository's own
#: configuration could make git run: the settings the SWE harness uses in the sandbox.
GIT_ENV = dict(GIT_INERT_ENV)
GIT_OFF = " ".join(shlex.quote(arg) for arg in GIT_INERT_ARGS)
# The diff goes through a temporary index so the agent's own is untouched; untracked files
# are part of a fix, caches are not. The copy's mtime is set to 1 s past the epoch so git
# treats every entry as racily clean and reads each file's content: a fresh copy's mtime is
# "now", so git would otherwise trust stat data that an edit within the second of the task's
# own commit (same size, same inode, same mtime second) leaves unchanged, and miss the edit.
_DIFF = (
    r"""idx=/tmp/.arborl-patch-index.$$
rm -f "$idx"; [ -f .git/index ] && cp .git/index "$idx" && touch -m -d @1 "$idx"
export GIT_INDEX_FILE="$idx"
git GIT_OFF add -A -- . ':(exclude,glob)**/__pycache__/**' ':(exclude,glob)**/*.pyc' \
  ':(exclude,glob)**/.pytest_cache/**' >/dev/null 2>&1
git GIT_OFF diff --cached --binary --no-color --no-ext-diff --no-textconv "$1"
rc=$?; rm -f "$idx"; exit $rc"""
).replace("GIT_OFF", GIT_OFF)
#: What the verifier's commands run with: no user site (a .pth or usercustomize left in the
#: home must not run), git inert, and pytest's short summary of every test (`-rA`), which
#: the host reads.
VERIFY_ENV = {"PYTHONNOUSERSITE": "1", "PYTEST_ADDOPTS": "-rA", **GIT_ENV}


@dataclass
class VerifierRun:
    """What scoring a diff found."""

    passed: bool
    result: ExecResult | None = None
    rejected: list[str] = field(default_factory=list)  # test-infrastructure changes
    error: str | None = None  # the diff did not apply, or could not be read

    def info(self) -> dict[str, Any]:
        r = self.result
        out: dict[str, Any] = {"passed": self.passed}
        if r is not None:
            out |= {"exit_code": r.exit_code, "timed_out": r.timed_out, "output_tail": r.output[-2000:]}
        if self.rejected:
            out["rejected"] = list(self.rejected)
        if self.error:
            out["error"] = self.error
        return out


async def capture_patch(sandbox: Any, start: str) -> tuple[str | None, str | None]:
    """(the diff against `start`, None), or (None, why it could not be read)."""
    r = await sandbox.exec(
        ["bash", "-c", _DIFF, "diff", start], timeout=120, max_output=MAX_PATCH_BYTES, env=GIT_ENV
    )
    if r.exit_code != 0 or r.timed_out:
        return None, f"git diff failed (exit {r.exit_code}): {r.stderr.strip()[-500:]}"
    if r.truncated:
        return None, f"the patch is larger than {MAX_PATCH_BYTES} bytes"
    return r.stdout, None


async def screen_patch(sandbox: Any, task: CodeTask, patch: str) -> list[str]:
    """Test-infrastructure changes in `patch`, reading sectioned config files from the clean tree."""
    base: dict[str, str | None] = {}
    for rel in sectioned_files(patch):
        try:
            data = await sandbox.read_file(posixpath.join(task.workdir, rel), user="root", max_bytes=1 << 20)
            base[rel] = data.decode("utf-8", "replace")
        except FileNotFoundError:
            base[rel] = None
        except Exception:  # unreadable (a link, too large): treated as a change throughout
            continue
    return infrastructure_changes(patch, base)


async def stage(sandbox: Any, task: CodeTask, patch: str) -> None:
    """Write the verifier's files and the diff where only root may write."""
    r = await sandbox.exec(  # the sandbox is clean here; ROOT_ENV all the same (defence in depth)
        f"rm -rf {VERIFIER_DIR} && install -d -m 0755 -o root -g root {VERIFIER_DIR}",
        user="root",
        timeout=60,
        env=ROOT_ENV,
    )
    if not r.ok:
        raise RuntimeError(f"cannot make {VERIFIER_DIR}: {r.output[-500:]}")
    for name, text in {**task.verifier_files, "model.patch": patch}.items():
        await sandbox.write_file(f"{VERIFIER_DIR}/{name}", text, mode=0o644, user="root")


async def run_verifier(sandbox: Any, task: CodeTask, patch: str, max_output: int = 16 * 1024) -> VerifierRun:
    """Score `patch` on `sandbox`, which must be clean (fresh, or reset since the agent acted)."""
    rejected = await screen_patch(sandbox, task, patch)
    if rejected:
        return VerifierRun(False, rejected=rejected)
    await stage(sandbox, task, patch)
    if not task.verifier_applies_patch and patch.strip():
        applied = await sandbox.exec(
            f"git {GIT_OFF} apply --whitespace=nowarn {VERIFIER_DIR}/model.patch",
            timeout=120,
            workdir=task.workdir,
            env=GIT_ENV,
        )
        if not applied.ok:
            return VerifierRun(False, applied, error=f"the diff does not apply: {applied.output[-500:]}")
    if task.hidden_files:
        await sandbox.upload(dict(task.hidden_files), task.workdir)
    r = await sandbox.exec(
        task.verifier,
        timeout=task.verify_timeout_s,
        max_output=max_output,
        workdir=task.workdir,
        env=VERIFY_ENV,
    )
    run = VerifierRun(r.exit_code == 0 and not r.timed_out, r)
    missing = unreported_tests(hidden_tests(task.hidden_files), r.stdout)
    if run.passed and missing:
        run.passed = False
        run.error = f"exit code 0, but pytest reported no pass for the hidden tests {missing[:5]}"
    return run


def hidden_tests(files: Mapping[str, str]) -> list[str]:
    """The pytest node ids the hidden test files define (`path::test_x`, `path::TestC::test_x`)."""
    ids: list[str] = []
    for path, text in files.items():
        name = posixpath.basename(path)
        if not (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))):
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                ids.append(f"{path}::{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                ids += [
                    f"{path}::{node.name}::{m.name}"
                    for m in node.body
                    if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name.startswith("test")
                ]
    return ids


def unreported_tests(expected: list[str], log: str) -> list[str]:
    """The expected tests pytest's log does not show as passed (every parametrization counts).

    An exit code is what the model's own code can set from inside the test process (an
    `os._exit(0)` on import); the hidden tests' own PASSED lines, whose names the agent never
    saw, are what a fix produces.
    """
    if not expected:
        return []
    statuses = parse_log("pytest", log)
    missing = []
    for test in expected:
        runs = [s for t, s in statuses.items() if t == test or t.startswith(test + "[")]
        if not runs or any(s not in ("PASSED", "XFAIL") for s in runs):
            missing.append(test)
    return missing
