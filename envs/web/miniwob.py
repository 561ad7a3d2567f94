"""`arborl/MiniWoB-v0`: MiniWoB++ tasks in arborl/Web-v0's browser, with MiniWoB's own reward.

    env = gymnasium.make("arborl/MiniWoB-v0")
    obs, info = env.reset(options={"task": {"id": "t", "name": "click-button", "seed": 3}})
    obs, reward, terminated, truncated, info = env.step("click(e12)")

Everything but the task's pages and reward is `WebEnv`'s: the web stack (local Chromium or
the browser container, the same isolation, a browser context per episode), the observation
(URL, title, accessibility tree with ids) and the action language. What differs:

- no site server: the browser context answers every request to `http://miniwob.test/` from
  the installed `miniwob` package's `html/` folder (a Playwright route, fulfilled by this
  process), so nothing is fetched from a network and the Docker browser needs no site
  container; any other address stays unreachable as for every web task;
- the episode starts the way MiniWoB's own Selenium driver starts it: seed the page's
  random generator, set its timer, `core.startEpisodeReal()`; the instruction the page
  drew (`core.getUtterance()`) is the task line of the first observation;
- after every action the env reads the page's globals (`WOB_DONE_GLOBAL`,
  `WOB_RAW_REWARD_GLOBAL`, `WOB_REWARD_REASON`): the episode ends when the task's own
  script ended it, with reward max(raw, 0) (1.0 for a success, 0.0 for a failure; the raw
  and time-decayed rewards are in `info["miniwob"]`). `answer(...)` gives up (reward 0).
"""

from __future__ import annotations

import asyncio
import mimetypes
import time
from pathlib import Path
from typing import Any, ClassVar

from playwright.async_api import BrowserContext, Page, Route
from playwright.async_api import Error as PlaywrightError

from arborl.tasks.web.miniwob import MINIWOB_HOST, MiniWoBMissing, MiniWoBTask, html_dir

from ..base import Step, TaskError
from .actions import ActionError, parse_action
from .env import WebEnv

START = """([seed, ms]) => {
  Math.seedrandom(seed);
  core.EPISODE_MAX_TIME = ms;
  core.startEpisodeReal();
  return typeof WOB_TASK_READY === 'undefined' ? true : WOB_TASK_READY;
}"""
READY = "() => typeof WOB_TASK_READY === 'undefined' ? true : WOB_TASK_READY"
STATUS = """() => ({done: WOB_DONE_GLOBAL, raw: WOB_RAW_REWARD_GLOBAL, reward: WOB_REWARD_GLOBAL,
  reason: WOB_REWARD_REASON == null ? null : String(WOB_REWARD_REASON)})"""
UTTERANCE = "() => core.getUtterance()"

SYSTEM_PROMPT = (
    "You are a web agent solving a small web task in a browser. Each observation shows the page's "
    "URL, its title, the error of your last action if it failed, and the page's accessibility tree, "
    'in which every element has an id such as [ref=e12]. Act with one of: click(id), fill(id, "text"), '
    'select(id, "option"), hover(id), press(id, "Enter"), scroll(down). The task ends by itself '
    'when the page judges it done; answer("...") gives up.'
)


class MiniWoBEnv(WebEnv):
    """MiniWoB++ pages served from the installed package, scored by their own JavaScript."""

    task_type: ClassVar[type[MiniWoBTask]] = MiniWoBTask
    default_task: ClassVar[Any] = MiniWoBTask(id="miniwob/click-test", name="click-test")

    def __init__(self, *, viewport: tuple[int, int] = (500, 400), **kwargs: Any) -> None:
        kwargs.setdefault("system_prompt", SYSTEM_PROMPT)
        super().__init__(viewport=viewport, **kwargs)
        self._root: Path | None = None
        self._utterance = ""

    def _coerce_task(self, task: Any) -> Any:
        task = super()._coerce_task(task)
        try:
            root = self._root = self._root or html_dir()
        except MiniWoBMissing as e:
            raise TaskError(str(e)) from e
        if not (root / "miniwob" / f"{task.name}.html").is_file():
            raise TaskError(f"MiniWoB++ has no task {task.name!r} (pages are in {root / 'miniwob'})")
        return task

    async def _open_context(self, sites: tuple[str, ...]) -> tuple[BrowserContext, Page]:
        context, page = await super()._open_context(sites)
        await context.route(f"http://{MINIWOB_HOST}/**", self._serve)
        return context, page

    async def _serve(self, route: Route) -> None:
        """Answer a request for the package's files (anything outside html/ is a 404)."""
        assert self._root is not None
        rel = route.request.url.split(MINIWOB_HOST, 1)[1].split("?", 1)[0].split("#", 1)[0]
        path = (self._root / rel.lstrip("/")).resolve()
        if not path.is_relative_to(self._root.resolve()) or not path.is_file():
            await route.fulfill(status=404, body="not found")
            return
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        await route.fulfill(status=200, body=await asyncio.to_thread(path.read_bytes), content_type=kind)

    async def on_reset(self, task: MiniWoBTask) -> list[dict[str, str]]:
        await super().on_reset(task)
        page = self._page
        assert page is not None
        try:
            await self._timed(page.wait_for_load_state("load"))
            ready = await self._timed(page.evaluate(START, [task.seed, int(task.time_limit_s * 1000)]))
            deadline = time.monotonic() + 5.0
            while not ready and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                ready = await page.evaluate(READY)
            utterance = await self._timed(page.evaluate(UTTERANCE))
        except PlaywrightError as e:
            raise TaskError(f"MiniWoB task {task.name} did not start: {str(e).splitlines()[0]}") from e
        self._view = await self._observe(None)
        prompt = f"Task: {utterance}\n\n{self._view.text(self.max_observation_chars)}"
        self._utterance = utterance
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": prompt}]

    async def _status(self) -> dict[str, Any] | None:
        if self._page is None or self._page.is_closed():
            return None
        try:
            return dict(await self._timed(self._page.evaluate(STATUS)))
        except PlaywrightError:
            return None

    async def on_step(self, action: str) -> Step:
        try:
            gives_up = parse_action(action).name == "answer"
        except ActionError:
            gives_up = False
        if gives_up:
            reward, info = await self.on_finish()
            return Step("You gave up. The episode is over.", reward=reward, terminated=True, info=info)
        step = await super().on_step(action)
        status = await self._status()
        if status is None or not status["done"]:
            return step
        reward = max(float(status["raw"]), 0.0)
        verdict = "Task complete." if reward > 0 else "The task was not done right."
        return Step(
            f"{verdict} The episode is over.",
            reward=reward,
            terminated=True,
            info={**step.info, **self._outcome(status)},
        )

    async def on_finish(self) -> tuple[float, dict[str, Any]]:
        """The episode ended without the page ending it (a give-up or the turn budget): 0."""
        status = await self._status()
        done = bool(status and status["done"])
        reward = max(float(status["raw"]), 0.0) if status and done else 0.0
        return reward, self._outcome(status or {"done": False})

    def _outcome(self, status: dict[str, Any]) -> dict[str, Any]:
        task: MiniWoBTask = self.task
        return {
            "miniwob": {"task": task.name, "seed": task.seed, "utterance": self._utterance,
                        **status},
            "verifier": {"passed": bool(status.get("done")) and float(status.get("raw", 0)) > 0},
        }  # fmt: skip
