"""Desktop-v0 with obs_type (a vision-language policy's view): the screenshot as an image part
of each observation's message, OSWorld's observation type chosen to match; a screenshot that
fails is an infrastructure error (the episode ends as sandbox_infra), never the agent's 0."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from desktop_helpers import task, xterm

import arborl.envs  # noqa: F401 - registers arborl/Desktop-v0
from arborl.envs.desktop.screen import Screen
from arborl.envs.images import message_images
from arborl.envs.spaces import observation_messages


@pytest.fixture(scope="module")
def seeing(gui_backend):
    env = gymnasium.make("arborl/Desktop-v0", backend=gui_backend, park_s=60.0, obs_type="image")
    yield env
    env.close()


def test_the_screenshot_is_in_the_message_and_is_the_screen(seeing):
    assert seeing.unwrapped.observation_type == "screenshot"
    obs, _ = seeing.reset(options={"task": task("Use the terminal.", config=[xterm()])})
    assert obs in seeing.observation_space
    system, user = observation_messages(obs)
    assert isinstance(system["content"], str)
    image, text = user["content"]
    assert image["type"] == "image" and text["text"].startswith("Use the terminal.")
    assert np.array_equal(image["image"], obs["screenshot"]) and image["image"].shape == (768, 1024, 3)
    obs, _, terminated, truncated, _ = seeing.step("WAIT")
    assert not (terminated or truncated)
    (shown,) = message_images(observation_messages(obs))
    assert np.array_equal(shown, obs["screenshot"])


def test_a_failed_screenshot_ends_the_episode_as_an_infrastructure_error(seeing):
    seeing.reset(options={"task": task("Use the terminal.", config=[xterm()])})
    display = seeing.unwrapped.display
    real = display.run

    async def no_screenshot(*args, **kwargs):
        act, screen = await real(*args, **kwargs)
        return act, Screen(None, screen.windows, error="screenshot failed: gzip: invalid")

    display.run = no_screenshot
    try:
        obs, reward, terminated, truncated, info = seeing.step("WAIT")
    finally:
        display.run = real
    assert truncated and not terminated and reward == 0.0
    assert info["sandbox_fault"] == "infra" and info["truncated_by"] == "sandbox_infra"
    assert "CorruptImage" in info["sandbox_error"] and "gzip" in info["sandbox_error"]
    assert obs in seeing.observation_space  # the closing message, without a picture


def test_obs_type_chooses_osworlds_observation_type():
    for obs_type, osworld in [("text", "a11y_tree"), ("both", "screenshot_a11y_tree")]:
        env = gymnasium.make("arborl/Desktop-v0", obs_type=obs_type)
        assert env.unwrapped.observation_type == osworld
        assert env.unwrapped.shows_images == (obs_type == "both")
        env.close()
    with pytest.raises(ValueError, match="obs_type"):
        gymnasium.make("arborl/Desktop-v0", obs_type="pixels")
