"""arborl/Desktop-v0 in real containers: real Xvfb, openbox, xdotool, apps; real evaluation."""

from __future__ import annotations

import time

import numpy as np
import pytest
from desktop_helpers import code, task, xterm

from arborl.envs import TaskError, TurnLimit
from arborl.envs.desktop import DesktopSetupError
from arborl.envs.desktop.support import DESKTOP
from arborl.envs.event_loop import get_env_loop
from arborl.tasks.osworld import load_osworld_task

pytestmark = [pytest.mark.docker, pytest.mark.gui]


def window(info: dict, cls: str) -> dict:
    (w,) = [w for w in info["windows"] if w["wm_class"] == cls]
    return w


def uncovered(w: dict, over: dict) -> tuple[int, int]:
    """A point inside window `w` that window `over` does not cover."""
    for fx in (0.05, 0.5, 0.95):
        for fy in (0.3, 0.6, 0.9):
            x, y = w["x"] + int(w["width"] * fx), w["y"] + int(w["height"] * fy)
            if not (
                over["x"] <= x < over["x"] + over["width"] and over["y"] <= y < over["y"] + over["height"]
            ):
                return x, y
    raise AssertionError(f"{over} covers {w}")


def test_reset_shows_the_desktop_and_the_task(desktop):
    obs, info = desktop.reset()
    assert obs in desktop.observation_space
    shot = obs["screenshot"]
    assert shot.shape == (768, 1024, 3) and shot.dtype == np.uint8
    term = window(info, "XTerm")
    assert term["active"] and term["visible"]
    inside = shot[
        term["y"] + 10 : term["y"] + term["height"] - 10, term["x"] + 10 : term["x"] + term["width"] - 10
    ]
    assert inside.mean() > 200 and shot[:50, :50].max() == 0  # a white terminal on a black root
    system, user = obs["messages"]
    assert "1024x768" in system["content"] and "pyautogui" in system["content"]
    assert user["content"].startswith("Use the terminal") and '"agent@sandbox: ~" (XTerm)' in user["content"]
    # The launched window's title as the step saw it: the shell retitles xterm when it starts,
    # which may come after the window is mapped and focused.
    (launched,) = info["setup"]
    assert launched == {"phase": "config", "step": 1, "type": "launch", "window": launched["window"]}
    assert launched["window"] in ("agent@sandbox: ~", "xterm")
    desktop.unwrapped.render_mode = "rgb_array"
    try:
        assert (desktop.render() == shot).all()
    finally:
        desktop.unwrapped.render_mode = None


def test_scripted_actions_solve_the_task_and_doing_nothing_fails_it(desktop):
    desktop.reset()
    first = desktop.unwrapped.sandbox.id
    _, reward, terminated, truncated, info = desktop.step(
        code("pyautogui.write('echo hello desktop > ~/hello.txt\\n')", "time.sleep(0.3)", "DONE")
    )
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["evaluation"]["metrics"][0]["result"] == "hello desktop\n"
    desktop.reset()  # the same sandbox, reset in place: hello.txt is gone
    assert desktop.unwrapped.sandbox.id == first
    assert desktop.step("DONE")[1] == 0.0
    desktop.reset()
    desktop.step(code("pyautogui.write('echo hello desktop > ~/hello.txt\\n')", "time.sleep(0.3)"))
    assert desktop.step("FAIL")[1:3] == (0.0, True)  # giving up on a feasible task scores 0


