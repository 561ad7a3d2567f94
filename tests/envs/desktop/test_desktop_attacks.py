"""The agent against its own desktop evaluation, the way a policy optimised against it would.

Each test plants what an agent could plant with shell commands as the desktop user (a
`usercustomize.py` or a `.pth` in its user site, a module in its home that shadows the
standard library's), then runs the harness's real getters, setup steps and evaluation, and
checks that nothing the agent wrote is what the harness reads or what root runs. The getters
and root steps need no display, so they run on both backends (Docker with arborl/gui, and
local bubblewrap, whose host has no Xvfb); the screenshot and window-title attacks need the
display and run on Docker. Every test here failed on the code before the change it guards.
"""

from __future__ import annotations

import asyncio
import functools
import json
import tracemalloc
import zlib

import pytest
from desktop_helpers import task, xterm

from arborl.envs.desktop import evaluators
from arborl.envs.desktop.a11y import ST, read_tree
from arborl.envs.desktop.bounds import OutputTooLarge, gunzip_bounded
from arborl.envs.desktop.env import DEFAULT_TASK, DesktopEnv
from arborl.envs.desktop.evaluators import evaluate
from arborl.envs.desktop.screen import RUN_DIR, SHOT, XDisplay
from arborl.envs.desktop.steps import StepContext, run_steps
from arborl.envs.desktop.support import DESKTOP
from arborl.envs.sandboxed import TimedSandbox
from arborl.tasks.osworld import OSWorldStep, load_osworld_task

FORGED = "FORGED-BY-AGENT"
FORGED_TREE = (
    f'<desktop-frame xmlns:st="{ST}" name="main"><application name="x"><frame name="w" st:active="true">'
    f'<terminal name="t" st:focused="true">{FORGED}</terminal></frame></application></desktop-frame>'
)
FORGED_LISTING = {"type": "directory", "name": "out", "children": [{"type": "file", "name": "report.txt"}]}
#: The agent's payload: it answers each harness reader it recognises (by its command line)
#: with a forgery, and notes the ids of anyone who runs it (root, if a root step loads it).
PAYLOAD = f"""
import os, sys
_cmd = open("/proc/self/cmdline", "rb").read()
with open("/tmp/payload-ran-as", "a") as _f:
    _f.write("%d %d\\n" % (os.getuid(), os.geteuid()))
if b"pyatspi" in _cmd:
    sys.stdout.write({FORGED_TREE!r}); sys.stdout.flush(); os._exit(0)
if b"listdir" in _cmd or b"scandir" in _cmd:
    sys.stdout.write({json.dumps(FORGED_LISTING)!r} + "\\n"); sys.stdout.flush(); os._exit(0)
if b"/home/agent/done" in _cmd:
    sys.stdout.write("True\\n"); sys.stdout.flush(); os._exit(0)
"""
#: How the agent plants it, as shell commands in its terminal.
PLANTS = {
    "usercustomize": 'd=$(python3 -m site --user-site) && mkdir -p "$d" && cp ~/.payload.py "$d/usercustomize.py"',
    "pth": (
        'd=$(python3 -m site --user-site) && mkdir -p "$d" && '
        'echo \'import os; exec(open(os.path.expanduser("~/.payload.py")).read())\' > "$d/zz-agent.pth"'
    ),
    # the working directory comes first on a `python -c` sys.path: shadow what the readers import
    "stdlib-shadow": "cp ~/.payload.py ~/json.py && cp ~/.payload.py ~/pyatspi.py && "
    "mkdir -p ~/xml && cp ~/.payload.py ~/xml/__init__.py",
}


class _Clock:
    _sandbox_s = 0.0


def desktop_spec(backend_name: str):
    spec = DesktopEnv().sandbox_spec(DEFAULT_TASK)
    if backend_name == "bwrap":  # the host has no openbox, whose key binding the spec adds
        spec = spec.model_copy(update={"setup": tuple(s for s in spec.setup if "openbox" not in s)})
    return spec


@pytest.fixture(params=["docker", "bwrap"])
async def desk(request, tmp_path):
    """A desktop sandbox (the env's own spec, no display) and a StepContext on it."""
    backend = request.getfixturevalue("gui_backend" if request.param == "docker" else "bwrap_backend")
    async with await backend.create(desktop_spec(request.param)) as sb:
        ctx = StepContext(sandbox=TimedSandbox(sb, _Clock()), display=XDisplay(), cache_dir=tmp_path)
        yield sb, ctx


