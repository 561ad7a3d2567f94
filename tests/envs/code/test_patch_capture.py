"""The episode's diff sees every change to the tree, even one that leaves a file's size and
timestamps as the index recorded them (an edit within the second of the task's commit: git
then trusts the stat data unless the index marks the entry racy)."""

from __future__ import annotations

import os
import subprocess

from arborl.envs.code.verifier import GIT_ENV, capture_patch
from arborl.sandboxes import ExecResult


class HostRepo:
    """`capture_patch` needs only `exec`; here it runs the same bash on a host repository."""

    def __init__(self, path):
        self.path = path

    async def exec(self, cmd, timeout=60, max_output=None, env=None, **_):
        r = subprocess.run(cmd, cwd=self.path, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **GIT_ENV, **(env or {})})  # fmt: skip
        return ExecResult(exit_code=r.returncode, stdout=r.stdout, stderr=r.stderr)


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


async def test_an_edit_the_stat_data_cannot_see_is_in_the_patch(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    calc = repo / "calc.py"
    calc.write_text("def add(a, b):\n    return a - b\n")
    os.utime(calc, (1e9, 1e9))  # long before the index is written: not racy, stat trusted
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "task")
    start = git(repo, "rev-parse", "HEAD").strip()
    st = calc.stat()
    # The same bytes count, written in place (same inode), the mtime put back, ctime
    # ignored: the stat data matches the index entry as it does after a sub-second edit.
    with open(calc, "r+b") as f:
        f.write(b"def add(a, b):\n    return a + b\n")
    os.utime(calc, ns=(st.st_atime_ns, st.st_mtime_ns))
    git(repo, "config", "core.trustctime", "false")
    assert git(repo, "status", "--porcelain") == ""  # git itself is fooled

    patch, error = await capture_patch(HostRepo(repo), start)
    assert error is None and "+    return a + b" in patch and "-    return a - b" in patch


async def test_the_verifiers_root_staging_never_runs_a_program_from_usr_local_bin(docker_backend):
    """Root commands find their tools in the system's directories (ROOT_ENV): the server's
    PATH starts with /usr/local/bin, which an image may leave writable to the agent. A fake
    `rm` there (put as root here, as such an image would let the agent) is never run by the
    verifier's staging; with the server's PATH it was, as root."""
    from arborl.envs.code.verifier import stage
    from arborl.sandboxes import DEFAULT_IMAGE, SandboxSpec
    from arborl.tasks import VERIFIER_DIR, CodeTask

    fake = '#!/bin/sh\ntouch /tmp/ran-as-root\nexec /bin/rm "$@"\n'
    async with await docker_backend.create(SandboxSpec(image=DEFAULT_IMAGE)) as sb:
        await sb.write_file("/usr/local/bin/rm", fake, mode=0o755, user="root")
        task = CodeTask(id="t", problem_statement="p", repo_files={"a.py": "x = 1\n"})
        await stage(sb, task, "")
        assert (await sb.exec(f"test -d {VERIFIER_DIR} && test -f {VERIFIER_DIR}/model.patch")).ok
        assert not (await sb.exec("test -e /tmp/ran-as-root")).ok
        assert (
            await sb.exec("rm -f /tmp/nothing && test -e /tmp/ran-as-root", user="root")
        ).ok  # the fake works