def test_mouse_and_keyboard_reach_the_apps(desktop, tmp_path):
    spec = task(
        config=[
            {"type": "execute", "parameters": {"command": "printf 'one\\n' > ~/note.txt", "shell": True}},
            xterm(),
            {"type": "open", "parameters": {"path": "/home/agent/note.txt"}},
        ],
        evaluator={
            "func": "compare_text_file",
            "result": {"type": "vm_file", "path": "/home/agent/note.txt", "dest": "note.txt"},
            "expected": {"type": "cache_file", "path": "want.txt"},
        },
    )
    spec["config"].insert(
        0,
        {"type": "execute", "parameters": {"command": ["printf", "one\\nhéllo wörld"], "stdout": "want.txt"}},
    )
    obs, info = desktop.reset(options={"task": load_osworld_task(spec, support=DESKTOP)})
    pad, term = window(info, "Mousepad"), window(info, "XTerm")
    assert pad["active"] and not term["active"]

    # A click on the terminal activates it (its top-left corner is outside the editor).
    obs, *_, info = desktop.step(code(f"pyautogui.click({term['x'] + 5}, {term['y'] + 5})"))
    assert window(info, "XTerm")["active"] and not window(info, "Mousepad")["active"]

    # Drag the terminal by its title bar: it moves by the drag's offset.
    x0, y0 = term["x"] + 60, term["y"] - 8
    obs, *_, info = desktop.step(
        code(f"pyautogui.moveTo({x0}, {y0})", f"pyautogui.dragTo({x0 - 100}, {y0 + 50})")
    )
    moved = window(info, "XTerm")
    assert (moved["x"], moved["y"]) == (term["x"] - 100, term["y"] + 50)

    # Back to the editor: type (non-ASCII too), save; the screen changes where the text goes.
    before = obs["screenshot"]
    obs, _reward, terminated, _, info = desktop.step(
        code(
            "pyautogui.click({}, {})".format(*uncovered(pad, moved)),
            "pyautogui.hotkey('ctrl', 'End')",
            "pyautogui.write('héllo wörld')",
            "pyautogui.hotkey('ctrl', 's')",
            "time.sleep(0.3)",
        )
    )
    assert window(info, "Mousepad")["active"] and not terminated
    changed = (obs["screenshot"] != before).any(axis=2)
    ys, xs = np.nonzero(changed)
    inside = (
        (xs >= pad["x"]) & (xs < pad["x"] + pad["width"]) & (ys >= pad["y"]) & (ys < pad["y"] + pad["height"])
    )
    assert inside.sum() > 50  # the typed text, in the editor
    # The editor writes the file on its own time (slower on a loaded machine): wait for it.
    sb, run, saved = desktop.unwrapped.sandbox.raw, get_env_loop().run, ""
    for _ in range(50):
        saved = run(sb.exec("cat /home/agent/note.txt")).stdout
        if saved != "one\n":
            break
        time.sleep(0.1)
    assert saved == "one\nhéllo wörld", f"the editor saved {saved!r}"
    assert desktop.step("DONE")[1] == 1.0


def test_wait_and_sleep_take_their_time_and_the_hash_follows_the_screen(desktop):
    _, info0 = desktop.reset()
    start = time.perf_counter()
    *_, info1 = desktop.step("WAIT")
    assert time.perf_counter() - start >= 1.0  # wait_s
    assert info1["state_hash"] == info0["state_hash"]  # nothing moved
    *_, info2 = desktop.step(code("pyautogui.write('ls')"))
    assert info2["state_hash"] != info1["state_hash"]


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("Let me think about which button to press.", "no action found"),
        (code("pyautogui.click(4000, 10)"), "outside the 1024x768 screen"),
        (code("pyautogui.press('entr')"), "unknown key 'entr'"),
        (code("import os", "os.system('touch ~/out.txt')"), "not a supported action"),
        (code("n = 3", "pyautogui.press('a', presses=n)"), "only pyautogui calls"),
        (b"\xff\xfe raw bytes", "no action found"),
    ],
)
def test_bad_actions_are_error_observations_and_the_episode_goes_on(desktop, reply, message):
    desktop.reset()
    obs, reward, terminated, truncated, info = desktop.step(reply)
    assert obs in desktop.observation_space
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["format_error"] and message in info["action_error"]
    assert message in obs["messages"][0]["content"] and "Nothing was done" in obs["messages"][0]["content"]
    assert obs["screenshot"].any()  # a real screenshot of the unchanged desktop
    desktop.step(code("pyautogui.write('echo hello desktop > ~/hello.txt\\n')", "time.sleep(0.3)"))
    assert desktop.step("DONE")[1] == 1.0


def test_a_failing_action_is_reported_and_the_rest_skipped(desktop):
    desktop.reset()
    sb = desktop.unwrapped.sandbox.raw
    run = get_env_loop().run
    run(sb.exec("chmod 000 /usr/bin/xdotool", user="root"))  # an image whose xdotool is broken
    try:
        obs, reward, terminated, truncated, info = desktop.step(
            code("pyautogui.write('x')", "pyautogui.press('enter')")
        )
    finally:
        run(sb.exec("chmod 755 /usr/bin/xdotool", user="root"))
    assert (reward, terminated, truncated) == (0.0, False, False) and not info.get("format_error")
    assert info["action_error"].startswith("action 1 failed (exit code 126)")
    assert "Ran 0 of 2 actions" in obs["messages"][0]["content"] and obs["screenshot"].any()
    obs, *_, info = desktop.step(
        code("pyautogui.write('echo hello desktop > ~/hello.txt\\n')", "time.sleep(0.3)")
    )
    assert "action_error" not in info and desktop.step("DONE")[1] == 1.0


