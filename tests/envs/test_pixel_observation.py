"""Envs that see pixels: `make_observation` adds a screenshot beside the chat messages."""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from arborl.envs import Step, TextEnv, register_env
from arborl.envs.episodes import run_episode
from arborl.envs.spaces import chat_observation_space, observation_messages


class PaintEnv(TextEnv):
    """Each reply paints one more row of a 4x4 image white."""

    default_task = {"id": "paint"}  # noqa: RUF012 - as in the documented user env

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observation_space = spaces.Dict(
            {"messages": chat_observation_space(), "screenshot": spaces.Box(0, 255, (4, 4, 3), np.uint8)}
        )

    async def on_reset(self, task):
        self.rows = 0
        return "Paint."

    async def on_step(self, action):
        self.rows += 1
        return Step(f"{self.rows} rows", reward=1.0, terminated=self.rows == 4)

    async def make_observation(self, messages):
        img = np.zeros((4, 4, 3), np.uint8)
        img[: self.rows] = 255
        return {"messages": messages, "screenshot": img}


def test_pixel_observations_pass_check_env_and_the_runner_reads_their_messages():
    register_env("arborl-test/Paint-v0", PaintEnv)
    env = gymnasium.make("arborl-test/Paint-v0")  # its spec says nondeterministic: info holds timings
    check_env(env, skip_render_check=True)
    obs, _ = env.reset()
    assert observation_messages(obs)[0]["content"] == "Paint." and obs["screenshot"].sum() == 0
    obs, *_ = env.step("go")
    assert obs["screenshot"][0].min() == 255 and obs["screenshot"][1].max() == 0
    ep = env.unwrapped  # the runner drives the async twin
    from arborl.envs.event_loop import get_env_loop

    episode = get_env_loop().run(run_episode(ep, lambda m, i: "more", {"id": "p"}))
    assert episode.turns == 4 and episode.terminated
    assert [m["content"] for m in episode.messages if m["role"] == "user"][-1] == "4 rows"
