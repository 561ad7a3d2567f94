"""`arborl/Web-v0`: a browser agent on self-hosted sites (a shop, an admin console).

    env = gymnasium.make("arborl/Web-v0")                 # screenshot=True adds pixels
    obs, info = env.reset(options={"task": web_task})     # a WebTask (tasks/web/task.py) or its dict
    obs, reward, terminated, truncated, info = env.step("click(e12)")

The observation is the page as text (URL, title, the last action's error, the accessibility
tree with an id on every element, see observation.py); with `screenshot=True` it is
`{"messages": ..., "screenshot": uint8 [H, W, 3]}`. The action is the model's reply, in
which the last call of `click/fill/select/hover/press/scroll/goto/go_back/answer` counts
(actions.py). `answer(...)` ends the episode and runs the task's checks: reward 1.0 when
all pass (final URL, page text, the answer, the sites' own backend state).

Each env holds one web stack (a browser plus the task's sites, see stack.py) from its
first reset until it is closed; an episode is a site-state reset and a new browser
context. A browser that died (a crash, an OOM kill) ends its episode as truncated, and the
next reset starts it again; a stack that cannot be repaired is replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable
from typing import Any, ClassVar, TypeVar

import numpy as np
from gymnasium import spaces
from playwright.async_api import BrowserContext, Page
from playwright.async_api import Error as PlaywrightError

from arborl.sandboxes import SandboxError
from arborl.tasks.web import WEB_MINI_DIR, StateCheck, WebTask, load_web_task

from ..base import Step, TaskError, stable_hash
from ..images import CorruptImage, ImageBounds, decode_image, multimodal_observation_space, with_image
from ..sandboxed import SandboxEnv
from ..spaces import chat_observation_space
from .actions import HELP, ActionError, execute, is_browser_gone, parse_action, resolve_ids
from .evaluators import run_checks
from .observation import PageView, blank, observe, screenshot
from .relay import SiteRequestError
from .sites import SITES
from .stack import BrowserCrashed, WebStack
from .stack_pool import StackConfig, StackPool, stack_pool

log = logging.getLogger(__name__)
T = TypeVar("T")

SYSTEM_PROMPT = (
    "You are a web agent using a browser. Each observation shows the page's URL, its title, the "
    "error of your last action if it failed, and the page's accessibility tree, in which every "
    "element has an id such as [ref=e12]. " + HELP + " Quote text arguments, e.g. "
    'fill(e7, "wireless mouse"). Only the sites of the task can be reached.'
)
DEFAULT_TASK = load_web_task(WEB_MINI_DIR / "shop-order-status.json")
#: Seconds an episode's start (stack, sites, context and page) may take before the stack is
#: taken for wedged and replaced, once: a browser that stops answering Playwright would
#: otherwise hold the reset, and the run, for ever. A cold stack starts in a few seconds,
#: under a loaded CI machine in well under a minute.
PREPARE_TIMEOUT_S = 120.0


class WebEnv(SandboxEnv):
    """Web tasks in a real Chromium, on self-hosted sites with server-side state."""

    task_type: ClassVar[type[WebTask]] = WebTask
    default_task: ClassVar[WebTask] = DEFAULT_TASK
    eager_sandbox: ClassVar[bool] = False  # the stack, not a per-episode lease, holds the sandboxes

    def __init__(
        self,
        *,
        screenshot: bool = False,
        viewport: tuple[int, int] = (1024, 768),
        action_timeout_s: float = 3.0,
        navigation_timeout_s: float = 10.0,
        max_observation_chars: int = 24_000,
        system_prompt: str = SYSTEM_PROMPT,
        browser_image: str = "arborl/gui:latest",
        site_image: str = "arborl/base:latest",
        chromium: str = "/usr/bin/chromium",
        obs_type: str = "text",
        image_bounds: ImageBounds | None = None,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            screenshot: also return the viewport as uint8 [height, width, 3] beside the messages.
            viewport: (width, height) of the page in CSS pixels.
            action_timeout_s: how long an action waits for its element to be actionable.
            navigation_timeout_s: how long a page may take to load.
            max_observation_chars: the accessibility tree is cut beyond this.
            browser_image, site_image: sandbox images of the Docker stack.
            chromium: the browser binary of the local stack (no Docker engine).
            obs_type: "text" (the accessibility tree), or "both": the viewport's screenshot as
                an image part of each observation's message too, for a vision-language policy
                (a screenshot that fails is then an infrastructure error, `CorruptImage`).
                Actions name the tree's elements, so no mode leaves the tree out.
            image_bounds: the largest screenshot part (a larger viewport is shrunk).
            **kwargs: see `SandboxEnv` (pool, backend, ...) and `TextEnv` (strict, ...).
        """
        super().__init__(**kwargs)
        self.screenshot = screenshot
        self.viewport = (int(viewport[0]), int(viewport[1]))
        self.action_timeout_ms = action_timeout_s * 1000
        self.navigation_timeout_ms = navigation_timeout_s * 1000
        self.max_observation_chars = max_observation_chars
        self.system_prompt = system_prompt
        self.stack_config = StackConfig(browser_image, site_image, chromium)
        if obs_type not in ("text", "both"):
            raise ValueError(
                f"obs_type {obs_type!r}: Web-v0's actions name elements of the accessibility tree "
                "(click(e12)), so it always shows the tree: 'text', or 'both' to add the screenshot"
            )
        self.shows_images = obs_type == "both"
        self.image_bounds = image_bounds or ImageBounds(max_images=1)
        self._shot: np.ndarray | None = None
        messages = (
            multimodal_observation_space(self.image_bounds) if self.shows_images else chat_observation_space()
        )
        if self.shows_images:
            self.observation_space = messages
        if screenshot:
            width, height = self.viewport
            self.observation_space = spaces.Dict(  # type: ignore[assignment]  # pixels beside the messages
                {
                    "messages": messages,
                    "screenshot": spaces.Box(0, 255, (height, width, 3), np.uint8),
                }
            )
        self.stack: WebStack | None = None
        self._stacks: StackPool | None = None
        self._context: BrowserContext | None = None
        self._page: Page | None = None
        self._view: PageView | None = None
        self._stack_broken = False
        self._spare: tuple[tuple[str, ...], asyncio.Task[tuple[BrowserContext, Page]]] | None = None
        self._closing = False

    # ---- stack and context ------------------------------------------------------------------
    def _coerce_task(self, task: Any) -> Any:
        task = super()._coerce_task(task)
        unknown = [s for s in task.sites if s not in SITES]
        if unknown:
            raise TaskError(f"task {task.id} uses unknown sites {unknown}; known: {sorted(SITES)}")
        return task

    async def _timed(self, aw: Awaitable[T]) -> T:
        start = time.perf_counter()
        try:
            return await aw
        finally:
            self._sandbox_s += time.perf_counter() - start

    async def _prepare(self, task: WebTask) -> None:
        if self.stack is None:
            self._stacks = stack_pool(self.pool, self.stack_config)
            self.stack = await self._stacks.acquire(task.sites)
        self._stack_broken = False
        await self.stack.ensure(task.sites)
        await asyncio.gather(*(self.stack.reset_site(s) for s in task.sites))
        opened = await self._take_spare(task.sites) or await self._open_context(task.sites)
        self._context, self._page = opened

    async def _open_context(self, sites: tuple[str, ...]) -> tuple[BrowserContext, Page]:
        assert self.stack is not None
        context = await self.stack.new_context(sites, self.viewport)
        context.set_default_timeout(self.action_timeout_ms)
        context.set_default_navigation_timeout(self.navigation_timeout_ms)
        return context, await context.new_page()

    def _start_spare(self) -> None:
        """Open the next episode's context and page now, in the background: a new page costs
        a renderer process (~0.2 s), paid while the agent or trainer is busy elsewhere. It
        serves the next reset if that task uses the same sites (the context's proxy admits
        only those)."""
        task = self.task
        if (
            self._spare is None
            and self.stack is not None
            and self.stack.browser_alive()
            and isinstance(task, WebTask)
        ):
            self._spare = (task.sites, asyncio.get_running_loop().create_task(self._open_context(task.sites)))

    async def _take_spare(self, sites: tuple[str, ...]) -> tuple[BrowserContext, Page] | None:
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        try:
            context, page = await spare[1]
        except Exception:  # the browser went away meanwhile: open a fresh one
            return None
        if spare[0] == tuple(sites) and self.stack is not None and context.browser is self.stack.browser:
            return context, page
        with contextlib.suppress(Exception):
            await context.close()
        return None

    async def _discard_spare(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:  # let it finish (cancelled midway, the browser would keep the context)
            with contextlib.suppress(Exception):
                context, _ = await asyncio.wait_for(spare[1], 30)
                await asyncio.wait_for(context.close(), 10)

    async def _drop_stack(self, broken: bool) -> None:
        stack, self.stack = self.stack, None
        if stack is not None and self._stacks is not None:
            await self._stacks.release(stack, broken=broken)

    async def _close_context(self) -> None:
        context, self._context, self._page = self._context, None, None
        if context is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(context.close(), 10)

    def _holds_resources(self) -> bool:
        return (
            super()._holds_resources()
            or self.stack is not None
            or self._context is not None
            or bool(self._spare)
        )

    def _end_episode(self, broken: bool = False) -> None:
        ran = self._active
        super()._end_episode(broken)
        self._stack_broken = self._stack_broken or broken
        if ran and not broken and not self._closing:
            self._start_spare()

    async def _close(self) -> None:
        self._closing = True
        try:
            await super()._close()
            await self._discard_spare()
            await self._close_context()
            await self._drop_stack(broken=self._stack_broken)
        finally:
            self._closing = False

    async def _close_parked(self) -> None:
        await super()._close_parked()
        if not self._active:
            await self._close_context()  # the episode's pages go; the worker's browser stays

    # ---- the episode ----------------------------------------------------------------------------
    async def on_reset(self, task: WebTask) -> list[dict[str, str]]:
        await self._close_context()
        for attempt in (1, 2):
            try:
                await self._timed(asyncio.wait_for(self._prepare(task), PREPARE_TIMEOUT_S))
                break
            except (SandboxError, SiteRequestError, PlaywrightError, TimeoutError) as e:
                why = f"no answer in {PREPARE_TIMEOUT_S:g} s" if isinstance(e, TimeoutError) else e
                log.warning("web stack failed to start an episode (%s: %s)", type(e).__name__, why)
                await self._discard_spare()
                await self._close_context()
                await self._drop_stack(broken=True)
                if attempt == 2 and isinstance(e, TimeoutError):
                    raise SandboxError(f"the web stack did not start the episode, twice: {why}") from e
                if attempt == 2:
                    raise
        assert self._page is not None
        error = None
        try:
            await self._timed(self._page.goto(task.start_url, wait_until="domcontentloaded"))
        except PlaywrightError as e:
            error = f"the start page did not load: {str(e).splitlines()[0]}"
        self._view = await self._observe(error)
        prompt = f"Task: {task.intent}\n\n{self._view.text(self.max_observation_chars)}"
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": prompt}]

    async def _observe(self, error: str | None) -> PageView:
        if self._context is not None and self._context.pages and self._context.pages[-1] is not self._page:
            self._page = self._context.pages[-1]  # a link opened a new tab: follow it
        if self._page is None:
            raise BrowserCrashed("the episode has no page")
        try:
            view = await self._timed(observe(self._page, error))
        except PlaywrightError as e:
            raise BrowserCrashed(f"the browser went away: {str(e).splitlines()[0]}") from e
        if self.shows_images:
            self._shot = None
            try:
                png = await self._timed(self._page.screenshot(type="png", timeout=5000))
            except PlaywrightError as e:
                raise CorruptImage(f"the page's screenshot failed: {str(e).splitlines()[0]}") from e
            self._shot = decode_image(png, self.image_bounds)
        return view

    async def on_step(self, action: str) -> Step:
        assert self._view is not None
        start = time.perf_counter()
        try:
            act = parse_action(action)
        except ActionError as e:
            self._view = dataclasses.replace(self._view, error=str(e))
            info = {"format_error": True, "n_tool_calls": 0, "n_tool_errors": 0, "url": self._view.url}
            return Step(self._view.text(self.max_observation_chars), info=info)
        if act.name == "answer":
            reward, info = await self._evaluate(act.args["text"])
            verdict = "Task complete." if reward > 0 else "The task is not complete."
            return Step(
                f"Answer recorded: {act.args['text']!r}. {verdict} The episode is over.",
                reward=reward,
                terminated=True,
                info={**info, "action": str(act), **self._calls(act, None, start)},
            )
        error = None
        try:
            assert self._page is not None
            act = resolve_ids(act, self._view.snapshot)
            await self._timed(execute(self._page, act, self.action_timeout_ms, self.navigation_timeout_ms))
        except ActionError as e:
            error = str(e)
        except PlaywrightError as e:
            if is_browser_gone(e):
                raise BrowserCrashed(
                    f"the browser went away during {act.name}: {str(e).splitlines()[0]}"
                ) from e
            error = f"{act} failed: {str(e).splitlines()[0]}"
        self._view = await self._observe(error)
        info = {"action": str(act), "url": self._view.url, **self._calls(act, error, start)}
        return Step(self._view.text(self.max_observation_chars), info=info)

    @staticmethod
    def _calls(act: Any, error: str | None, start: float) -> dict[str, Any]:
        call = {
            "name": act.name,
            "ok": error is None,
            "error": None if error is None else "tool_error",
            "duration_s": time.perf_counter() - start,
        }
        return {
            "tool_calls": [call],
            "n_tool_calls": 1,
            "n_tool_errors": int(error is not None),
            "format_error": False,
        }

    async def _evaluate(self, answer: str | None) -> tuple[float, dict[str, Any]]:
        """Run the task's checks on the final page, the answer and the sites' state."""
        task: WebTask = self.task
        url, text = "", ""
        if self._page is not None and not self._page.is_closed():
            url = self._page.url
            with contextlib.suppress(PlaywrightError):
                text = await self._timed(self._page.inner_text("body", timeout=5000))
        states: dict[str, Any] = {}
        if self.stack is not None:
            for site in dict.fromkeys(c.site for c in task.evaluator if isinstance(c, StateCheck)):
                try:
                    states[site] = await self._timed(self.stack.site_state(site))
                except (SiteRequestError, KeyError) as e:
                    log.warning("cannot read the state of site %s: %s", site, e)
        checks = run_checks(task.evaluator, url=url, page_text=text, answer=answer, states=states)
        passed = all(c["passed"] for c in checks)
        return float(passed), {"verifier": {"passed": passed, "checks": checks}, "answer": answer}

    async def on_finish(self) -> tuple[float, dict[str, Any]]:
        """A budget ended the episode: score the page and state as they are (no answer)."""
        return await self._evaluate(None)

    async def state_hash(self) -> str:
        view = self._view
        return stable_hash([self.task_id, view.url, view.snapshot]) if view is not None else ""

    def reset_info(self) -> dict[str, Any]:
        task: WebTask = self.task
        return {
            "sites": list(task.sites),
            "url": self._view.url if self._view else "",
            "stack": self.stack.kind if self.stack else "",
        }

    async def make_observation(self, messages: Any) -> Any:
        if self.shows_images and self._shot is not None:
            messages = with_image(messages, self._shot, self.image_bounds)
        if not self.screenshot:
            return messages
        width, height = self.viewport
        page = self._page
        img = (
            blank(height, width)
            if page is None or page.is_closed()
            else await screenshot(page, height, width)
        )
        return {"messages": messages, "screenshot": img}
