"""Web-v0 with obs_type="both": the viewport's screenshot as an image part of each
observation's message (for a vision-language policy), beside the accessibility tree the
actions need; a screenshot that fails is an infrastructure error, never the agent's 0."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import arborl.envs  # noqa: F401 - registers arborl/Web-v0
from arborl.envs.images import ImageBounds, message_images
from arborl.envs.spaces import observation_messages
from arborl.tasks import get_suite

SUITE = get_suite("web-mini")


@pytest.fixture
def env(web_bwrap_backend):
    made = gymnasium.make(
        "arborl/Web-v0", backend=web_bwrap_backend, obs_type="both", screenshot=True, viewport=(640, 480)
    )
    yield made
    made.close()


def test_both_shows_the_screenshot_in_the_message_beside_the_tree(env):
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(options={"task": SUITE.task("shop-order-status")})
    assert obs in env.observation_space
    system, user = observation_messages(obs)
    assert isinstance(system["content"], str)
    image, text = user["content"]
    assert image["type"] == "image" and "[ref=" in text["text"]  # the tree stays: actions name its ids
    # the part is the viewport the env's own screenshot path captured of the same page
    assert np.array_equal(image["image"], obs["screenshot"]) and image["image"].std() > 5
    obs, *_ = env.step("scroll(down)")
    (shown,) = message_images(observation_messages(obs))
    assert np.array_equal(shown, obs["screenshot"])


def test_a_larger_viewport_is_shrunk_to_the_bound(web_bwrap_backend):
    env = gymnasium.make(
        "arborl/Web-v0", backend=web_bwrap_backend, obs_type="both", image_bounds=ImageBounds(max_side=320)
    )
    try:
        obs, _ = env.reset(options={"task": SUITE.task("shop-order-status")})
        (shown,) = message_images(obs)
        assert shown.shape == (240, 320, 3)  # 1024x768, longer side to 320
    finally:
        env.close()


def test_a_failed_screenshot_ends_the_episode_as_an_infrastructure_error(env):
    env.reset(options={"task": SUITE.task("shop-order-status")})
    page = env.unwrapped._page

    async def corrupt(**_kw):
        return b"\x89PNG\r\n\x1a\n not really"

    page.screenshot = corrupt
    _, reward, terminated, truncated, info = env.step("scroll(down)")
    assert truncated and not terminated and reward == 0.0
    assert info["sandbox_fault"] == "infra" and info["truncated_by"] == "sandbox_infra"
    assert "CorruptImage" in info["sandbox_error"]


def test_image_alone_is_refused_naming_why():
    with pytest.raises(ValueError, match="accessibility tree"):
        gymnasium.make("arborl/Web-v0", obs_type="image")