def test_a_crashed_x_server_is_recovered_by_reset(desktop):
    desktop.reset()
    sandbox_id = desktop.unwrapped.sandbox.id
    get_env_loop().run(desktop.unwrapped.sandbox.raw.exec("pkill -9 Xvfb; sleep 0.2", user="root"))
    obs, reward, terminated, truncated, info = desktop.step(code("pyautogui.click(10, 10)"))
    assert truncated and not terminated and reward == 0.0
    assert "X display" in info["sandbox_error"] and "DisplayError" in info["sandbox_error"]
    assert obs in desktop.observation_space and not obs["screenshot"].any()  # a blank screen
    obs, info = desktop.reset()  # in place: every process killed, a fresh X server started
    assert desktop.unwrapped.sandbox.id == sandbox_id
    assert window(info, "XTerm")["active"] and obs["screenshot"].any()
    desktop.step(code("pyautogui.write('echo hello desktop > ~/hello.txt\\n')", "time.sleep(0.3)"))
    assert desktop.step("DONE")[1] == 1.0


def test_a_sandbox_whose_display_cannot_start_is_replaced(desktop):
    desktop.reset()
    env = desktop.unwrapped
    old, replaced = env.sandbox.id, env.replaced_sandboxes
    # Outside the reset paths, so an in-place reset keeps it: this sandbox can never show X again.
    get_env_loop().run(env.sandbox.raw.exec("chmod 000 /usr/bin/Xvfb", user="root"))
    desktop.step("DONE")
    obs, info = desktop.reset()
    assert env.replaced_sandboxes == replaced + 1 and env.sandbox.id != old
    assert window(info, "XTerm")["active"] and obs["screenshot"].any()


def test_setup_steps_and_getters_in_a_real_sandbox(desktop, tmp_path):
    (tmp_path / "data.txt").write_text("uploaded\n")
    spec = task(
        config=[
            {
                "type": "upload_file",
                "parameters": {"files": [{"local_path": "data.txt", "path": "/home/agent/in/data.txt"}]},
            },
            {
                "type": "execute",
                "parameters": {"command": "cat ~/in/data.txt", "shell": True, "stdout": "copy.txt"},
            },
            {
                "type": "execute",
                "parameters": {
                    "command": "n=$(cat ~/n 2>/dev/null || echo 0); echo $((n+1)) > ~/n; cat ~/n",
                    "shell": True,
                    "until": {"stdout": "3"},
                },
            },
            {
                "type": "execute",
                "parameters": {"command": ["python", "-c", "open('/home/agent/py.txt', 'w').write('py')"]},
            },
            xterm(),
            {"type": "open", "parameters": {"path": "/home/agent/in/data.txt"}},
            {"type": "activate_window", "parameters": {"window_name": "XTerm", "by_class": True}},
            {"type": "sleep", "parameters": {"seconds": 0.2}},
        ],
        evaluator={
            "func": [
                *("compare_text_file", "exact_match", "check_include_exclude", "check_direct_json_object"),
                *("check_direct_json_object", "exact_match", "exact_match", "is_in_list", "is_in_list"),
            ],
            "result": [
                {"type": "vm_file", "path": "/home/agent/in/data.txt", "dest": "data.txt"},
                {"type": "vm_command_line", "command": "cat ~/n ~/py.txt", "shell": True},
                {"type": "vm_command_error", "command": ["ls", "/nope"]},
                {"type": "list_directory", "path": "/home/agent/in"},
                {"type": "vm_window_size", "app_class_name": "mousepad"},
                {"type": "vm_screen_size"},
                {"type": "vm_active_window_title"},
                {"type": "vm_window_titles"},
                {
                    "type": "vm_file",
                    "path": ["/nope", "/home/agent/n"],
                    "dest": ["a", "b"],
                    "multi": True,
                    "gives": [0, 1],
                },
            ],
            "expected": [
                {"type": "cache_file", "path": "copy.txt"},
                {"type": "rule", "rules": {"expected": "3\npy"}},
                {"type": "rule", "rules": {"include": ["No such file"]}},
                {
                    "type": "rule",
                    "rules": {
                        "expected": {
                            "type": "directory",
                            "name": "in",
                            "children": [{"type": "file", "name": "data.txt"}],
                        }
                    },
                },
                {"type": "rule", "rules": {"expected": {"width": 640, "height": 480}}},
                {"type": "rule", "rules": {"expected": {"width": 1024, "height": 768}}},
                {"type": "rule", "rules": {"expected": "agent@sandbox: ~"}},
                {"type": "rule", "rules": {"expected": "~/in/data.txt - Mousepad"}},
                {"type": "rule", "rules": {"expected": None}},
            ],
        },
    )
    t = load_osworld_task({**spec, "id": "test/getters"}, base_dir=tmp_path, support=DESKTOP)
    _, info = desktop.reset(options={"task": t})
    assert [s["type"] for s in info["setup"]] == [s["type"] for s in spec["config"]]
    assert info["setup"][2]["attempts"] == 3  # `until` repeated the command until stdout held 3
    _, reward, terminated, _, info = desktop.step("DONE")
    metrics = info["evaluation"]["metrics"]
    assert reward == 1.0 and terminated and [m["score"] for m in metrics] == [1.0] * 9, metrics
    missing, present = metrics[8]["result"]  # multi vm_file: None for the missing file
    assert missing is None and present.endswith("/b")