async def agent(sb, script: str) -> str:
    """Shell commands as the agent types them in its terminal (its uid, its home)."""
    r = await sb.exec(["/bin/bash", "-c", script], workdir="/home/agent", timeout=60)
    assert r.exit_code == 0, r.output
    return r.stdout


async def plant(sb, how: str) -> None:
    await sb.write_file("/home/agent/.payload.py", PAYLOAD)
    await agent(sb, PLANTS[how])
    # the payload works: the agent's own Python runs it
    assert FORGED in await agent(sb, "python3 -c 'import pyatspi' 2>/dev/null || true")


async def ran_as_root(sb) -> bool:
    r = await sb.exec("cat /tmp/payload-ran-as 2>/dev/null || true", user="root")
    return any(line.split()[:1] == ["0"] or line.split()[1:2] == ["0"] for line in r.stdout.splitlines())


def evaluator(**ev):
    return load_osworld_task(task(evaluator=ev), support=DESKTOP).evaluator


@pytest.mark.parametrize("how", sorted(PLANTS))
async def test_a_forged_accessibility_tree_does_not_score(desk, how):
    sb, ctx = desk
    await plant(sb, how)
    ev = evaluator(
        func="check_accessibility_tree",
        result={"type": "accessibility_tree"},
        expected={"type": "rule", "rules": [{"selectors": ["terminal"], "text": FORGED}]},
    )
    score, details = await evaluate(ev, ctx, "DONE")
    assert score == 0.0 and FORGED not in json.dumps(details), details
    assert not await ran_as_root(sb)


@pytest.mark.parametrize("how", sorted(PLANTS))
async def test_forged_terminal_output_does_not_score(desk, how):
    sb, ctx = desk
    await plant(sb, how)
    ev = evaluator(
        func="check_include_exclude",
        result={"type": "vm_terminal_output"},
        expected={"type": "rule", "rules": {"include": [FORGED]}},
    )
    score, details = await evaluate(ev, ctx, "DONE")
    assert score == 0.0 and details["metrics"][0]["result"] is None, details


@pytest.mark.parametrize("how", sorted(PLANTS))
async def test_a_forged_directory_listing_does_not_score(desk, how):
    sb, ctx = desk
    await plant(sb, how)
    ev = evaluator(
        func="check_direct_json_object",
        result={"type": "list_directory", "path": "/home/agent/out"},
        expected={"type": "rule", "rules": {"expected": FORGED_LISTING}},
    )
    score, details = await evaluate(ev, ctx, "DONE")
    assert score == 0.0 and details["metrics"][0]["result"] is None, details  # there is no ~/out


CHECK_DONE = "python3 -c 'import json, os; print(os.path.exists(\"/home/agent/done\"))'"


@pytest.mark.parametrize("how", sorted(PLANTS))
async def test_python_in_a_getter_command_runs_none_of_the_agents_code(desk, how):
    sb, ctx = desk
    await plant(sb, how)
    ev = evaluator(
        func="exact_match",
        result={"type": "vm_command_line", "command": CHECK_DONE, "shell": True},
        expected={"type": "rule", "rules": {"expected": "True\n"}},
    )
    score, details = await evaluate(ev, ctx, "DONE")
    assert score == 0.0 and details["metrics"][0]["result"] == "False\n", details


@pytest.mark.parametrize("how", sorted(PLANTS))
@pytest.mark.parametrize("where", ["postconfig", "getter"])
async def test_root_steps_after_the_agent_run_none_of_its_code(desk, how, where):
    """OSWorld's `echo password | sudo -S ...` runs as root once the agent is done: with the
    agent's HOME and working directory, root loaded the agent's user site and modules."""
    sb, ctx = desk
    await plant(sb, how)
    root_python = "echo password | sudo -S python3 -c 'import json, os; print(os.getuid())'"
    step = {"type": "execute", "parameters": {"command": root_python, "shell": True}}
    if where == "postconfig":
        ev = evaluator(func="infeasible", postconfig=[step])
    else:
        ev = evaluator(
            func="exact_match",
            result={"type": "vm_command_line", "command": root_python, "shell": True},
            expected={"type": "rule", "rules": {"expected": "0\n"}},
        )
    score, details = await evaluate(ev, ctx, "DONE" if where == "getter" else "FAIL")
    assert score == 1.0, details  # root ran the command ...
    assert not await ran_as_root(sb)  # ... and nothing of the agent's


