"""A deterministic multi-turn text env for agent and trainer tests (importable as `countdown`:
pytest puts tests/ on sys.path for tests/conftest.py)."""

from __future__ import annotations

from arborl.envs import Step, TextEnv


class Countdown(TextEnv):
    """Says a number each turn, counting down; the episode ends at 0 with reward 1."""

    default_task = {"id": "count", "start": 3}  # noqa: RUF012

    async def on_reset(self, task):
        self.left = int(task["start"])
        return [{"role": "system", "content": "Count."}, {"role": "user", "content": f"{self.left} left"}]

    async def on_step(self, action):
        self.left -= 1
        return Step(
            f"{self.left} left (you said {len(action)} chars)",
            reward=float(self.left == 0),
            terminated=self.left == 0,
        )
