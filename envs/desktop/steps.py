"""OSWorld setup steps (`config`, `postconfig`) run in a desktop sandbox.

Semantics follow OSWorld's SetupController and its in-VM server: commands run as the desktop
user with the display set; `launch` starts a program in the background; `open` opens a file
with its application and waits for its window; `execute` runs a command to completion (its
output can be saved into the episode's cache directory, where the `cache_file` getter reads
it; `until` repeats it until a return code or output appears); `activate_window` and
`close_window` find a window by title (substring, or exact with `strict`) or by class.
`python` in a command means the sandbox's `python3`. What a step cannot do is a
`DesktopSetupError`, naming the step.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arborl.tasks.osworld import OSWorldStep, cached_download, resolve_local

from ..base import TaskError
from ..sandboxed import TimedSandbox
from . import commands
from .bounds import OutputTooLarge, bounded_stream
from .commands import ActionError
from .screen import RUN_DIR, Window, XDisplay
from .support import open_with
from .trusted import run_root

log = logging.getLogger(__name__)
MAX_SAVED_OUTPUT = 8 << 20  # per stream, what an `execute` step may save to the cache dir


class DesktopSetupError(TaskError):
    """A setup step of the task could not be carried out (the task, not the model, is at fault).

    `environment_broken`: evaluation records such an episode as an environment error, never
    as a score (every agent would get 0 for it)."""

    environment_broken = True


@dataclass
class StepContext:
    """What setup steps and getters work with during one episode."""

    sandbox: TimedSandbox
    display: XDisplay
    cache_dir: Path
    base_dir: str | None = None
    task_id: str = ""
    download_cache: str | None = None
    launch_wait_s: float = 5.0
    open_wait_s: float = 30.0
    command_timeout_s: float = 120.0
    log: list[dict[str, Any]] = field(default_factory=list)
    _launched: int = 0


def argv(command: str | list[str], shell: bool = False) -> str | list[str]:
    """OSWorld's command forms as `Sandbox.exec` takes them (a str is run by bash)."""
    if isinstance(command, list):
        words = ["python3" if i == 0 and w == "python" else w for i, w in enumerate(command)]
        return shlex.join(words) if shell else words
    if shell:
        return re.sub(r"^python(\s)", r"python3\1", command)
    return argv(shlex.split(command))


async def _program_exists(ctx: StepContext, program: str) -> bool:
    r = await ctx.sandbox.exec(f"command -v {shlex.quote(program)}", timeout=10)
    return r.exit_code == 0


async def _start(ctx: StepContext, command: str | list[str], shell: bool) -> str:
    """Start `command` detached as the desktop user; returns the path of its log."""
    cmd = argv(command, shell)
    if isinstance(cmd, list) and not await _program_exists(ctx, cmd[0]):
        raise DesktopSetupError(
            f"{cmd[0]!r} is not installed in the sandbox image ({ctx.sandbox.spec.image})"
        )
    ctx._launched += 1
    logfile = f"{RUN_DIR}/app-{ctx._launched}.log"
    line = cmd if isinstance(cmd, str) else shlex.join(cmd)
    r = await ctx.sandbox.exec(
        f"mkdir -p {RUN_DIR}; cd ~; setsid bash -c {shlex.quote(line)} >{logfile} 2>&1 </dev/null &",
        timeout=30,
        env=ctx.display.env,
    )
    if not r.ok:
        raise DesktopSetupError(f"could not start {line!r}: {r.output.strip()[-300:]}")
    return logfile


async def _wait_for_window(ctx: StepContext, timeout: float, before: int, title: str | None) -> Window | None:
    """Poll the window list until a new window appears (with `title` in its title, if given)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        windows = await ctx.display.windows(ctx.sandbox)
        for w in windows:
            if title is not None and title in w.title:
                return w
        if title is None and len(windows) > before:
            return windows[0]
        if asyncio.get_running_loop().time() >= deadline:
            return None
        await asyncio.sleep(0.05)


async def _wait_active(ctx: StepContext, wid: str, timeout: float) -> Window | None:
    """Poll until the window manager has given window `wid` the focus; the window then."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        for w in await ctx.display.windows(ctx.sandbox):
            if w.id == wid and w.active:
                return w
        if asyncio.get_running_loop().time() >= deadline:
            return None
        await asyncio.sleep(0.05)