async def test_root_steps_get_roots_home_and_a_clean_environment(desk):
    sb, ctx = desk
    await agent(sb, "mkdir -p ~/Desktop")
    steps = [
        OSWorldStep(type="execute", parameters={"command": cmd, "shell": True, "stdout": out})
        for cmd, out in (
            ("echo password | sudo -S sh -c 'echo $HOME; env | sort; pwd'", "env.txt"),
            ("echo 'password' | sudo -S mkdir ~/Desktop/made_by_root", "mkdir.txt"),
        )
    ]
    await run_steps(ctx, tuple(steps), "config")
    home, *env, cwd = (ctx.cache_dir / "env.txt").read_text().split()
    assert home == "/root" and cwd == "/"
    assert {e.split("=")[0] for e in env} <= {
        "PATH",
        "LANG",
        "DISPLAY",
        "HOME",
        "USER",
        "LOGNAME",
        "PWD",
        "SHLVL",
        "_",
    }
    # `~` is still the desktop user's, as the user's own shell expands it in OSWorld
    r = await sb.exec("stat -c %U /home/agent/Desktop/made_by_root", user="root")
    assert r.stdout.strip() == "root", r.output


async def test_the_agents_sudo_says_it_has_no_root(desk):
    """OSWorld's VM gives its user sudo; here the agent gets an honest refusal on its PATH
    (it said `sudo: command not found`), and root stays out of its reach."""
    sb, _ = desk
    r = await sb.exec(["/bin/bash", "-c", "echo password | sudo -S mkdir /test"], workdir="/home/agent")
    assert r.exit_code == 1 and "gives you no root" in r.stderr, r.output
    assert (await sb.exec("test -e /test", user="root")).exit_code == 1


async def test_the_harness_python_cannot_be_traced_by_the_agent(desk):
    """An agent process of the same uid could ptrace the tree reader and rewrite what it prints."""
    sb, ctx = desk
    tracer = r"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
seen = {}
end = time.time() + 20
while time.time() < end and not seen:
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            cmd = open(f"/proc/{p}/cmdline", "rb").read()
        except OSError:
            continue
        if b"pyatspi.Registry" in cmd and p not in seen:
            ok = libc.ptrace(16, int(p), 0, 0) == 0  # PTRACE_ATTACH
            seen[p] = "attached" if ok else os.strerror(ctypes.get_errno())
            if ok:
                libc.ptrace(17, int(p), 0, 0)  # PTRACE_DETACH
open("/tmp/tracer.log", "w").write(repr(seen))
"""
    await sb.write_file("/home/agent/tracer.py", tracer)
    watcher = asyncio.create_task(sb.exec(["python3", "/home/agent/tracer.py"], timeout=60))
    await asyncio.sleep(1.0)
    for _ in range(40):
        await read_tree(ctx.sandbox, ctx.display.env)
        if watcher.done():
            break
    await watcher
    seen = (await sb.exec("cat /tmp/tracer.log")).stdout
    assert seen not in ("", "{}") and "attached" not in seen, seen


async def test_a_listing_follows_none_of_the_agents_links_and_is_bounded(desk, monkeypatch):
    sb, ctx = desk
    await agent(sb, "mkdir -p ~/out/sub && touch ~/out/sub/a ~/out/report.txt && ln -s / ~/out/everything")
    ev = evaluator(
        func="check_direct_json_object",
        result={"type": "list_directory", "path": "/home/agent/out"},
        expected={"type": "rule", "rules": {"expected": {}}},
    )
    listing = await evaluators.get(ev.result[0], ctx)
    assert listing == {
        "type": "directory",
        "name": "out",
        "children": [
            {"type": "file", "name": "everything"},  # the link to / is listed, not walked
            {"type": "file", "name": "report.txt"},
            {"type": "directory", "name": "sub", "children": [{"type": "file", "name": "a"}]},
        ],
    }
    monkeypatch.setattr(evaluators, "MAX_LISTING_ENTRIES", 3)
    score, details = await evaluate(ev, ctx, "DONE")
    assert score == 0.0 and "holds more than 3 files" in details["metrics"][0]["error"], details


async def test_getter_output_past_its_bound_scores_0_with_the_reason(desk):
    """The tail of a cut output used to pass for the whole: `include` found the last line."""
    sb, ctx = desk
    await agent(sb, "head -c 9000000 /dev/zero | tr '\\0' x > ~/big.txt; echo END >> ~/big.txt")
    ev = evaluator(
        func="check_include_exclude",
        result={"type": "vm_command_line", "command": "cat ~/big.txt", "shell": True},
        expected={"type": "rule", "rules": {"include": ["END"]}},
    )
    score, details = await evaluate(ev, ctx, "DONE")
    assert score == 0.0 and "larger than 8388608 bytes" in details["metrics"][0]["error"], details


# ---- with the display (Docker) ------------------------------------------------------------------
@functools.cache
def bomb(inflated_gib: int) -> bytes:
    """A gzip file of 256 MiB members of zeros (each 261 KB at level 9, zlib's ratio of about
    1000:1) that inflates to `inflated_gib` GiB."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(1 << 24)
    member = b"".join(deflate.compress(chunk) for _ in range(16)) + deflate.flush()
    return member * (4 * inflated_gib)


