"""OSWorld's observation types: the accessibility tree (AT-SPI in the container) alone or with
the screenshot, read from a real GTK app, and Gymnasium's `check_env` on that observation space."""

from __future__ import annotations

import warnings

import pytest
from desktop_helpers import open_notes_in_mousepad

from arborl.envs.desktop.a11y import linearize, terminal_output
from arborl.envs.desktop.env import DesktopEnv
from arborl.envs.desktop.support import DESKTOP
from arborl.tasks.osworld import load_osworld_task

TREE = (
    '<desktop-frame xmlns:cp="https://accessibility.ubuntu.example.org/ns/component" name="main">'
    '<application name="mousepad"><frame name="notes.txt - Mousepad" cp:screencoord="(1, 2)" cp:size="(640, 480)">'
    '<menu name="File" cp:screencoord="(3, 4)" cp:size="(39, 25)" />'
    '<filler name="" cp:screencoord="(3, 4)" cp:size="(9, 9)" />'
    '<push-button name="Hidden" cp:screencoord="(0, 0)" cp:size="(0, 0)" />'
    '<text name="" cp:screencoord="(5, 6)" cp:size="(600, 400)">two\nlines</text>'
    "</frame></application></desktop-frame>"
)


def test_linearize_lists_named_or_texted_nodes_on_screen():
    rows = linearize(TREE).splitlines()
    assert rows[0].startswith("tag\tname\ttext")
    assert rows[1:] == [
        "frame\tnotes.txt - Mousepad\t\t(1, 2)\t(640, 480)",
        "menu\tFile\t\t(3, 4)\t(39, 25)",
        "text\t\ttwo\\nlines\t(5, 6)\t(600, 400)",
    ]
    assert linearize("") == rows[0] and linearize("<broken") == rows[0]


def test_terminal_output_is_the_focused_terminal_of_the_active_window():
    st = 'xmlns:st="https://accessibility.ubuntu.example.org/ns/state"'

    def tree(*frames):
        return f'<desktop-frame {st} name="main"><application name="lxterminal">{"".join(frames)}</application></desktop-frame>'

    active = '<frame name="a" st:active="true"><terminal name="" st:focused="true">$ stty size\n43 132\n$  </terminal></frame>'
    inactive = '<frame name="b"><terminal name="" st:focused="true">other</terminal></frame>'
    assert terminal_output(tree(active, inactive)) == "$ stty size\n43 132\n$"
    assert terminal_output(tree(inactive)) is None  # no active window
    assert terminal_output(tree(active.replace('st:focused="true"', ""))) is None  # not focused
    assert terminal_output(tree(active, active)) is None  # two candidates: OSWorld gives None too
    assert terminal_output("") is None


def test_an_unknown_observation_type_is_refused():
    with pytest.raises(ValueError, match="observation_type 'pixels'"):
        DesktopEnv(observation_type="pixels")


@pytest.mark.docker
@pytest.mark.gui
def test_the_a11y_tree_observation_reads_a_gtk_app_and_passes_check_env(gui_backend):
    import gymnasium
    from gymnasium.utils.env_checker import check_env

    env = gymnasium.make("arborl/Desktop-v0", backend=gui_backend, observation_type="screenshot_a11y_tree")
    try:
        assert set(env.observation_space.spaces) == {"messages", "screenshot", "a11y_tree"}
        task = load_osworld_task(
            {
                "id": "a11y-mousepad",
                "instruction": "Add a line.",
                "config": open_notes_in_mousepad(),
                "evaluator": {"func": "infeasible"},
            },
            support=DESKTOP,
        )
        obs, _ = env.reset(options={"task": task})
        assert env.observation_space.contains(obs)
        tree = obs["a11y_tree"]
        assert tree.startswith("<desktop-frame") and '<application name="mousepad">' in tree
        assert 'name="File"' in tree and "first line" in tree  # a menu, and the text view's text
        assert "Accessibility tree:\nframe\t~/notes.txt - Mousepad" in obs["messages"][-1]["content"].replace(
            "tag\tname\ttext\tposition (top-left x&y)\tsize (w&h)\n", ""
        )
        obs, *_ = env.step("```python\npyautogui.write('hello a11y ')\n```")
        assert "hello a11y first line" in obs["a11y_tree"]
    finally:
        env.close()

    # only the tree (no pixels): Gymnasium's own checks, over the default task (an xterm, which
    # has no accessible objects: the tree is the bare desktop frame)
    screenless = gymnasium.make("arborl/Desktop-v0", backend=gui_backend, observation_type="a11y_tree")
    try:
        assert set(screenless.observation_space.spaces) == {"messages", "a11y_tree"}
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a Gymnasium warning is a failure here
            check_env(screenless.unwrapped)
    finally:
        screenless.close()
