"""The arborl-drop helper on its own: it becomes the agent completely, or runs nothing."""

from __future__ import annotations

import os
import subprocess

import pytest

from arborl.sandboxes.drop_ids import drop_helper

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching ids needs root")

STATUS = "import os; print(os.getresuid(), os.getresgid(), os.getgroups()); print(open('/proc/self/status').read())"


@pytest.fixture(scope="module")
def drop() -> str:
    path = drop_helper()
    assert path is not None, "setup.sh installs gcc and libc6-dev: the helper must build here"
    return str(path)


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30)


def test_becomes_the_agent_with_no_groups_and_no_capabilities(drop):
    res = run(drop, "4242", "4343", "python3", "-c", STATUS)
    assert res.returncode == 0, res.stderr
    first, status = res.stdout.split("\n", 1)
    assert first == "(4242, 4242, 4242) (4343, 4343, 4343) []"
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(fields[cap], 16) == 0, (cap, fields[cap])


def test_clears_inheritable_capabilities_a_caller_holds(drop):
    # setpriv gives its child inheritable capabilities here, as bwrap's server has them
    res = run(
        "setpriv", "--inh-caps=+chown,+kill", "--", drop, "4242", "4242", "grep", "Cap", "/proc/self/status"
    )
    assert res.returncode == 0, res.stderr
    assert "CapInh:\t0000000000000000" in res.stdout


@pytest.mark.parametrize(
    "uid, gid",
    [("0", "1000"), ("1000", "0"), ("-1", "1000"), ("1000x", "1000"), ("", "1000"), ("4294967295", "1")],
)
def test_refuses_root_and_malformed_ids(drop, uid, gid, tmp_path):
    marker = tmp_path / "ran"
    res = run(drop, uid, gid, "touch", str(marker))
    assert res.returncode == 126 and "arborl-drop" in res.stderr
    assert not marker.exists()


def test_without_root_it_runs_nothing(drop):
    """The agent running the helper itself: the first step fails and the command never runs."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:  # pytest's tmp_path is root's only
        os.chmod(tmp, 0o777)
        inner = shutil.copy(drop, os.path.join(tmp, "arborl-drop"))
        marker = os.path.join(tmp, "ran")
        res = run(drop, "4242", "4242", inner, "4343", "4343", "touch", marker)
        assert res.returncode == 126 and "Operation not permitted" in res.stderr, res.stderr
        assert not os.path.exists(marker)


def test_exit_status_of_a_missing_command_is_127(drop):
    res = run(drop, "4242", "4242", "/nonexistent/cmd")
    assert res.returncode == 127 and "No such file" in res.stderr


def test_the_server_falls_back_to_setpriv_without_the_helper(drop):
    """Where no helper could be built (no C compiler) setpriv does the same switch; and a root
    target (an image whose agent is root) never goes to the helper, which refuses it."""
    from arborl.sandboxes.server.execute import SETPRIV, as_agent_argv

    assert as_agent_argv(["true"], 4242, 4343, drop) == [drop, "4242", "4343", "true"]
    fallback = as_agent_argv(["true"], 4242, None, None)
    assert fallback is not None and fallback[0] == SETPRIV and fallback[-1] == "true"
    res = run(*fallback[:-1], "/usr/bin/python3", "-c", STATUS)
    assert res.returncode == 0 and res.stdout.startswith("(4242, 4242, 4242) (4242, 4242, 4242) []")
    assert as_agent_argv(["true"], 0, 0, drop)[0] == SETPRIV
