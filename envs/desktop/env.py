"""`arborl/Desktop-v0`: a Linux desktop in a container, driven with pyautogui-style actions.

    env = gymnasium.make("arborl/Desktop-v0")
    obs, info = env.reset(options={"task": load_osworld_task("task.json")})
    obs["screenshot"]          # uint8 [768, 1024, 3]
    obs["messages"]            # the instruction (at reset) and the window list, as chat messages
    obs, reward, terminated, truncated, info = env.step("```python\\npyautogui.click(300, 200)\\n```")

Each episode gets a sandbox of the `arborl/gui` image with its own X display (Xvfb + openbox),
the task's OSWorld `config` steps run, and the model acts with pyautogui calls, executed by
xdotool (`actions.py`). DONE or FAIL ends the episode and runs the task's OSWorld evaluator
(`evaluators.py`); the score is the reward. A budget wrapper's cut-off evaluates too.

Reset reuses the previous episode's sandbox when it can: an in-place reset (every process
killed, the home directory and /tmp restored) and a fresh X server; a sandbox whose display
cannot start again is replaced by a new container.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from gymnasium import spaces

from arborl.sandboxes import Limits, SandboxCrashed, SandboxSpec, SandboxUnresponsive
from arborl.tasks.osworld import DesktopTask, check_task, load_osworld_task

from ..base import Step, TaskError, stable_hash
from ..images import OBS_TYPES, CorruptImage, ImageBounds, ObsType, multimodal_observation_space, with_image
from ..sandboxed import SandboxEnv
from ..spaces import UnicodeText, chat_observation_space
from .a11y import linearize, read_tree
from .actions import ActionError, describe, parse_actions, to_commands
from .bounds import OutputTooLarge
from .commands import AGENT_PATH, SHIM_DIR, SUDO_SHIM
from .evaluators import evaluate, uses_a11y
from .screen import DisplayError, Screen, XDisplay
from .steps import StepContext, run_steps
from .support import DESKTOP
from .trusted import INSTALL_HARNESS_PYTHON

log = logging.getLogger(__name__)

SYSTEM_PROMPT = """\
You operate a Linux desktop (screen {width}x{height} pixels, origin at the top left) to complete \
the user's task. After each of your replies you get a screenshot and the list of open windows.