async def _activate(ctx: StepContext, wid: str, timeout: float) -> bool:
    """Activate window `wid` until it holds the focus; False if it did not within `timeout`.

    A window that an earlier step launched may still be mapping and take the focus after one
    activation (seen under load), so activate until it holds.
    """
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        await ctx.sandbox.exec(["xdotool", "windowactivate", wid], timeout=10, env=ctx.display.env)
        if await _wait_active(ctx, wid, 0.3) is not None:
            return True
        if asyncio.get_running_loop().time() >= deadline:
            return False


async def _tail(ctx: StepContext, path: str) -> str:
    r = await ctx.sandbox.exec(["tail", "-c", "600", path], timeout=10)
    return r.stdout.strip()


def find_windows(
    windows: list[Window], name: str, strict: bool = False, by_class: bool = False
) -> list[Window]:
    """Windows matching OSWorld's rule: class or title, exact (`strict`) or substring."""
    if by_class:
        return [w for w in windows if (w.wm_class == name if strict else name.lower() in w.wm_class.lower())]
    return [w for w in windows if (w.title == name if strict else name in w.title)]


async def run_step(ctx: StepContext, step: OSWorldStep) -> dict[str, Any]:
    """Run one setup step; returns what it did (for `info["setup"]`)."""
    p, kind = step.parameters, step.type
    if kind == "launch":
        before = len(await ctx.display.windows(ctx.sandbox))
        await _start(ctx, p["command"], bool(p.get("shell", False)))
        # OSWorld's launch does not wait; waiting for the window here keeps the first screenshot
        # from racing the application's start (a launch without a window costs launch_wait_s).
        w = await _wait_for_window(ctx, ctx.launch_wait_s, before, None)
        if w is not None:
            # ...and for the window manager to give it the focus: a key pressed before that
            # (a setup step's Ctrl+Alt+T) was lost in about one start in five under load. Its
            # title then, not the one it was mapped with (xterm's is "xterm" at first).
            w = await _wait_active(ctx, w.id, 2.0) or w
        return {"window": w.title if w else None}
    if kind == "open":
        path = str(p["path"])
        r = await ctx.sandbox.exec(["test", "-e", path], timeout=10)
        if r.exit_code != 0:
            raise DesktopSetupError(f"{path} does not exist in the sandbox")
        app = open_with(path)
        logfile = await _start(ctx, [app, path], False)
        name = Path(path.rstrip("/")).name or path
        w = await _wait_for_window(ctx, ctx.open_wait_s, 0, name)
        if w is None:
            raise DesktopSetupError(
                f"no window titled like {name!r} appeared within {ctx.open_wait_s:g}s "
                f"({app} said: {await _tail(ctx, logfile) or 'nothing'})"
            )
        return {"app": app, "window": w.title}
    if kind in ("execute", "command"):
        return await _execute(ctx, p)
    if kind == "sleep":
        await asyncio.sleep(min(float(p["seconds"]), 120.0))
        return {}
    if kind in ("activate_window", "close_window"):
        windows = await ctx.display.windows(ctx.sandbox)
        found = find_windows(windows, str(p["window_name"]), bool(p.get("strict")), bool(p.get("by_class")))
        if not found:
            # OSWorld logs this and goes on; so do we (the evaluator decides what it means).
            log.warning("%s: no window matches %r", kind, p["window_name"])
            return {"found": False}
        w = found[0]
        if kind == "close_window":
            # OSWorld's server runs `wmctrl -c`: a _NET_CLOSE_WINDOW request for that window,
            # which openbox turns into WM_DELETE_WINDOW (the app closes as if its x were
            # clicked). It never goes through the keyboard focus, which the agent's leftover
            # processes can hold: an Alt+F4 would close whichever window has it.
            # Root's clean environment runs it, so no wmctrl of the agent's on its PATH answers.
            r = await run_root(
                ctx.sandbox,
                ["wmctrl", "-i", "-c", w.id],
                what="wmctrl",
                display=ctx.display.display,
                timeout=10,
            )
            if not r.ok:
                raise DesktopSetupError(f"close_window: wmctrl failed: {r.output.strip()[-300:]}")
            closed = await _wait_gone(ctx, w.id, 5.0)
            if not closed:
                log.warning("close_window: window %r is still open after 5 s", w.title)
            return {"found": True, "window": w.title, "closed": closed}
        if not await _activate(ctx, w.id, 3.0):
            log.warning("%s: window %r did not take the focus", kind, w.title)
        return {"found": True, "window": w.title}
    if kind == "upload_file":
        for f in p["files"]:
            data = resolve_local(f["local_path"], ctx.base_dir).read_bytes()
            await ctx.sandbox.write_file(str(f["path"]), data)
        return {"files": len(p["files"])}
    if kind == "download":
        # OSWorld's VM server saves a relative path under its working directory, the user's home.
        for f in p["files"]:
            cached = cached_download(ctx.download_cache or "", ctx.task_id, f["url"], f["path"])
            try:
                data = cached.read_bytes()
            except OSError as e:
                raise DesktopSetupError(f"download: {f['path']}: the cached file is gone ({e})") from e
            await ctx.sandbox.write_file(commands.vm_path(str(f["path"])), data)
        return {"files": len(p["files"])}
    raise DesktopSetupError(f"setup step {kind!r} is not implemented")  # the loader refuses these