#: Closes Mousepad, then passes if the terminal is the only window left.
CLOSE_MOUSEPAD = {
    "postconfig": [{"type": "close_window", "parameters": {"window_name": "Mousepad"}}],
    "func": "is_in_list",
    "result": {"type": "vm_window_titles"},
    "expected": {"type": "rule", "rules": {"expected": "agent@sandbox: ~"}},
}


def test_windows_are_found_by_title_or_class_to_activate_and_close(desktop):
    spec = task(
        config=[
            xterm(),
            {"type": "launch", "parameters": {"command": "mousepad", "shell": True}},
            {"type": "activate_window", "parameters": {"window_name": "agent@sandbox: ~", "strict": True}},
        ],
        evaluator=CLOSE_MOUSEPAD,
    )
    _, info = desktop.reset(options={"task": load_osworld_task(spec, support=DESKTOP)})
    assert window(info, "XTerm")["active"] and not window(info, "Mousepad")["active"]
    _, reward, *_, info = desktop.step("DONE")
    assert reward == 1.0 and info["evaluation"]["metrics"][0]["result"] == ["agent@sandbox: ~"]


def test_a_focus_thief_the_agent_leaves_does_not_steer_close_window(desktop):
    """The agent leaves a loop that keeps giving its terminal the focus, then says DONE. The
    evaluator's close_window must close the window it names, Mousepad, and no other: sent
    through the keyboard focus, the close would land on the terminal (or never be sent)."""
    spec = task(
        config=[xterm(), {"type": "launch", "parameters": {"command": "mousepad", "shell": True}}],
        evaluator=CLOSE_MOUSEPAD,
    )
    _, info = desktop.reset(options={"task": load_osworld_task(spec, support=DESKTOP)})
    x, y = uncovered(window(info, "XTerm"), over=window(info, "Mousepad"))
    # xterm exports its own window id to its shell as $WINDOWID
    thief = "(while :; do xdotool windowactivate $WINDOWID; done) >/dev/null 2>&1 &\\n"
    _, _, terminated, _, info = desktop.step(
        code(f"pyautogui.click({x}, {y})", f"pyautogui.write('{thief}')", "time.sleep(1)")
    )
    assert not terminated and window(info, "XTerm")["active"]
    _, reward, terminated, _, info = desktop.step("DONE")
    assert terminated and info["evaluation"]["metrics"][0]["result"] == ["agent@sandbox: ~"]
    assert reward == 1.0


def test_setup_errors_are_loud_and_the_env_stays_usable(desktop):
    missing = task(config=[{"type": "open", "parameters": {"path": "/home/agent/nope.txt"}}])
    with pytest.raises(
        DesktopSetupError, match=r"config step 1 \(open\): /home/agent/nope.txt does not exist"
    ):
        desktop.reset(options={"task": missing})
    no_app = task(config=[{"type": "launch", "parameters": {"command": ["no-such-app", "--flag"]}}])
    with pytest.raises(DesktopSetupError, match="'no-such-app' is not installed"):
        desktop.reset(options={"task": no_app})
    with pytest.raises(
        TaskError, match="not a valid OSWorld task: x: evaluator: metric 'nope' is not supported"
    ):
        desktop.reset(options={"task": {"id": "x", "instruction": "y", "evaluator": {"func": "nope"}}})
    _obs, info = desktop.reset()
    assert window(info, "XTerm")["active"]


def test_a_budget_cut_off_evaluates_the_desktop_as_it_is(desktop):
    env = TurnLimit(desktop, max_turns=1)
    env.reset()
    _, reward, terminated, truncated, info = env.step(
        code("pyautogui.write('echo hello desktop > ~/hello.txt\\n')", "time.sleep(0.3)")
    )
    assert (reward, terminated, truncated) == (1.0, False, True)
    assert info["evaluation"]["metrics"][0]["score"] == 1.0 and info["evaluation"]["last_action"] is None
