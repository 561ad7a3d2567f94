"""The X display inside a desktop sandbox: start it, act on it, look at it.

Each episode's sandbox runs its own X server: `Xvfb :1` (as root, so the agent's apps cannot
kill it), the `openbox` window manager (without one `xdotool windowactivate` fails and dialogs
have no frames), then the task's applications as the agent user. An in-place sandbox reset
kills all of it, so every episode starts a fresh display (~0.3 s) on a clean file system.

A step costs two round trips over the sandbox's channel: one bash script that runs the
actions (xdotool), waits `settle_s` for the apps to redraw, then takes the screenshot
(ImageMagick `import`, raw RGB, gzip -1) while it lists the windows (xprop/xwininfo); and one
`read_file` of the screenshot. Raw RGB + gzip measured ~60 ms against ~115 ms for a PNG
encoded in the container, and decodes on the host without an image library.

The step script runs as the agent, so the screenshot file and the script's output are the
agent's to replace: the screenshot is read and inflated to at most one screen's bytes (a
gzip bomb there is a failed screenshot, not a MemoryError), the output's markers must stand
on lines of their own (xprop escapes newlines in titles), and the window list that getters
and setup steps use is read again by root (`windows`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from arborl.sandboxes import SandboxError

from ..sandboxed import TimedSandbox
from .bounds import OutputTooLarge, gunzip_bounded
from .trusted import run_root

RUN_DIR = "/tmp/.arborl"  # per-episode files: logs, the screenshot (reset wipes /tmp)
SHOT = f"{RUN_DIR}/screen.rgb.gz"
BUS = f"unix:path={RUN_DIR}/session-bus"  # the D-Bus session bus of an a11y display
#: The sound volume a desktop starts at. OSWorld's VM snapshot has it below the maximum (its
#: task 28cc3b7e asks to turn a "too small" volume up to 100 %); the exact level is ours.
START_VOLUME = "40%"


MAX_LISTING = 1 << 20  # bytes of window list (and action errors) the harness reads per step
_NOX = re.compile(r"^@@NOX$", re.MULTILINE)
_UNMARK = "sed 's/^@@/ @@/'"  # files the agent can write never print a marker line


class DisplayError(SandboxError):
    """The X server in the sandbox is gone or cannot start; a reset (or a new sandbox) fixes it."""


@dataclass(frozen=True)
class Window:
    """A top-level application window as the window manager lists it."""

    id: str
    title: str
    wm_class: str
    x: int  # client area, absolute screen coordinates (title bar and borders excluded)
    y: int
    width: int
    height: int
    active: bool = False
    visible: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        flags = " [active]" if self.active else ""
        flags += "" if self.visible else " [minimized]"
        return (
            f'- "{self.title}" ({self.wm_class or "?"}) at x={self.x}, y={self.y}, '
            f"size {self.width}x{self.height}{flags}"
        )


@dataclass
class Screen:
    """What one capture saw: the pixels (None if the screenshot failed) and the windows."""

    image: np.ndarray | None
    windows: list[Window] = field(default_factory=list)
    error: str | None = None

    def describe(self, width: int, height: int) -> str:
        if not self.windows:
            listing = "No windows are open."
        else:
            listing = "Open windows (topmost first):\n" + "\n".join(w.describe() for w in self.windows)
        return f"Screen: {width}x{height}. {listing}"


@dataclass
class ActResult:
    """How the actions of a step went: how many ran, and the error of the one that failed."""

    completed: int
    error: str | None = None


def _q(x: Any) -> str:
    return shlex.quote(str(x))


class XDisplay:
    """Starts and drives the X display `display` of one sandbox (commands over its channel)."""

    def __init__(self, width: int = 1024, height: int = 768, display: str = ":1", a11y: bool = False) -> None:
        self.width, self.height, self.display = width, height, display
        self.number = display.lstrip(":").split(".")[0]
        self.a11y = a11y

    @property
    def env(self) -> dict[str, str]:
        """The environment of the display's programs; with `a11y`, the session bus's address
        and the ATK bridge on (GTK apps then register with AT-SPI)."""
        if not self.a11y:
            return {"DISPLAY": self.display}
        return {"DISPLAY": self.display, "DBUS_SESSION_BUS_ADDRESS": BUS, "NO_AT_BRIDGE": "0"}

    # ---- start ----------------------------------------------------------------------------
    def _server_script(self) -> str:
        n = self.number
        return (
            f"rm -f /tmp/.X{n}-lock /tmp/.X11-unix/X{n}; mkdir -p /tmp/.X11-unix {RUN_DIR}; "
            f"chmod 1777 /tmp/.X11-unix {RUN_DIR}; "
            # -noreset: the server would restart when its last client leaves (before openbox).
            f"setsid Xvfb :{n} -screen 0 {self.width}x{self.height}x24 -nolisten tcp -noreset -dpi 96 "
            f">{RUN_DIR}/xvfb.log 2>&1 </dev/null & "
            f"for i in $(seq 250); do DISPLAY=:{n} xdpyinfo >/dev/null 2>&1 && exit 0; sleep 0.02; done; "
            f"echo 'Xvfb did not come up:' >&2; tail -5 {RUN_DIR}/xvfb.log >&2; exit 1"
        )

    def _wm_script(self) -> str:
        # Openbox sets _NET_SUPPORTING_WM_CHECK at once but _NET_WORKAREA only when its start-up
        # is over (~0.7 s here); a window mapped in between stalls 5 s (measured), so wait for it.
        # Meanwhile the session's sound server starts (where the image has PulseAudio: a null
        # sink, no sound card) at OSWorld's snapshot-like volume, below the maximum.
        ready = "xprop -root _NET_WORKAREA 2>/dev/null | grep -q ' = '"
        audio = (
            "command -v pulseaudio >/dev/null && pulseaudio --start --exit-idle-time=-1 && "
            f"pactl set-sink-volume @DEFAULT_SINK@ {START_VOLUME}"
        )
        return (
            f"setsid openbox --sm-disable >{RUN_DIR}/openbox.log 2>&1 </dev/null & "
            f"({audio}) >{RUN_DIR}/audio.log 2>&1 </dev/null & a=$!; "
            f"up=1; for i in $(seq 500); do {ready} && {{ up=0; break; }}; sleep 0.02; done; wait $a; "
            f"[ $up = 0 ] && exit 0; "
            f"echo 'openbox did not come up:' >&2; tail -5 {RUN_DIR}/openbox.log >&2; exit 1"
        )

    def _a11y_script(self) -> str:
        # A session bus, then AT-SPI's bus launcher (its own bus + the registry daemon); ready
        # when the launcher answers org.a11y.Bus.GetAddress on the session bus.
        ready = (
            "dbus-send --session --print-reply --dest=org.a11y.Bus /org/a11y/bus "
            "org.a11y.Bus.GetAddress >/dev/null 2>&1"
        )
        return (
            f"dbus-daemon --session --fork --nopidfile --address={BUS} >{RUN_DIR}/dbus.log 2>&1 </dev/null && "
            f"(setsid /usr/libexec/at-spi-bus-launcher --launch-immediately >{RUN_DIR}/at-spi.log 2>&1 </dev/null &) && "
            f"for i in $(seq 250); do {ready} && exit 0; sleep 0.02; done; "
            f"echo 'the AT-SPI bus did not come up:' >&2; tail -5 {RUN_DIR}/dbus.log {RUN_DIR}/at-spi.log >&2; exit 1"
        )

    async def start(self, sb: TimedSandbox) -> None:
        """Start the X server (root), with `a11y` a session bus and AT-SPI (agent), and the
        window manager (agent); raises DisplayError."""
        r = await sb.exec(self._server_script(), user="root", timeout=20, env=self.env)
        if not r.ok:
            raise DisplayError(f"the X server did not start: {r.output.strip()[-500:]}")
        if self.a11y:
            r = await sb.exec(self._a11y_script(), timeout=20, env=self.env)
            if not r.ok:
                raise DisplayError(f"the accessibility bus did not start: {r.output.strip()[-500:]}")
        r = await sb.exec(self._wm_script(), timeout=20, env=self.env)
        if not r.ok:
            raise DisplayError(f"the window manager did not start: {r.output.strip()[-500:]}")

    async def alive(self, sb: TimedSandbox) -> bool:
        r = await sb.exec(["xdpyinfo"], timeout=10, env=self.env, max_output=256)
        return r.exit_code == 0

    # ---- act and look ---------------------------------------------------------------------
    _LIST_WINDOWS = (
        "root=$(xprop -root _NET_CLIENT_LIST_STACKING _NET_ACTIVE_WINDOW 2>/dev/null) || echo '@@NOX'; "
        'echo "@@ROOT $(echo "$root" | tr "\\n" " ")"; '
        "for w in $(echo \"$root\" | sed -n 's/^_NET_CLIENT_LIST_STACKING.*# //p' | tr -d ','); do "
        # xwininfo prints the title raw (newlines too): keep only the lines parsed below
        'echo "@@WIN $w"; xwininfo -id "$w" 2>/dev/null | grep -E "^  (Absolute upper-left [XY]|Width|Height|Map State):"; '
        'xprop -id "$w" WM_CLASS _NET_WM_NAME WM_NAME 2>/dev/null; '
        "done; echo '@@END'"
    )

    def script(self, action_lines: Sequence[Sequence[str]], settle_s: float, screenshot: bool = True) -> str:
        """The bash script of one step: actions, settle, screenshot + window list."""
        parts = [f"mkdir -p {RUN_DIR} 2>/dev/null"]
        if action_lines:
            body = []
            for i, lines in enumerate(action_lines):
                body.append(f"echo '@@A {i}'")
                body.extend(lines)
            parts.append("( set -e\n" + "\n".join(body) + f"\n) 2>{RUN_DIR}/act.err")
            parts.append('echo "@@ACT $?"')
            parts.append(f"echo '@@ERR'; head -c 1500 {RUN_DIR}/act.err | {_UNMARK}; echo; echo '@@ERREND'")
        if settle_s > 0:
            parts.append(f"sleep {settle_s:.3f}")
        if screenshot:
            parts.append(
                f"( import -window root -depth 8 rgb:- 2>{RUN_DIR}/shot.err | gzip -1 > {SHOT}.tmp; "
                f'echo "${{PIPESTATUS[0]}}" > {RUN_DIR}/shot.rc; mv -f {SHOT}.tmp {SHOT} ) &'
            )
        parts.append(self._LIST_WINDOWS)
        if screenshot:
            parts.append(
                f'wait; echo "@@SHOT $(head -c 20 {RUN_DIR}/shot.rc | tr -dc 0-9)"; head -c 300 {RUN_DIR}/shot.err | {_UNMARK}'
            )
        return "\n".join(parts)

    async def run(
        self,
        sb: TimedSandbox,
        action_lines: Sequence[Sequence[str]] = (),
        *,
        settle_s: float = 0.0,
        timeout: float = 60.0,
        screenshot: bool = True,
    ) -> tuple[ActResult, Screen]:
        """Run the actions (one list of shell lines per action), then capture the screen.

        Raises DisplayError when the X server is gone.
        """
        r = await sb.exec(
            self.script(action_lines, settle_s, screenshot),
            timeout=timeout,
            env=self.env,
            max_output=MAX_LISTING,
        )
        out = r.stdout
        self._check_x(out)
        act = _parse_act(out, len(action_lines), r.timed_out)
        windows = parse_windows(out)
        listing_error = (
            f"the window list is larger than {MAX_LISTING} bytes; it was cut" if r.truncated else None
        )
        if not screenshot:
            return act, Screen(None, windows, error=listing_error)
        m = re.search(r"^@@SHOT (\d+)\s*$(.*)", out, re.MULTILINE | re.DOTALL)
        if m is None or m.group(1) != "0":
            detail = m.group(2).strip()[:200] if m else (r.stderr.strip()[-200:] or "no output")
            return act, Screen(None, windows, error=f"screenshot failed: {detail}")
        size = self.height * self.width * 3
        try:
            # gzip -1 of incompressible pixels adds ~0.03 %; anything past this is not ours
            raw = gunzip_bounded(
                await sb.read_file(SHOT, max_bytes=size + size // 64 + 4096), size, "the screenshot"
            )
            image = np.frombuffer(raw, np.uint8).reshape(self.height, self.width, 3)
        except (SandboxError, OSError, ValueError, OutputTooLarge) as e:
            if isinstance(e, DisplayError):
                raise
            return act, Screen(None, windows, error=f"screenshot failed: {type(e).__name__}: {e}")
        return act, Screen(image.copy(), windows, error=listing_error)

    async def windows(self, sb: TimedSandbox) -> list[Window]:
        """The window list alone, read by root (no screenshot, no agent process in the way);
        raises DisplayError when X is gone, OutputTooLarge past `MAX_LISTING` bytes."""
        r = await run_root(
            sb,
            ["/bin/bash", "-c", self._LIST_WINDOWS],
            what="the window list",
            display=self.display,
            timeout=30,
            max_output=MAX_LISTING,
        )
        self._check_x(r.stdout)
        return parse_windows(r.stdout)

    def _check_x(self, listing: str) -> None:
        if _NOX.search(listing):
            raise DisplayError(f"the X display {self.display} is not running (the X server has exited)")

    def blank(self) -> np.ndarray:
        """What the observation shows when there is no screenshot."""
        return np.zeros((self.height, self.width, 3), np.uint8)


def _parse_act(out: str, n: int, timed_out: bool) -> ActResult:
    if n == 0:
        return ActResult(0)
    started = [int(x) for x in re.findall(r"^@@A (\d+)$", out, re.MULTILINE)]
    m = re.search(r"^@@ACT (\d+)$", out, re.MULTILINE)
    if m is None:
        why = "the step timed out" if timed_out else "the actions did not finish"
        return ActResult(max(0, len(started) - 1), error=why)
    if m.group(1) == "0":
        return ActResult(n)
    err = re.search(r"^@@ERR\n(.*?)\n?@@ERREND", out, re.MULTILINE | re.DOTALL)
    failed = started[-1] if started else 0
    detail = err.group(1).strip() if err else ""
    return ActResult(
        failed, error=f"action {failed + 1} failed (exit code {m.group(1)}): {detail or 'no message'}"
    )


_GEOMETRY = (
    ("x", "Absolute upper-left X"),
    ("y", "Absolute upper-left Y"),
    ("width", "Width"),
    ("height", "Height"),
)
_XPROP_STR = re.compile(r"^(\w+)\([\w ]+\) = (.*)$", re.MULTILINE)


def _xprop_strings(value: str) -> list[str]:
    """The quoted strings of an xprop value (`"a", "b"`); xprop escapes `"` and `\\`."""
    return [re.sub(r"\\(.)", r"\1", s) for s in re.findall(r'"((?:[^"\\]|\\.)*)"', value)]


def parse_windows(out: str) -> list[Window]:
    """Windows from the listing part of a step script's output, topmost first."""
    root = re.search(r"^@@ROOT (.*)$", out, re.MULTILINE)
    active = ""
    if root:
        m = re.search(r"_NET_ACTIVE_WINDOW\(WINDOW\): window id # (0x[0-9a-f]+)", root.group(1))
        active = m.group(1) if m else ""
    listing = re.split(r"^@@END$", out, maxsplit=1, flags=re.MULTILINE)[0]
    windows = []
    for block in re.split(r"^@@WIN ", listing, flags=re.MULTILINE)[1:]:
        wid = block.split("\n", 1)[0].strip()
        geom = {
            key: int(m.group(1))
            for key, pat in _GEOMETRY
            if (m := re.search(rf"^\s*{pat}:\s*(-?\d+)", block, re.MULTILINE))
        }
        if len(geom) < 4:
            continue  # the window went away while it was listed
        props = {name: _xprop_strings(value) for name, value in _XPROP_STR.findall(block)}
        title = (props.get("_NET_WM_NAME") or props.get("WM_NAME") or [""])[0]
        wm_class = (props.get("WM_CLASS") or ["", ""])[-1]
        visible = "IsViewable" in block
        windows.append(Window(wid, title, wm_class, active=_same_id(wid, active), visible=visible, **geom))
    windows.reverse()  # _NET_CLIENT_LIST_STACKING is bottom to top
    return windows


def _same_id(a: str, b: str) -> bool:
    try:
        return bool(a and b) and int(a, 16) == int(b, 16)
    except ValueError:
        return False
