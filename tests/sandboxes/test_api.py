"""The Sandbox API, the same on both backends (each test runs on Docker and on bwrap)."""

from __future__ import annotations

import asyncio
import io
import tarfile
import time

import pytest

from arborl.sandboxes import SandboxFileNotFound, SandboxOpError


def agent_uid(sb) -> str:
    """The agent's uid: the image's `agent` user (Docker), or the bubblewrap backend's own uid."""
    return "1000" if sb.backend.name == "docker" else str(sb.handle[4])  # a uid per local sandbox


async def test_exec_reports_exit_code_streams_and_user(sb):
    res = await sb.exec("id -u; pwd; cat hello.txt; echo oops >&2; exit 3")
    assert res.exit_code == 3 and not res.ok
    assert res.stdout.split() == [agent_uid(sb), "/workspace", "hello"]
    assert res.stderr == "oops\n"
    assert not res.timed_out and not res.truncated


async def test_exec_env_workdir_stdin_and_argv(sb):
    res = await sb.exec("echo $FOO; pwd; cat", env={"FOO": "bar"}, workdir="/workspace/pkg", stdin="piped")
    assert res.stdout == "bar\n/workspace/pkg\npiped"
    res = await sb.exec(["python3", "-c", "import sys; print(sys.argv[1:])", "a b", "c"])
    assert res.stdout.strip() == "['a b', 'c']"


async def test_commands_do_not_run_as_root(sb):
    res = await sb.exec("touch /usr/bin/evil")
    assert res.exit_code != 0
    assert "Permission denied" in res.stderr or "Read-only" in res.stderr


async def test_timeout_kills_the_process_group(sb):
    start = time.monotonic()
    res = await sb.exec("sleep 30 & sleep 30; echo never", timeout=0.5)
    assert res.timed_out and "never" not in res.stdout
    assert time.monotonic() - start < 5
    assert (await sb.exec("pgrep -x sleep || echo none")).stdout.strip() == "none"


async def test_background_child_holding_pipes_does_not_block(sb):
    start = time.monotonic()
    res = await sb.exec("sleep 30 & echo started", timeout=20)
    assert res.ok and res.stdout == "started\n"
    assert time.monotonic() - start < 5


async def test_huge_output_is_truncated_head_and_tail(sb):
    res = await sb.exec("seq 1 3000000; echo THE-END", max_output=10_000)
    assert res.truncated and res.ok
    assert res.stdout.startswith("1\n2\n3\n")
    assert res.stdout.rstrip().endswith("THE-END")
    assert "bytes truncated" in res.stdout
    assert res.stdout_bytes > 20_000_000 and len(res.stdout) < 11_000


async def test_invalid_utf8_output_is_replaced_not_fatal(sb):
    res = await sb.exec("printf 'ok\\xff\\xfe\\n'")
    assert res.ok and res.stdout.startswith("ok") and "\ufffd" in res.stdout


async def test_missing_workdir_is_a_result_not_an_exception(sb):
    res = await sb.exec("true", workdir="/does/not/exist")
    assert res.exit_code == 126 and "cannot start command" in res.stderr


async def test_files_roundtrip_and_permissions(sb):
    payload = bytes(range(256)) * 100
    await sb.write_file("/workspace/new/dir/blob.bin", payload)
    assert await sb.read_file("/workspace/new/dir/blob.bin") == payload
    res = await sb.exec("stat -c %u new/dir/blob.bin && echo more >> new/dir/blob.bin")
    assert res.ok and res.stdout.strip() == agent_uid(sb)  # owned by, and writable for, the agent user
    with pytest.raises(SandboxFileNotFound):
        await sb.read_file("/workspace/nope.txt")
    with pytest.raises(SandboxOpError, match="larger than"):
        await sb.read_file("/workspace/new/dir/blob.bin", max_bytes=10)


async def test_upload_download_tar(sb, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.py").write_text("print('a')\n")
    (tmp_path / "top.txt").write_text("top\n")
    assert await sb.upload(tmp_path, "/workspace/up") >= 2
    assert (await sb.exec("python3 sub/a.py && cat top.txt", workdir="/workspace/up")).stdout == "a\ntop\n"
    await sb.upload({"m/x.txt": "from mapping"}, "/workspace/up")
    with tarfile.open(fileobj=io.BytesIO(await sb.download("/workspace/up"))) as tar:
        names = set(tar.getnames())
        assert {"up/top.txt", "up/sub/a.py", "up/m/x.txt"} <= names
        assert tar.extractfile("up/m/x.txt").read() == b"from mapping"


async def test_upload_refuses_path_escape(sb):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../../etc/escaped")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    import base64

    with pytest.raises(SandboxOpError):
        await sb._call("upload", dest="/workspace", tar=base64.b64encode(buf.getvalue()).decode())
    assert (await sb.exec("test -e /etc/escaped || echo absent")).stdout.strip() == "absent"


async def test_reset_restores_tree_and_kills_leftovers(sb):
    await sb.exec(
        "rm hello.txt; echo junk > junk.txt; echo x > ~/.profile_junk; echo t > /tmp/t; "
        "mkdir -p deep/er && echo 1 > deep/er/f; (sleep 300 &)"
    )
    before = await sb.exec("pgrep -c sleep")
    assert before.stdout.strip() == "1"
    result = await sb.reset()
    assert result.killed >= 1
    res = await sb.exec("ls -A /workspace; ls -A /tmp; ls -A ~; pgrep -c sleep || true")
    listing = res.stdout.split()
    assert "hello.txt" in listing and "pkg" in listing
    for gone in ("junk.txt", "deep", "t", ".profile_junk"):
        assert gone not in listing
    assert listing[-1] == "0"
    assert (await sb.read_file("/workspace/hello.txt")) == b"hello\n"


async def test_concurrent_commands_in_one_sandbox(sb):
    start = time.monotonic()
    results = await asyncio.gather(*(sb.exec(f"sleep 0.5; echo {i}") for i in range(6)))
    assert [r.stdout.strip() for r in results] == [str(i) for i in range(6)]
    assert time.monotonic() - start < 2.5  # they ran side by side, not one after another


async def test_ping_reports_server(sb):
    info = await sb.ping()
    assert info["version"] == 3 and info["processes"] >= 1


async def test_reset_sees_through_forged_mtimes_and_type_changes(sb):
    # Same size, mtime put back: only ctime (which users cannot set) betrays the edit.
    await sb.exec("cp -p hello.txt /tmp/ref; printf 'HELLO\\n' > hello.txt; touch -r /tmp/ref hello.txt")
    await sb.exec("rm -r pkg && echo file > pkg; mkdir -p d && ln -s /etc/passwd d/link; chmod 600 hello.txt")
    await sb.reset()
    res = await sb.exec("cat hello.txt; cat pkg/mod.py; stat -c %a hello.txt; ls")
    assert res.stdout.split("\n")[:4] == ["hello", "X = 1", "644", "hello.txt"]
    assert "d" not in res.stdout.split()


async def test_reset_keeps_untouched_files_as_they_are(sb):
    await sb.reset()  # the module's first reset copies everything; later ones only the changes
    ino = (await sb.exec("stat -c %i hello.txt pkg/mod.py")).stdout.split()
    await sb.exec("echo changed > pkg/mod.py")
    await sb.reset()
    after = (await sb.exec("stat -c %i hello.txt pkg/mod.py; cat pkg/mod.py")).stdout.split()
    assert after[0] == ino[0]  # untouched: same inode (git's stat cache stays valid)
    assert after[2:] == ["X", "=", "1"]
