"""State that outlives a reset, or crosses to another sandbox, the way an agent would keep it.

Reset must hand the next episode the snapshot and nothing else: a change that survives it is
a channel between episodes (a fix made in one episode is "found" by the next, a poisoned
`.git` runs inside the grader). Each test here is what an agent could run as its own user;
each passed on the code before the reset watched for writes through shared maps, cleared
IPC, and the bubblewrap backend had a seccomp filter and a uid per sandbox.
"""

from __future__ import annotations

import asyncio

import pytest

from arborl.sandboxes import Limits, SandboxSpec

SPEC = SandboxSpec(
    files={"/workspace/calc.py": "def add(a, b):\n    return a - b\n"},
    limits=Limits(memory_mb=256, pids=128, max_file_mb=64, tmp_mb=16, disk_mb=64),
)

# Written through a shared map: on tmpfs this changes neither ctime nor mtime.
MMAP_WRITE = (
    'python3 -c \'import mmap,os;m=mmap.mmap(os.open("calc.py",os.O_RDWR),0);'
    'm[:]=m[:].replace(b"a - b",b"a + b")\''
)


async def warm(sb):
    """A pooled sandbox: its first reset copies everything; later ones keep what is untouched."""
    await sb.reset()
    return sb


async def test_a_write_through_a_shared_map_does_not_survive_reset(backend):
    async with await backend.create(SPEC) as sb:
        await warm(sb)
        before = (await sb.exec("stat -c %Z calc.py")).stdout
        assert (await sb.exec(MMAP_WRITE)).ok
        assert "a + b" in (await sb.exec("cat calc.py")).stdout
        assert (await sb.exec("stat -c %Z calc.py")).stdout == before  # ctime did not move
        await sb.reset()
        assert (await sb.exec("cat calc.py")).stdout == "def add(a, b):\n    return a - b\n"


async def test_a_map_still_held_at_reset_does_not_survive_it(backend):
    """The writer is still running (and still holds the map) when reset kills it."""
    async with await backend.create(SPEC) as sb:
        await warm(sb)
        held = MMAP_WRITE.replace('a + b")', 'a + b");import time;time.sleep(300)')
        await sb.exec(f"({held}) >/dev/null 2>&1 &", timeout=10)
        for _ in range(100):
            if "a + b" in (await sb.exec("cat calc.py")).stdout:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the writer never wrote")
        await sb.reset()
        assert (await sb.exec("cat calc.py")).stdout == "def add(a, b):\n    return a - b\n"


async def test_a_map_write_in_a_deep_directory_does_not_survive_reset(backend):
    spec = SPEC.model_copy(update={"files": {**SPEC.files, "/workspace/.git/hooks/a/b/cfg": "clean\n"}})
    async with await backend.create(spec) as sb:
        await warm(sb)
        write = (
            MMAP_WRITE.replace("calc.py", ".git/hooks/a/b/cfg")
            .replace("a - b", "clean")
            .replace("a + b", "dirty")
        )
        assert (await sb.exec(write)).ok, "the write itself failed"
        await sb.reset()
        assert (await sb.exec("cat .git/hooks/a/b/cfg")).stdout == "clean\n"


SYSV = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT = 0o1000
if sys.argv[1] == "make":
    shm = libc.shmget(0x4242, 4096, IPC_CREAT | 0o666)
    msg = libc.msgget(0x4243, IPC_CREAT | 0o666)
    sem = libc.semget(0x4244, 1, IPC_CREAT | 0o666)
    print(shm >= 0, msg >= 0, sem >= 0)
else:
    print(libc.shmget(0x4242, 0, 0) >= 0, libc.msgget(0x4243, 0) >= 0, libc.semget(0x4244, 0, 0) >= 0)
"""


async def test_sysv_ipc_objects_do_not_survive_reset(backend):
    async with await backend.create(SPEC) as sb:
        made = await sb.exec(["python3", "-c", SYSV, "make"])
        assert made.stdout.split() == ["True", "True", "True"], made.output
        assert (await sb.exec(["python3", "-c", SYSV, "find"])).stdout.split() == ["True"] * 3
        await sb.reset()
        assert (await sb.exec(["python3", "-c", SYSV, "find"])).stdout.split() == ["False"] * 3


async def test_each_sandbox_has_an_ipc_namespace_of_its_own(backend):
    async with await backend.create(SPEC) as a, await backend.create(SPEC) as b:
        made = await a.exec(["python3", "-c", SYSV, "make"])
        assert made.stdout.split() == ["True"] * 3, made.output
        assert (await b.exec(["python3", "-c", SYSV, "find"])).stdout.split() == ["False"] * 3
        ns = [(await sb.exec("readlink /proc/self/ns/ipc")).stdout for sb in (a, b)]
        assert ns[0] != ns[1] and ns[0].startswith("ipc:"), ns


MQUEUE = r"""
import ctypes, os, sys
rt = ctypes.CDLL("librt.so.1", use_errno=True)
rt.mq_open.restype = ctypes.c_int
if sys.argv[1] == "make":
    fd = rt.mq_open(b"/arborl-left", os.O_CREAT | os.O_RDWR, 0o666, None)
    print(fd >= 0, ctypes.get_errno())
else:
    print(rt.mq_open(b"/arborl-left", os.O_RDWR) >= 0)
"""


async def test_posix_message_queues_do_not_survive_reset(backend):
    async with await backend.create(SPEC) as sb:
        made = await sb.exec(["python3", "-c", MQUEUE, "make"])
        assert made.stdout.split()[0] == "True", made.output
        await sb.reset()
        assert (await sb.exec(["python3", "-c", MQUEUE, "find"])).stdout.strip() == "False"


KEYRING = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
KEY_SPEC_USER_KEYRING = -4
libc.syscall.restype = ctypes.c_long
if sys.argv[1] == "write":
    r = libc.syscall(248, b"user", b"arborl-note", b"fixed-it", 8, KEY_SPEC_USER_KEYRING)  # add_key
    print("written" if r >= 0 else f"refused {ctypes.get_errno()}")
else:
    r = libc.syscall(249, b"user", b"arborl-note", None, 0)  # request_key
    print("found" if r >= 0 else f"missing {ctypes.get_errno()}")
"""


async def test_the_kernel_keyring_carries_nothing_between_sandboxes(backend):
    async with await backend.create(SPEC) as a, await backend.create(SPEC) as b:
        await a.exec(["python3", "-c", KEYRING, "write"])
        assert (await b.exec(["python3", "-c", KEYRING, "read"])).stdout.startswith("missing")
        await a.reset()
        assert (await a.exec(["python3", "-c", KEYRING, "read"])).stdout.startswith("missing")


async def test_the_agent_cannot_make_itself_root_in_a_user_namespace(backend):
    async with await backend.create(SPEC) as sb:
        res = await sb.exec("unshare -Ur id -u", timeout=10)
        assert res.exit_code != 0 and res.stdout.strip() != "0", res.output
        py = "import os; os.unshare(os.CLONE_NEWUSER); print('unshared')"
        res = await sb.exec(["python3", "-c", py], timeout=10)
        assert "unshared" not in res.stdout, res.output


async def test_local_sandboxes_run_their_agents_as_different_uids(bwrap_backend):
    async with await bwrap_backend.create(SPEC) as a, await bwrap_backend.create(SPEC) as b:
        ua, ub = (await a.exec("id -u")).stdout.strip(), (await b.exec("id -u")).stdout.strip()
        assert ua != ub and "0" not in (ua, ub), (ua, ub)