async def _wait_gone(ctx: StepContext, wid: str, timeout: float) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if all(w.id != wid for w in await ctx.display.windows(ctx.sandbox)):
            return True
        await asyncio.sleep(0.1)
    return False


#: Exit statuses of a shell that could not run the command at all (not found, not executable).
_CANNOT_RUN = (126, 127)


async def _replay_pyautogui(ctx: StepContext, code: str) -> dict[str, Any]:
    """A `python -c "import pyautogui; ..."` setup command, replayed with xdotool (see `commands`)."""
    try:
        lines = commands.replay_lines(code, ctx.display.width, ctx.display.height)
    except ActionError as e:
        raise DesktopSetupError(f"cannot replay this pyautogui setup code ({e}): {code[:200]!r}") from None
    act, _ = await ctx.display.run(ctx.sandbox, lines, settle_s=0.2, screenshot=False)
    if act.error:
        raise DesktopSetupError(f"pyautogui setup code failed: {act.error}")
    return {"pyautogui": len(lines)}


async def _execute(ctx: StepContext, p: dict[str, Any]) -> dict[str, Any]:
    until = p.get("until") or {}
    code = commands.pyautogui_code(p["command"])
    if code is not None and not until and not p.get("stdout") and not p.get("stderr"):
        return await _replay_pyautogui(ctx, code)
    options = commands.exec_args(p["command"], bool(p.get("shell", False)), ctx.display.env)
    cmd = commands.argv(p["command"], bool(p.get("shell", False)))
    attempts = 0
    while True:
        attempts += 1
        r = await ctx.sandbox.exec(timeout=ctx.command_timeout_s, max_output=MAX_SAVED_OUTPUT, **options)
        for stream in ("stdout", "stderr"):
            if p.get(stream):
                text = bounded_stream(r, stream, MAX_SAVED_OUTPUT, shlex.join(cmd)[:200])
                (ctx.cache_dir / str(p[stream])).write_text(text)
        done = not until or (
            ("returncode" in until and r.exit_code == until["returncode"])
            or ("stdout" in until and until["stdout"] in r.stdout)
            or ("stderr" in until and until["stderr"] in r.stderr)
        )
        if done or attempts >= 5:  # OSWorld gives `until` five tries
            break
        await asyncio.sleep(0.3)
    if r.exit_code in _CANNOT_RUN and not until:
        # Not the task's doing: a program the image lacks (a setup that silently did nothing
        # would score every agent 0). OSWorld checks no exit codes; other failures are noted.
        raise DesktopSetupError(
            f"{shlex.join(cmd)[:200]} could not run (exit {r.exit_code}): {r.output.strip()[-300:]}"
        )
    if r.exit_code != 0 or r.timed_out:
        # OSWorld does not check exit codes (setup often runs `pkill` and the like): note it.
        log.info("setup command %r exited %d: %s", cmd, r.exit_code, r.output[-300:])
    return {"exit_code": r.exit_code, "timed_out": r.timed_out, "attempts": attempts}


async def run_steps(ctx: StepContext, steps: tuple[OSWorldStep, ...], phase: str) -> None:
    """Run `steps` in order, recording each in `ctx.log`; errors name the step.

    Output past its bound is the task's fault in `config` (a DesktopSetupError: the agent has
    not acted yet) and the agent's in `postconfig` (OutputTooLarge, which scores 0)."""
    for i, step in enumerate(steps):
        try:
            outcome = await run_step(ctx, step)
        except DesktopSetupError as e:
            raise DesktopSetupError(f"{phase} step {i + 1} ({step.type}): {e}") from None
        except OutputTooLarge as e:
            if phase == "config":
                raise DesktopSetupError(f"{phase} step {i + 1} ({step.type}): {e}") from None
            raise OutputTooLarge(f"{phase} step {i + 1} ({step.type}): {e}") from None
        ctx.log.append({"phase": phase, "step": i + 1, "type": step.type, **outcome})
