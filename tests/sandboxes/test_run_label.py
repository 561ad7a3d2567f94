"""What a pool on another node needs of the sandbox layer: a run label the reapers key on,
errors that cross a process boundary with their fault, and uploads of a ready tar archive."""

from __future__ import annotations

import io
import pickle
import subprocess
import sys
import tarfile

import pytest

from arborl.sandboxes import SandboxCrashed, SandboxSpec
from arborl.sandboxes.owner import OWNER_RUN, run_id, set_run_id


def test_sandbox_crashed_crosses_processes_with_its_fault():
    """A node's pool actor raises it; Ray pickles it to the harness, which must still read
    who caused the crash (an agent-caused crash is scored, an infrastructure one retried)."""
    for fault in ("agent", "infra"):
        err = pickle.loads(pickle.dumps(SandboxCrashed("sb-1", "memory cgroup OOM", fault)))
        assert (type(err), err.sandbox_id, err.reason, err.fault) == (
            SandboxCrashed,
            "sb-1",
            "memory cgroup OOM",
            fault,
        )
        assert str(err) == "sandbox sb-1 crashed: memory cgroup OOM"


@pytest.mark.bwrap
async def test_reaper_removes_a_runs_sandboxes_whose_owner_is_alive(bwrap_backend):
    before = run_id()
    set_run_id("run-label-test-a")
    try:
        sb = await bwrap_backend.create(SandboxSpec())
    finally:
        set_run_id(before)
    try:
        [info] = [i for i in bwrap_backend.list_sandboxes() if i.id == sb.id]
        assert info.labels[OWNER_RUN] == "run-label-test-a" and info.owner_alive
        assert sb.id not in bwrap_backend.reap()  # its owner (this process) is alive
        assert sb.id not in bwrap_backend.reap(run="run-label-test-b")
        assert sb.id in bwrap_backend.reap(run="run-label-test-a")
        assert sb.id not in {i.id for i in bwrap_backend.list_sandboxes()}
    finally:
        await bwrap_backend.destroy(sb)


@pytest.mark.bwrap
def test_a_reap_frees_no_uid_a_live_harness_is_still_taking(bwrap_backend):
    """A harness takes its sandbox's uid before it writes the sandbox's metadata. A reaper
    that runs in between (another pool's start, a node actor's watchdog) must not free that
    uid, or a second sandbox could take it: two sandboxes of one uid share its keyring,
    process count and signals. A killed harness's uid is freed."""
    uids = bwrap_backend.uids
    taken = uids.take("still-being-created")
    dead = subprocess.run(
        [sys.executable, "-c", "import sys; from arborl.sandboxes import BwrapBackend; "
         "print(BwrapBackend().uids.take('its-harness-was-killed'))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    orphan = int(dead.stdout)
    try:
        bwrap_backend.reap()
        assert (uids.directory / str(taken)).exists()
        assert not (uids.directory / str(orphan)).exists()
        uids.release(taken, "another-sandbox")  # not its uid: left alone
        assert (uids.directory / str(taken)).exists()
    finally:
        uids.release(taken, "still-being-created")
        uids.release(orphan)
    assert not (uids.directory / str(taken)).exists()


@pytest.mark.bwrap
async def test_upload_takes_a_tar_archive_made_elsewhere(bwrap_backend):
    """A remote harness tars its files where they are and sends the archive's bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        raw = b"made on another host\n"
        info = tarfile.TarInfo("sub/a.txt")
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
    async with await bwrap_backend.create(SandboxSpec()) as sb:
        assert await sb.upload(buf.getvalue(), "/workspace") == 1
        assert await sb.read_file("/workspace/sub/a.txt") == raw
