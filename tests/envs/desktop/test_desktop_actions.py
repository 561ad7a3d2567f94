"""The pyautogui action parser: what a model may write, what it is told when it cannot."""

from __future__ import annotations

import shlex

import pytest
from desktop_helpers import code
from hypothesis import given, settings
from hypothesis import strategies as st

from arborl.envs.desktop.actions import ActionError, keysym, parse_actions, to_commands

W, H = 1024, 768


def parse(reply: str) -> list:
    return parse_actions(reply, W, H)


def argvs(reply: str) -> list[list[str]]:
    return [shlex.split(line) for a in parse(reply) for line in to_commands(a)]


def test_a_code_block_of_pyautogui_calls_becomes_actions_in_order():
    reply = "I will save.\n" + code(
        "import pyautogui, time",
        "pyautogui.click(10, 20)",
        "pyautogui.typewrite('hi')",
        "time.sleep(0.5)",
        "pyautogui.hotkey('ctrl', 's')",
    )
    actions = parse(reply)
    assert [a.name for a in actions] == ["click", "write", "sleep", "hotkey"]
    assert actions[0].args["x"] == 10 and actions[0].args["y"] == 20 and actions[0].args["clicks"] == 1
    assert actions[3].args["keys"] == ["Control_L", "s"]


def test_special_actions_alone_in_blocks_and_after_reasoning():
    assert [a.name for a in parse("DONE")] == ["DONE"]
    assert [a.name for a in parse(" FAIL \n")] == ["FAIL"]
    assert [a.name for a in parse("<think>maybe click?</think>WAIT")] == ["WAIT"]
    assert [a.name for a in parse(code("pyautogui.press('enter')", "DONE"))] == ["press", "DONE"]
    assert [a.name for a in parse("```\nFAIL\n```")] == ["FAIL"]
    assert [a.name for a in parse("pyautogui.click(1, 2)")] == ["click"]  # bare code, no block


def test_xdotool_commands_for_each_kind_of_action():
    assert argvs(code("pyautogui.click(5, 6)")) == [
        ["xdotool", "mousemove", "5", "6"],
        ["xdotool", "click", "--repeat", "1", "--delay", "0", "1"],
    ]
    assert argvs(code("pyautogui.rightClick(7, 8)"))[-1][-1] == "3"
    assert argvs(code("pyautogui.doubleClick()"))[-1][:4] == ["xdotool", "click", "--repeat", "2"]
    assert argvs(code("pyautogui.click(1, 1, button='middle', clicks=3, interval=0.2)"))[-1] == [
        "xdotool", "click", "--repeat", "3", "--delay", "200", "2",
    ]  # fmt: skip
    assert argvs(code("pyautogui.scroll(-3, 100, 200)"))[-1][-1] == "5"  # down
    assert argvs(code("pyautogui.scroll(2)"))[-1][-1] == "4"  # up, at the pointer
    assert argvs(code("pyautogui.hscroll(2)"))[-1][-1] == "7"
    drag = [
        line for a in parse(code("pyautogui.dragTo(300, 400, button='right')")) for line in to_commands(a)
    ]
    assert (
        drag[1] == "TX=300; TY=400" and drag[2] == "xdotool mousedown 3" and drag[-1] == "xdotool mouseup 3"
    )
    rel = [line for a in parse(code("pyautogui.drag(-5, 7)")) for line in to_commands(a)]
    assert rel[1] == "TX=$((X + -5)); TY=$((Y + 7))"
    assert argvs(code("pyautogui.press('f5', presses=2)")) == [
        ["xdotool", "key", "--repeat", "2", "--delay", "10", "--", "F5"]
    ]
    assert argvs(code("pyautogui.keyDown('shift')")) == [["xdotool", "keydown", "--", "Shift_L"]]
    assert argvs(
        code("time.sleep(30)"),
    ) == [["sleep", "10.000"]]  # capped at max_wait_s


def test_typed_text_keeps_every_character_and_presses_return_for_newlines():
    lines = argvs(code("pyautogui.write('a \"quoted\" $HOME\\nnext\\tcol')"))
    assert lines == [
        ["xdotool", "type", "--delay", "5", "--", 'a "quoted" $HOME'],
        ["xdotool", "key", "Return"],
        ["xdotool", "type", "--delay", "5", "--", "next"],
        ["xdotool", "key", "Tab"],
        ["xdotool", "type", "--delay", "5", "--", "col"],
    ]
    assert argvs(code("pyautogui.write(['a', 'enter'])")) == [
        ["xdotool", "key", "--delay", "10", "--", "a", "Return"]
    ]
    assert argvs(code("pyautogui.write('-- --help')"))[0][-1] == "-- --help"  # not read as options


def test_keys_map_to_keysyms():
    assert [keysym(k) for k in ("enter", "ESC", "ctrl", "/", "é", "A", "pgdn", "KP_Enter")] == [
        "Return", "Escape", "Control_L", "slash", "U00E9", "A", "Next", "KP_Enter",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("I think I should click the button.", "no action found"),
        (code("pyautogui.click(2000, 10)"), "outside the 1024x768 screen"),
        (code("pyautogui.click(-1, 10)"), "outside"),
        (code("pyautogui.click(10)"), "needs both x and y"),
        (code("pyautogui.click(x='a', y=3)"), "x must be a number"),
        (code("pyautogui.clik(1, 2)"), "did you mean click"),
        (code("os.system('rm -rf /')"), "not a supported action"),
        (code("x = 5", "pyautogui.click(x, x)"), "only pyautogui calls are accepted"),
        (code("pyautogui.click(*pos)"), r"\*args and \*\*kwargs are not accepted"),
        (code("pyautogui.click(pos[0], 1)"), "literal values"),
        (code("pyautogui.click(1, 2, foo=3)"), "unexpected keyword argument 'foo'"),
        (code("pyautogui.press('entr')"), "did you mean 'enter'"),
        (code("pyautogui.hotkey()"), "at least one key"),
        (code("pyautogui.click(1, 2, button='fourth')"), "button must be one of"),
        (code("pyautogui.press('a', presses=1000)"), "whole number up to 100"),
        (code("time.sleep(-1)"), "must not be negative"),
        (code("pyautogui.write(42)"), "takes a string"),
        (code("pyautogui.write('" + "x" * 10_001 + "')"), "at most 10000"),
        (code(*["pyautogui.press('a')"] * 65), "at most 64"),
        (code("pyautogui.click(1, 2"), "not valid Python"),
        (code("for i in range(3): pyautogui.click(1, 1)"), "no variables, loops"),
        (code("__import__('os').system('id')"), "not a supported action"),
    ],
)
def test_bad_actions_say_what_is_wrong(reply, message):
    with pytest.raises(ActionError, match=message):
        parse(reply)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_parses_or_raises_action_error(text):
    for reply in (text, code(text), f"pyautogui.{text}"):
        try:
            actions = parse(reply)
        except ActionError:
            continue
        for a in actions:
            to_commands(a)  # whatever parses can be executed
