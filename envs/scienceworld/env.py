"""`arborl/ScienceWorld-v0`: ScienceWorld's simulator, one action per turn, the game's own score.

    env = gymnasium.make("arborl/ScienceWorld-v0")
    obs, info = env.reset(options={"task": {"id": "t", "task_name": "boil", "variation": 21}})
    obs, reward, terminated, truncated, info = env.step("open door to kitchen")

What the agent sees is what the package's agents see: the task description and the room
(`look around`, the package's first move) at reset, then the game's reply to each action.
`look around`, `inventory` and `task` are the game's own actions. The list of action templates
comes at reset; the valid actions (the package's valid action-object combinations) come with
every observation only when `show_valid_actions=True` (they cost the simulator a search).

The reply is one action: its first non-empty line, stripped. A reply the game does not know
gets the game's own answer ("No known action matches that input.") and costs a turn.

Reward: 0 until the episode ends, then the game's score clipped at 0, over 100
(`arborl.tasks.scienceworld.grading`). `terminated`: the game ended the task (solved, or
failed: score below 0). `truncated`: the move count passed the task's step limit (the
package's `envStepLimit`) or a budget ran out (`on_finish` scores the state then). `info`
carries `score`, `moves`, `completed`, `success` every step.

JVMs come from a `JVMPool` (`jvm.py`): taken at reset, given back when the episode ends; a
JVM that dies mid-episode ends it as an infrastructure failure (`JVMDied`, a `SandboxCrashed`
with fault "infra": evaluation retries it, training leaves it out), never a score of 0.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from arborl.tasks.scienceworld.grading import episode_reward, is_success
from arborl.tasks.scienceworld.task import ScienceWorldTask

from ..base import Step, TextEnv, stable_hash
from . import game as sw
from .jvm import JVMDied, JVMPool, default_pool

SYSTEM_PROMPT = (
    "You are an agent in ScienceWorld, a text-based simulator of elementary science experiments. "
    "Each turn, reply with exactly one action in plain text, such as `open door to kitchen`, "
    "`go to kitchen`, `pick up thermometer`, `focus on substance in pot` or `wait`. "
    "`look around` describes the room, `inventory` lists what you carry, `task` repeats the task. "
    "Only focus on what the task asks you to focus on: focusing on anything else fails the task."
)
#: Longest action passed to the game (a longer reply is cut): no action of the game is longer.
MAX_ACTION_CHARS = 512


def parse_action(reply: str) -> str:
    """The action in a model reply: its first non-empty line, stripped, at most 512 chars."""
    for line in reply.splitlines():
        if line.strip():
            return line.strip().strip("`")[:MAX_ACTION_CHARS]
    return ""


class ScienceWorldEnv(TextEnv):
    """ScienceWorld tasks on pooled JVMs reset between episodes, the simulator's own score."""

    task_type: ClassVar[type[ScienceWorldTask]] = ScienceWorldTask
    default_task: ClassVar[Any] = {
        "id": "scienceworld/find-living-thing/225",
        "task_name": "find-living-thing",
        "variation": 225,
    }

    def __init__(
        self,
        *,
        jvm_pool: JVMPool | None = None,
        show_valid_actions: bool = False,
        system_prompt: str = SYSTEM_PROMPT,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._pool = jvm_pool
        self.show_valid_actions = show_valid_actions
        self.system_prompt = system_prompt
        self._game: Any = None
        self._broken = False
        self._reading = sw.Reading(sw.GameStep("", 0, False, 0), "", "", None)

    @property
    def pool(self) -> JVMPool:
        if self._pool is None:
            self._pool = default_pool()
        return self._pool

    # ---- episode ------------------------------------------------------------------------
    async def _before_reset(self, task: ScienceWorldTask) -> None:
        self._game = await self.pool.acquire()

    async def on_reset(self, task: ScienceWorldTask) -> list[dict[str, str]]:
        first, description, templates = await self._jvm(sw.start, task, self.show_valid_actions)
        self._reading = first
        text = (
            f"{description}\n\nActions you can take (OBJ and LOC stand for things and places you see):\n"
            + "\n".join(f"- {t}" for t in templates)
            + f"\n\n{first.step.observation}"
            + _valid_suffix(first)
        )
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": text}]

    async def on_step(self, action: str) -> Step:
        before = self._reading.step.moves
        reading = self._reading = await self._jvm(sw.act, parse_action(action), self.show_valid_actions)
        now, task = reading.step, self.task
        over_limit = now.moves > task.step_limit
        done = now.completed or over_limit
        info = {
            "score": now.score,
            "moves": now.moves,
            "completed": now.completed,
            "success": is_success(now.score, now.completed),
            "moved": now.moves > before,
        }
        if over_limit and not now.completed:
            info["truncated_by"] = "step_limit"
        return Step(
            now.observation + ("" if done else _valid_suffix(reading)),
            reward=episode_reward(now.score) if done else 0.0,
            terminated=now.completed,
            truncated=over_limit and not now.completed,
            info=info,
        )

    async def on_finish(self) -> tuple[float, dict[str, Any]]:
        last = self._reading.step
        return episode_reward(last.score), {
            "score": last.score,
            "success": is_success(last.score, last.completed),
        }

    async def state_hash(self) -> str:
        """The world as the agent can read it: the room, the inventory, the score (read with
        each step, not asking the JVM again)."""
        r = self._reading
        return stable_hash([self.task_id, r.room, r.inventory, r.step.score])

    # ---- internals ----------------------------------------------------------------------
    async def _jvm(self, fn: Any, *args: Any) -> Any:
        """`fn(game, *args)` in a worker thread (Py4J calls block); a JVM that failed is not
        given back to the pool."""
        try:
            return await asyncio.to_thread(fn, self._game, *args)
        except JVMDied:
            self._broken = True
            raise

    def _end_episode(self, broken: bool = False) -> None:
        game, self._game = self._game, None
        if game is not None:
            self.pool.release(game, broken=broken or self._broken)
        self._broken = False
        super()._end_episode(broken)


def _valid_suffix(reading: sw.Reading) -> str:
    return "" if reading.valid is None else "\n\nValid actions: " + ", ".join(reading.valid)
