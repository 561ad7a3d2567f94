"""OSWorld's `accessibility_tree` getter and `check_accessibility_tree` metric in a real
arborl/gui container: the env starts AT-SPI because the evaluator reads the tree (the
observation stays pixels only), and the metric sees what the agent typed into a GTK app."""

from __future__ import annotations

import pytest
from desktop_helpers import open_notes_in_mousepad

from arborl.envs.desktop.support import DESKTOP
from arborl.tasks.osworld import load_osworld_task


def mousepad_task(rules: list[dict]) -> dict:
    return {
        "id": "a11y-metric-mousepad",
        "instruction": "Type 'hello a11y' at the start of the note.",
        "config": open_notes_in_mousepad(),
        "evaluator": {
            "func": "check_accessibility_tree",
            "result": {"type": "accessibility_tree"},
            "expected": {"type": "rule", "rules": rules},
        },
    }


RULES = [
    # a CSS selector with an AT-SPI state, as OSWorld's rules write them
    {"selectors": ['application[name="mousepad"] frame[st|active="true"] menu[name="File"]']},
    {"xpath": '//application[@name="mousepad"]//text[contains(., "hello a11y")]'},
]


@pytest.mark.docker
@pytest.mark.gui
def test_the_tree_getter_and_metric_score_what_was_typed(desktop):
    task = load_osworld_task(mousepad_task(RULES), support=DESKTOP)
    obs, _ = desktop.reset(options={"task": task})
    assert "a11y_tree" not in obs  # the default observation: the tree is read only to evaluate
    _, reward, terminated, _, info = desktop.step("DONE")
    assert terminated and reward == 0.0, info["evaluation"]  # the File menu is there, the text not yet

    desktop.reset(options={"task": task})
    desktop.step("```python\npyautogui.write('hello a11y ')\n```")
    _, reward, terminated, _, info = desktop.step("DONE")
    assert terminated and reward == 1.0, info["evaluation"]

    # the first rule alone holds before any action: the tree is read and namespaced as OSWorld's
    desktop.reset(options={"task": load_osworld_task(mousepad_task(RULES[:1]), support=DESKTOP)})
    _, reward, *_ = desktop.step("DONE")
    assert reward == 1.0