Reply with Python calls of the pyautogui API in a ```python code block, for example:
```python
pyautogui.click(512, 384)
pyautogui.write('hello')
pyautogui.hotkey('ctrl', 's')
```
Supported: click(x, y, clicks=1, button='left'), doubleClick(x, y), rightClick(x, y), \
moveTo(x, y), dragTo(x, y), scroll(clicks, x, y), write(text), press(key, presses=1), \
hotkey(key, ...), keyDown(key), keyUp(key), time.sleep(seconds). Only literal arguments; \
no variables or other code.
Reply WAIT to wait a moment, DONE when the task is complete, FAIL if it cannot be done."""

HOME = "/home/agent"
ObservationType = Literal["screenshot", "a11y_tree", "screenshot_a11y_tree"]
OBSERVATION_TYPES: tuple[str, ...] = ("screenshot", "a11y_tree", "screenshot_a11y_tree")
#: The OSWorld observation type of each `obs_type` (what a vision-language policy is shown).
_OBSERVATION_OF: dict[str, ObservationType] = {
    "text": "a11y_tree",
    "image": "screenshot",
    "both": "screenshot_a11y_tree",
}
#: Desktop defaults written into the home directory of every desktop sandbox: no blinking
#: cursor or animations (screenshots of the same state are equal), and which app opens what
#: when a file is double-clicked in the file manager.
DESKTOP_FILES = {
    f"{HOME}/.config/gtk-3.0/settings.ini": (
        "[Settings]\ngtk-cursor-blink=false\ngtk-enable-animations=false\ngtk-recent-files-enabled=false\n"
    ),
    f"{HOME}/.config/mimeapps.list": (
        "[Default Applications]\n"
        "text/plain=org.xfce.mousepad.desktop\n"
        "text/csv=gnumeric.desktop\n"
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet=gnumeric.desktop\n"
        "application/x-gnumeric=gnumeric.desktop\n"
        "inode/directory=pcmanfm.desktop\n"
    ),
    # gsettings' keyfile backend (GSETTINGS_BACKEND=keyfile): GNOME's defaults but for what
    # OSWorld's VM snapshot has changed (automatic screen lock off; its `os` tasks rely on it).
    f"{HOME}/.config/glib-2.0/settings/keyfile": "[org/gnome/desktop/screensaver]\nlock-enabled=false\n",
    # VLC as a configured desktop has it: no first-run privacy dialog over the player.
    f"{HOME}/.config/vlc/vlcrc": "[qt]\nqt-privacy-ask=0\n",
}

_TERMINAL_KEY = '<keybind key="C-A-t"><action name="Execute"><command>lxterminal</command></action></keybind>'
_SHIM_B64 = base64.b64encode(SUDO_SHIM.encode()).decode()

DEFAULT_TASK = DesktopTask(
    id="arborl/desktop-hello",
    instruction="Use the terminal to create the file /home/agent/hello.txt containing the line: hello desktop",
    config=({"type": "launch", "parameters": {"command": ["xterm"]}},),
    evaluator={
        "func": "check_include_exclude",
        "result": {"type": "vm_command_line", "command": "cat /home/agent/hello.txt", "shell": True},
        "expected": {"type": "rule", "rules": {"include": ["hello desktop"]}},
    },
)


class DesktopEnv(SandboxEnv):
    """OSWorld-style desktop tasks on Xvfb in a container; pixels plus chat messages out."""

    task_type: ClassVar[type[DesktopTask]] = DesktopTask
    default_task: ClassVar[DesktopTask] = DEFAULT_TASK
    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 1}  # noqa: RUF012 - Gymnasium's form

    def __init__(
        self,
        *,
        screen_width: int = 1024,
        screen_height: int = 768,
        settle_s: float = 0.15,
        wait_s: float = 1.0,
        max_wait_s: float = 10.0,
        launch_wait_s: float = 5.0,
        open_wait_s: float = 30.0,
        limits: Limits | None = None,
        system_prompt: str = SYSTEM_PROMPT,
        observation_type: ObservationType = "screenshot",
        obs_type: ObsType | None = None,
        image_bounds: ImageBounds | None = None,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            screen_width, screen_height: the X screen (and screenshot) size.
            settle_s: pause after a step's actions before the screenshot, for apps to redraw.
            wait_s: how long the WAIT action waits.
            max_wait_s: the longest `time.sleep` one action may ask for.
            launch_wait_s / open_wait_s: how long `launch` / `open` setup steps wait for a window.
            limits: the sandbox's resources (default: 2 GiB of memory, one CPU).
            system_prompt: the first message; `{width}` and `{height}` are filled in.
            observation_type: OSWorld's observation types: "screenshot" (pixels), "a11y_tree"
                (the accessibility tree: XML in `obs["a11y_tree"]`, a table of its named
                nodes in the messages) or "screenshot_a11y_tree" (both).
            obs_type: for a vision-language policy, what its messages show: "image" (the
                screenshot as an image part: observation_type "screenshot"), "text" (the
                tree's table: "a11y_tree") or "both" ("screenshot_a11y_tree", the screenshot
                in the messages). Unset: `observation_type`, the pixels beside the messages
                only. A screenshot that fails then is an infrastructure error (`CorruptImage`).
            image_bounds: the largest screenshot part (a larger screen is shrunk; actions keep
                the screen's own coordinates, which the system prompt gives).
            **kwargs: see `SandboxEnv` (pool, backend, park_s) and `TextEnv` (strict, render_mode).
        """
        super().__init__(**kwargs)
        if obs_type is not None and obs_type not in OBS_TYPES:
            raise ValueError(f"obs_type {obs_type!r}; one of {', '.join(OBS_TYPES)}")
        if obs_type is not None:
            observation_type = _OBSERVATION_OF[obs_type]
        self.shows_images = obs_type in ("image", "both")
        self.image_bounds = image_bounds or ImageBounds(max_images=1)
        if observation_type not in OBSERVATION_TYPES:
            raise ValueError(f"observation_type {observation_type!r}; one of {', '.join(OBSERVATION_TYPES)}")
        self.observation_type = observation_type
        self.observes_tree = "a11y" in observation_type
        self.display = XDisplay(screen_width, screen_height, a11y=self.observes_tree)
        messages = (
            multimodal_observation_space(self.image_bounds) if self.shows_images else chat_observation_space()
        )
        obs: dict[str, spaces.Space[Any]] = {"messages": messages}
        if "screenshot" in observation_type:
            obs["screenshot"] = spaces.Box(0, 255, (screen_height, screen_width, 3), np.uint8)
        if self.observes_tree:
            obs["a11y_tree"] = UnicodeText()
        self.observation_space = spaces.Dict(obs)
        self.settle_s, self.wait_s, self.max_wait_s = settle_s, wait_s, max_wait_s
        self.launch_wait_s, self.open_wait_s = launch_wait_s, open_wait_s
        self.limits = limits or Limits(memory_mb=2048)
        self.system_prompt = system_prompt
        self._screen = Screen(None)
        self._tree = ""
        self._cache: tempfile.TemporaryDirectory[str] | None = None
        self._ctx: StepContext | None = None
        self._last_action: str | None = None
        self._replaced = 0

    def _coerce_task(self, task: Any) -> Any:
        """A DesktopTask, or a dict in OSWorld's JSON format (read by `load_osworld_task`),
        checked against what this env can run (`support.DESKTOP`): a task loaded without it
        is refused here, before any sandbox is taken."""
        try:
            if isinstance(task, Mapping) and "kind" not in task:
                return load_osworld_task(task, support=DESKTOP)
            return check_task(super()._coerce_task(task), DESKTOP)
        except TaskError:
            raise
        except ValueError as e:
            raise TaskError(f"not a valid OSWorld task: {e}") from e

    # ---- sandbox ----------------------------------------------------------------------------
    def sandbox_spec(self, task: DesktopTask) -> SandboxSpec:
        user = SandboxSpec().user
        return SandboxSpec(
            image=task.image,
            workdir=HOME,
            # NO_AT_BRIDGE: GTK apps would wait for an accessibility bus that does not exist;
            # GSETTINGS_BACKEND=keyfile: no dconf daemon (no D-Bus) in the sandbox, and unlike
            # `memory` a `gsettings set` persists (in ~/.config/glib-2.0/settings/keyfile).
            # The same for every task (so sandboxes are reused); with AT-SPI on, the display's
            # env (passed to every command) turns the bridge on and names the session bus.
            # PATH: the sudo shim first, so that the agent's `sudo` says why it cannot elevate.
            env={
                "DISPLAY": self.display.display,
                "NO_AT_BRIDGE": "1",
                "GSETTINGS_BACKEND": "keyfile",
                "PATH": AGENT_PATH,
            },
            files=DESKTOP_FILES,
            setup=(
                # OSWorld's conventions (see `commands`): ~/Desktop, /home/user for its user's
                # home, and the sudo shim first on every PATH, written by root where the agent
                # cannot change it; and the harness's own execute-only Python (`trusted`).
                # Ctrl+Alt+T opens a terminal, as on OSWorld's Ubuntu (setup steps press it): a
                # VTE one (LXTerminal), whose text AT-SPI reads, as OSWorld's GNOME Terminal.
                f"mkdir -p {HOME}/.config/openbox && sed 's#</keyboard>#{_TERMINAL_KEY}</keyboard>#' "
                f"/etc/xdg/openbox/rc.xml > {HOME}/.config/openbox/rc.xml",
                f"mkdir -p {HOME}/Desktop && chown -R {user}: {HOME}",
                f"[ -e /home/user ] || ln -s {HOME} /home/user",
                f"install -d -m 0755 {SHIM_DIR} && echo {_SHIM_B64} | base64 -d > {SHIM_DIR}/sudo && chmod 755 {SHIM_DIR}/sudo",
                INSTALL_HARNESS_PYTHON,
            ),
            limits=self.limits,
        )

    async def _start_display(self, task: DesktopTask) -> None:
        """Start X in the leased sandbox; if it cannot, replace the sandbox once and retry."""
        # AT-SPI runs when the tree is observed or when the task's evaluator reads it.
        self.display.a11y = self.observes_tree or uses_a11y(task.evaluator)
        try:
            await self.display.start(self.sandbox)
            return
        except (DisplayError, SandboxCrashed, SandboxUnresponsive) as e:
            log.warning("desktop sandbox %s unhealthy (%s); replacing it", self.sandbox.id[:12], e)
        assert self._lease is not None
        pool, sb = self._lease
        self._lease = self._proxy = None
        pool.checkin(sb, broken=True)
        self._replaced += 1
        await self._lease_for(task)
        await self.display.start(self.sandbox)

    def _new_context(self, task: DesktopTask) -> StepContext:
        if self._cache is not None:
            self._cache.cleanup()
        self._cache = tempfile.TemporaryDirectory(prefix="arborl-desktop-")
        return StepContext(
            sandbox=self.sandbox,
            display=self.display,
            cache_dir=Path(self._cache.name),
            base_dir=task.base_dir,
            task_id=task.id,
            download_cache=task.download_cache,
            launch_wait_s=self.launch_wait_s,
            open_wait_s=self.open_wait_s,
        )

    # ---- the episode ------------------------------------------------------------------------
    async def on_reset(self, task: DesktopTask) -> list[dict[str, str]]:
        self._last_action, self._screen, self._tree = None, Screen(None), ""
        await self._start_display(task)
        self._ctx = self._new_context(task)
        await run_steps(self._ctx, task.config, "config")
        _, self._screen = await self.display.run(self.sandbox, settle_s=self.settle_s)
        self._check_screen()
        w, h = self.display.width, self.display.height
        return [
            {"role": "system", "content": self.system_prompt.format(width=w, height=h)},
            {"role": "user", "content": f"{task.instruction}\n\n{await self._look()}"},
        ]

    async def _look(self) -> str:
        """What the messages say about the screen: the window list, and with the
        accessibility tree on, the tree read now (kept for the observation) as a table."""
        w, h = self.display.width, self.display.height
        text = self._screen.describe(w, h)
        if self.observes_tree:
            try:
                self._tree = await read_tree(self.sandbox, self.display.env)
                text += f"\n\nAccessibility tree:\n{linearize(self._tree)}"
            except OutputTooLarge as e:
                self._tree = ""
                text += f"\n\nAccessibility tree: not shown: {e}"
        return text

    def reset_info(self) -> dict[str, Any]:
        return {
            "windows": [w.as_dict() for w in self._screen.windows],
            "screen_size": (self.display.width, self.display.height),
            "setup": list(self._ctx.log) if self._ctx else [],
        }

    async def on_step(self, action: str) -> Step:
        try:
            return await self._act(action)
        except BaseException:
            self._screen, self._tree = Screen(None), ""  # what the step left is unknown: show a blank one
            raise

    async def _act(self, action: str) -> Step:
        w, h = self.display.width, self.display.height
        try:
            actions = parse_actions(action, w, h)
        except ActionError as e:
            _, self._screen = await self.display.run(self.sandbox)
            self._check_screen()
            return Step(
                f"Error: {e}. Nothing was done.\n\n{await self._look()}",
                info={"format_error": True, "action_error": str(e), **self._screen_info()},
            )
        todo, final, ignored = [], None, 0
        for i, a in enumerate(actions):
            if a.name in ("DONE", "FAIL"):
                final, ignored = a.name, len(actions) - i - 1
                break
            todo.append(a)
        lines = [
            [f"sleep {self.wait_s:.3f}"] if a.name == "WAIT" else to_commands(a, self.max_wait_s)
            for a in todo
        ]
        pause = sum(self.wait_s if a.name == "WAIT" else a.args.get("seconds", 0.0) for a in todo)
        if todo or final is None:
            act, self._screen = await self.display.run(
                self.sandbox, lines, settle_s=self.settle_s if todo else 0.0, timeout=60.0 + pause
            )
            done = f"Ran {act.completed} of {len(todo)} actions: " if act.error else "Ran: "
            report = done + "; ".join(describe(a) for a in todo) + "."
            if act.error:
                report += f"\nError: {act.error}"
        else:
            act, report = None, ""
        info: dict[str, Any] = {"actions": [describe(a) for a in todo], **self._screen_info()}
        if act is not None and act.error:
            info["action_error"] = act.error
        if final is None:
            self._check_screen()
            return Step(f"{report}\n\n{await self._look()}".strip(), info=info)
        self._last_action = final
        score, details = await self._evaluate()
        info["evaluation"] = details
        after = f" ({ignored} actions after it were ignored)" if ignored else ""
        return Step(
            f"{report}\nYou said {final}{after}; the episode is over.".strip(),
            reward=score,
            terminated=True,
            info=info,
        )

    async def on_finish(self) -> tuple[float, dict[str, Any]]:
        """A budget ended the episode: evaluate the desktop as it is."""
        score, details = await self._evaluate()
        return score, {"evaluation": details}

    async def _evaluate(self) -> tuple[float, dict[str, Any]]:
        assert self._ctx is not None
        task: DesktopTask = self.task
        return await evaluate(task.evaluator, self._ctx, self._last_action)

    def _screen_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"windows": [w.as_dict() for w in self._screen.windows]}
        if self._screen.error:
            info["screenshot_error"] = self._screen.error
        return info

    # ---- observations -------------------------------------------------------------------------
    def _check_screen(self) -> None:
        """A policy that reads the screenshot cannot go on without one: an infra error."""
        if self.shows_images and self._screen.image is None:
            raise CorruptImage(f"the screenshot failed: {self._screen.error or 'no image'}")

    async def make_observation(self, messages: Any) -> dict[str, Any]:
        if self.shows_images and self._screen.image is not None:
            messages = with_image(messages, self._screen.image, self.image_bounds)
        obs: dict[str, Any] = {"messages": messages}
        if "screenshot" in self.observation_type:
            image = self._screen.image
            obs["screenshot"] = image.copy() if image is not None else self.display.blank()
        if self.observes_tree:
            obs["a11y_tree"] = self._tree
        return obs

    async def state_hash(self) -> str:
        """The screen's pixels and window list: equal screens are the same state."""
        img = self._screen.image
        digest = hashlib.sha256(img.tobytes()).hexdigest()[:16] if img is not None else ""
        return stable_hash(
            [self.task_id, digest, [(w.title, w.x, w.y, w.width, w.height) for w in self._screen.windows]]
        )

    def render(self) -> Any:
        if self.render_mode == "rgb_array":
            return self._screen.image.copy() if self._screen.image is not None else self.display.blank()
        return super().render()

    async def _close(self) -> None:
        await super()._close()
        if self._cache is not None:
            self._cache.cleanup()
            self._cache = None

    @property
    def replaced_sandboxes(self) -> int:
        """How many times a sandbox whose display would not start was replaced by a new one."""
        return self._replaced
