"""SandboxPool on real backends: warm reuse, bounds, replacement of the dead, no leaks."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from arborl.sandboxes import PoolConfig, PoolTimeout, SandboxCrashed, SandboxPool, SandboxSpec

SPEC = SandboxSpec(files={"/workspace/state.txt": "clean\n"})
OTHER = SandboxSpec(files={"/workspace/state.txt": "other\n"})


def pool_for(backend, **cfg) -> SandboxPool:
    return SandboxPool(backend, PoolConfig(health_interval_s=0, reap_on_start=False, **cfg))


async def test_warm_sandbox_is_reused_after_in_place_reset(backend):
    async with pool_for(backend, max_size=2) as pool:
        await pool.warm(SPEC, 1)
        async with pool.acquire(SPEC) as sb:
            first = sb.id
            await sb.exec("echo dirty > state.txt; touch extra")
        await pool.drain()
        async with pool.acquire(SPEC) as sb:
            assert sb.id == first  # the same sandbox, not a new one
            assert (await sb.exec("cat state.txt; ls")).stdout == "clean\nstate.txt\n"
        assert pool.metrics.count("create") == 1 and pool.metrics.count("reset") >= 1


async def test_bounded_with_fifo_wait_and_timeout(backend):
    async with pool_for(backend, max_size=2) as pool:
        await pool.warm(SPEC, 2)
        order: list[str] = []

        async def hold(name: str, seconds: float) -> None:
            async with pool.acquire(SPEC):
                order.append(name)
                await asyncio.sleep(seconds)

        t1 = asyncio.create_task(hold("a", 0.6))
        t2 = asyncio.create_task(hold("b", 0.6))
        await asyncio.sleep(0.1)
        with pytest.raises(PoolTimeout, match="max_size=2"):
            async with pool.acquire(SPEC, timeout=0.2):
                pass
        waited = time.perf_counter()
        await hold("c", 0)  # waits for a release, then gets the reset sandbox
        waited = time.perf_counter() - waited
        await asyncio.gather(t1, t2)
        assert order == ["a", "b", "c"] and waited > 0.2
        assert pool.stats()["alive"] == 2


async def test_idle_sandbox_of_another_spec_is_evicted_when_full(backend):
    async with pool_for(backend, max_size=1) as pool:
        async with pool.acquire(OTHER) as sb:
            other_id = sb.id
        await pool.drain()
        async with pool.acquire(SPEC, timeout=30) as sb:
            assert sb.id != other_id
            assert (await sb.exec("cat state.txt")).stdout == "clean\n"
        await pool.drain()
        assert pool.stats()["alive"] == 1


async def test_crashed_sandbox_is_replaced(backend):
    async with pool_for(backend, max_size=1) as pool:
        with pytest.raises(SandboxCrashed):
            async with pool.acquire(SPEC) as sb:
                dead = sb.id
                await backend.destroy(sb)  # the container / bwrap process dies under the episode
                await sb.exec("echo hi")
        await pool.drain()
        async with pool.acquire(SPEC, timeout=30) as sb:
            assert sb.id != dead and (await sb.exec("echo hi")).stdout == "hi\n"


async def test_health_check_replaces_dead_idle_sandboxes_and_keeps_min_idle(backend):
    async with pool_for(backend, max_size=3, min_idle=2) as pool:
        await pool.warm(SPEC, 2)
        idle = [sb for q in pool._idle.values() for sb in q]
        await backend.destroy(idle[0])
        assert await pool.check_health() == 1
        await pool.drain()
        assert sum(pool.stats()["idle"].values()) == 2  # topped back up to min_idle
        async with pool.acquire(SPEC) as sb:
            assert sb.id != idle[0].id


HARNESS = textwrap.dedent(
    """
    import asyncio, sys
    from arborl.sandboxes import PoolConfig, SandboxPool, SandboxSpec, make_backend

    async def main():
        pool = SandboxPool(make_backend({"type": sys.argv[1]}), PoolConfig(reap_on_start=False))
        await pool.warm(SandboxSpec(), 2)
        async with pool.acquire(SandboxSpec()) as sb:
            print("READY", flush=True)
            await sb.exec("sleep 600", timeout=700)

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_sigkilled_harness_leaves_no_orphans_after_restart(backend):
    proc = subprocess.Popen([sys.executable, "-c", HARNESS, backend.name], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
        mine = [i for i in backend.list_sandboxes() if i.owner_pid == proc.pid]
        assert len(mine) == 2 and all(i.owner_alive for i in mine)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    orphans = [i for i in backend.list_sandboxes() if i.owner_pid == proc.pid]
    assert len(orphans) == 2 and not any(i.owner_alive for i in orphans)
    # A new harness starting its pool reaps them.
    async with SandboxPool(backend, PoolConfig(health_interval_s=0)):
        pass
    assert [i for i in backend.list_sandboxes() if i.owner_pid == proc.pid] == []


async def test_the_reaper_never_signals_a_process_that_reused_an_orphans_pid(bwrap_backend):
    """A dead sandbox's bwrap pid can belong to another process by the time a reaper runs
    (pids wrap within minutes on a busy machine). The reaper signalled it blindly, and took
    down a process group leader that had reused the pid: dockerd, started with setsid."""
    import json

    decoy = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a group leader, like dockerd
    sb = await bwrap_backend.create(SandboxSpec())
    try:
        meta_path = sb.handle[1] / "meta.json"
        meta = json.loads(meta_path.read_text())
        meta["arborl.owner_pid"] = "0"  # the owner is dead: an orphan
        meta["arborl.bwrap_pid"] = str(decoy.pid)  # its pid now belongs to the decoy
        meta_path.write_text(json.dumps(meta))
        assert sb.id in bwrap_backend.reap()
        await asyncio.sleep(0.2)
        assert decoy.poll() is None, "the reaper killed a process that merely reused the pid"
        assert sb.handle[0].poll() is not None  # the sandbox itself is gone (its cgroup killed it)
    finally:
        decoy.kill()
        decoy.wait()
        await bwrap_backend.destroy(sb)


class _Removing:
    """A container another process's reaper is already removing (what Docker answers then)."""

    def __init__(self, status: int) -> None:
        self.status, self.id, self.labels = status, "c0ffee", {"arborl.sandbox_id": "sb-gone"}

    def remove(self, **kw):
        import docker.errors
        import requests

        resp = requests.Response()
        resp.status_code = self.status
        raise docker.errors.APIError("removal of container c0ffee is already in progress", response=resp)


def test_two_reapers_racing_for_one_orphan_both_finish(docker_backend, monkeypatch):
    """Two processes' pools start at once and find the same orphan: the second remove gets
    Docker's 409 "already in progress", which is the first reaper's success, not an error."""
    import docker.errors

    monkeypatch.setattr(docker_backend, "_containers", lambda: [_Removing(409)])
    assert docker_backend.reap(all_sandboxes=True) == ["sb-gone"]
    monkeypatch.setattr(docker_backend, "_containers", lambda: [_Removing(500)])
    with pytest.raises(docker.errors.APIError):  # any other engine error still surfaces
        docker_backend.reap(all_sandboxes=True)