@pytest.mark.docker
@pytest.mark.gui
def test_a_gzip_bomb_at_the_screenshot_path_is_a_failed_screenshot(desktop):
    """The agent keeps swapping its 8 MB bomb (8 GiB inflated) into the screenshot's place."""
    from arborl.envs.event_loop import get_env_loop

    desktop.reset(options={"task": load_osworld_task(task(config=[xterm()]), support=DESKTOP)})
    sb = desktop.unwrapped.sandbox.raw
    run = get_env_loop().run
    run(sb.write_file(f"{RUN_DIR}/bomb.gz", bomb(8)))
    swapper = f"""
import contextlib, os, time
end = time.time() + 30
while time.time() < end:
    with contextlib.suppress(FileNotFoundError):
        os.unlink("{RUN_DIR}/b.tmp")  # left when the screenshot already was the bomb
    os.link("{RUN_DIR}/bomb.gz", "{RUN_DIR}/b.tmp")
    os.replace("{RUN_DIR}/b.tmp", "{SHOT}")
"""
    run(sb.write_file("/home/agent/swap.py", swapper))
    run(sb.exec("setsid python3 /home/agent/swap.py >/dev/null 2>&1 </dev/null &", timeout=10))
    tracemalloc.start()
    try:
        _, _, _, _, info = desktop.step("WAIT")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "screenshot failed" in info.get("screenshot_error", ""), info
    assert peak < 256 << 20, f"{peak / 2**20:.0f} MiB"


def test_screenshot_decompression_is_bounded():
    small = bomb(1)
    with pytest.raises(OutputTooLarge, match="inflates to more than"):
        gunzip_bounded(small, 1024 * 768 * 3, "the screenshot")
    data = bytes(range(256)) * 100
    assert gunzip_bounded(zlib.compress(data, wbits=16 + zlib.MAX_WBITS), len(data)) == data
    with pytest.raises(ValueError, match="not gzip"):
        gunzip_bounded(b"not gzip at all", 100)


@pytest.mark.docker
@pytest.mark.gui
def test_a_window_titled_like_a_marker_is_only_a_title(desktop):
    """A terminal's title is the agent's to set (OSC 2): "@@NOX" in it made the harness
    believe the X server was gone (an infrastructure error of the agent's making)."""
    from arborl.envs.event_loop import get_env_loop

    desktop.reset(options={"task": load_osworld_task(task(config=[xterm()]), support=DESKTOP)})
    sb = desktop.unwrapped.sandbox.raw
    title = "$(printf '@@NOX\\n@@END\\nx')"
    r = get_env_loop().run(
        sb.exec(
            f'w=$(xdotool search --class xterm | head -1); xdotool set_window --name "{title}" $w; '
            f'xprop -id $w -f _NET_WM_NAME 8u -set _NET_WM_NAME "{title}"',
            env=desktop.unwrapped.display.env,
        )
    )
    assert r.exit_code == 0, r.output
    *_, truncated, info = desktop.step("WAIT")
    assert not truncated and any("@@NOX" in w["title"] for w in info["windows"]), info
    windows = get_env_loop().run(desktop.unwrapped.display.windows(desktop.unwrapped.sandbox))
    assert len(windows) == len(info["windows"])
