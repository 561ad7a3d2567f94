"""OSWorld task JSON: the loader reads real-format files and refuses what the desktop env
cannot run, loudly (the env's `support` says what it can; without it the loader checks the
format, and the env refuses the rest when the task reaches it)."""

from __future__ import annotations

import inspect
import json

import gymnasium
import pytest
from desktop_helpers import task

import arborl.envs  # noqa: F401 - registers arborl/Desktop-v0
from arborl.envs import TaskError
from arborl.envs.desktop import evaluators, osworld_metrics, steps
from arborl.envs.desktop.support import DESKTOP, GETTERS, METRICS, SETUP_STEPS
from arborl.tasks import get_suite
from arborl.tasks.osworld import (
    DesktopTask,
    ScriptedDesktopPolicy,
    TaskNeedsRoot,
    UnsupportedOSWorldFeature,
    load_osworld_dir,
    load_osworld_task,
)
from arborl.tasks.osworld.mini import load_desktop_mini

#: Trimmed from OSWorld's evaluation_examples/examples/os (its shape, unchanged).
OSWORLD_OS_TASK = {
    "id": "bedcedc4-4d72-425e-ad62-21960b11fe0d",
    "snapshot": "os",
    "instruction": "Could you set the 'Dim screen when inactive' to off in setting?",
    "source": "https://www.youtube.com/watch?v=example",
    "config": [{"type": "execute", "parameters": {"command": ["python", "-c", "print('hi')"]}}],
    "trajectory": "trajectories/",
    "related_apps": ["os"],
    "evaluator": {
        "func": "exact_match",
        "result": {
            "type": "vm_command_line",
            "command": "gsettings get org.gnome.desktop.session idle-delay",
        },
        "expected": {"type": "rule", "rules": {"expected": "uint32 0\n"}},
    },
}


def test_an_osworld_task_loads_with_its_metadata_kept():
    t = load_osworld_task(OSWORLD_OS_TASK, support=DESKTOP)
    assert t.id == OSWORLD_OS_TASK["id"] and t.instruction.startswith("Could you set")
    assert t.config[0].type == "execute" and t.evaluator.func == ("exact_match",)
    assert t.evaluator.result[0].params == {"command": "gsettings get org.gnome.desktop.session idle-delay"}
    assert t.metadata["osworld"]["related_apps"] == ["os"] and t.metadata["osworld"]["snapshot"] == "os"
    assert DesktopTask.model_validate(t.model_dump()) == t  # plain data: survives a round trip


def test_single_and_list_evaluators_normalise_to_lists():
    t = load_osworld_task(
        task(
            evaluator={
                "func": ["exact_match", "compare_text_file"],
                "conj": "or",
                "result": [{"type": "rule", "rules": {}}, {"type": "vm_file", "path": "/a", "dest": "a"}],
                "expected": [{"type": "rule", "rules": {"expected": 1}}, {"type": "cache_file", "path": "b"}],
                "options": [{}, {"ignore_case": True}],
                "postconfig": [{"type": "sleep", "parameters": {"seconds": 0.1}}],
            }
        ),
        support=DESKTOP,
    )
    ev = t.evaluator
    assert ev.func == ("exact_match", "compare_text_file") and ev.conj == "or"
    assert ev.options == ({}, {"ignore_case": True}) and ev.postconfig[0].type == "sleep"
    assert load_osworld_task(task(evaluator={"func": "infeasible"}), support=DESKTOP).evaluator.infeasible


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"config": [{"type": "download", "parameters": {"files": [{"url": "https://example.org/x.sh", "path": "x.sh"}]}}]}, UnsupportedOSWorldFeature, "x.sh is not in the download cache"),
        ({"config": [{"type": "chrome_open_tabs", "parameters": {"urls_to_open": []}}]}, UnsupportedOSWorldFeature, "Chrome"),
        ({"config": [{"type": "teleport", "parameters": {}}]}, UnsupportedOSWorldFeature, "unknown setup step 'teleport'"),
        ({"config": [{"type": "launch", "parameters": {"command": ["gedit"]}}]}, UnsupportedOSWorldFeature, "use mousepad"),
        ({"config": [{"type": "launch", "parameters": {"command": "libreoffice --calc x.xlsx", "shell": True}}]}, UnsupportedOSWorldFeature, "gnumeric"),
        ({"config": [{"type": "execute", "parameters": {"command": ["python", "-c", "import pyautogui; pyautogui.screenshot()"]}}]}, UnsupportedOSWorldFeature, "calls pyautogui.screenshot"),
        ({"config": [{"type": "open", "parameters": {"path": "/home/agent/a.docx"}}]}, UnsupportedOSWorldFeature, "no application for '.docx'"),
        ({"config": [{"type": "launch", "parameters": {"command": ["xterm"], "detach": True}}]}, UnsupportedOSWorldFeature, "parameter"),
        ({"config": [{"type": "launch", "parameters": {}}]}, ValueError, "missing"),
        ({"config": [{"type": "upload_file", "parameters": {"files": [{"local_path": "nope.txt", "path": "/a"}]}}]}, ValueError, "not a file"),
        ({"evaluator": {"func": "compare_pptx_files", "result": {"type": "vm_file", "path": "/a", "dest": "a"}}}, UnsupportedOSWorldFeature, "metric 'compare_pptx_files'"),
        ({"evaluator": {"func": "exact_match", "result": {"type": "cloud_file", "path": "u", "dest": "d"}, "expected": {"type": "rule", "rules": {}}}}, UnsupportedOSWorldFeature, "cloud_file: d is not in the download cache"),
        ({"evaluator": {"func": "exact_match", "result": {"type": "vm_wallpaper"}, "expected": {"type": "rule", "rules": {}}}}, UnsupportedOSWorldFeature, "wallpaper"),
            ({"evaluator": {"func": "check_accessibility_tree", "result": {"type": "accessibility_tree"}, "expected": {"type": "rule", "rules": [{"text": "OK"}]}}}, ValueError, "xpath"),
        ({"evaluator": {"func": "compare_csv", "result": {"type": "vm_file", "path": "/a", "dest": "a"}, "expected": {"type": "cache_file", "path": "b"}, "options": {"ignore_order": True}}}, UnsupportedOSWorldFeature, "ignore_order"),
        ({"evaluator": {"func": "exact_match", "result": {"type": "rule", "rules": {}}}}, ValueError, "needs both"),
        ({"evaluator": {"func": ["exact_match", "exact_match"], "result": [{"type": "rule", "rules": {}}]}}, ValueError, "1 entries for 2 metrics"),
        ({"evaluator": {"func": "check_json", "result": {"type": "vm_file", "path": "/a", "dest": "a"}, "expected": {"type": "rule", "rules": {"expect": [{"key": ["a"], "method": "magic", "ref": 1}]}}}}, UnsupportedOSWorldFeature, "rule method 'magic'"),
        ({"evaluator": {}}, ValueError, "func"),
        ({"instruction": ""}, ValueError, "instruction"),
    ],
)  # fmt: skip
def test_unsupported_or_malformed_tasks_fail_at_load_time_naming_the_culprit(change, error, message):
    bad = {**task(id="bad/task"), **change}
    with pytest.raises(error, match=message) as info:
        load_osworld_task(bad, support=DESKTOP)
    assert "bad/task" in str(info.value)


def test_files_on_disk_load_with_relative_uploads(tmp_path):
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "in.txt").write_text("payload")
    spec = task(
        config=[
            {
                "type": "upload_file",
                "parameters": {"files": [{"local_path": "files/in.txt", "path": "/home/agent/in.txt"}]},
            }
        ]
    )
    (tmp_path / "t.json").write_text(json.dumps(spec))
    (tasks,) = [load_osworld_dir(tmp_path, support=DESKTOP)]
    assert tasks[0].base_dir == str(tmp_path)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"broken\.json: cannot read"):
        load_osworld_dir(tmp_path, support=DESKTOP)


def test_the_desktop_vocabulary_is_implemented_by_the_env():
    """envs/desktop/support.py names what the env runs; the env must run exactly that."""
    assert set(evaluators.GETTER_TYPES) == set(GETTERS)
    assert set(osworld_metrics.METRIC_FUNCS) | {"infeasible"} == set(METRICS)
    body = inspect.getsource(steps.run_step)  # the step kinds are the branches of run_step
    for kind in SETUP_STEPS:
        assert f'"{kind}"' in body, f"setup step {kind!r} has no branch in steps.run_step"


CHROME = task(id="needs/chrome", config=[{"type": "launch", "parameters": {"command": ["google-chrome"]}}])


def test_without_the_envs_support_the_format_loads_and_the_env_refuses_it_at_reset():
    """tasks/osworld knows OSWorld's format, not what a desktop has: a task for Chrome loads
    without a support, is refused with one, and the env refuses it before taking a sandbox."""
    loaded = load_osworld_task(CHROME)
    assert loaded.config[0].parameters["command"] == ["google-chrome"]
    with pytest.raises(UnsupportedOSWorldFeature, match="'google-chrome' is not installed"):
        load_osworld_task(CHROME, support=DESKTOP)
    env = gymnasium.make("arborl/Desktop-v0").unwrapped
    for given in (loaded, CHROME):  # a DesktopTask loaded without support, an OSWorld dict
        with pytest.raises(TaskError, match=r"needs/chrome: .*'google-chrome' is not installed"):
            env._coerce_task(given)
    assert env._coerce_task(load_osworld_task(task(id="fine"))).id == "fine"
    env.close()


def test_desktop_mini_suite_is_registered_and_loads():
    suite = get_suite("desktop-mini")
    tasks = suite.tasks()
    assert suite.env_id == "arborl/Desktop-v0" and len(tasks) >= 8
    assert [t.id for t in tasks] == [t.id for t in load_desktop_mini()]
    assert any(t.evaluator.infeasible for t in tasks)
    apps = {app for t in tasks for app in t.metadata["osworld"].get("related_apps", [])}
    assert {"mousepad", "pcmanfm", "xterm", "gnumeric"} <= apps
    for t in tasks:  # every task has a gold script and an empty policy that gives up at once
        assert suite.empty_policy(t)([], {}) == "DONE"
        assert isinstance(suite.gold_policy(t), ScriptedDesktopPolicy)


def test_scripted_policy_waits_for_windows_and_clicks_inside_them():
    policy = ScriptedDesktopPolicy(
        [{"wait_window": "^Files$"}, {"click_in": ["^Files$", 10, 20], "clicks": 2}, "FAIL"], max_waits=2
    )
    assert policy([], {"windows": []}) == "WAIT"
    win = {"title": "Files", "x": 100, "y": 50}
    assert policy([], {"windows": [win]}) == "pyautogui.click(110, 70, clicks=2)"
    assert policy([], {"windows": [win]}) == "FAIL"
    assert policy([], {"windows": [win]}) == "DONE"
    gives_up = ScriptedDesktopPolicy([{"wait_window": "never"}, "DONE"], max_waits=2)
    assert [gives_up([], {}) for _ in range(3)] == ["WAIT", "WAIT", "DONE"]


#: 43c2d64c as the issue that found it describes it (`mkdir /test` with `sudo -S`; OSWorld's own
#: file could not be fetched here): its agent must make a directory in /, which needs root.
MKDIR_TEST = {
    "id": "43c2d64c-bae5-4b0a-9b1a-0a4e8f0aaa48",
    "instruction": "Please create a folder named 'test' in the root directory.",
    "config": [],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": "[ -d /test ] && echo yes", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "yes\n"}},
    },
}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({}, "only root may create a directory in /"),
        (
            {"id": "mine/adduser", "instruction": "Add the user bob; use sudo, the password is 'password'."},
            "tells the agent to use sudo",
        ),
        (
            {"id": "mine/tz", "instruction": "Set the time zone to UTC. My password is 'password'."},
            "gives the agent the sudo password",
        ),
    ],
)
def test_a_task_whose_agent_must_be_root_is_refused_with_the_reason(change, reason):
    spec = {**MKDIR_TEST, **change}
    with pytest.raises(TaskNeedsRoot, match=reason) as e:
        load_osworld_task(spec, support=DESKTOP)
    assert spec["id"] in str(e.value) and "needs the agent to be root" in str(e.value)
    assert isinstance(e.value, UnsupportedOSWorldFeature)  # what suites and scripts already refuse
    # an infeasible task is not refused: its answer is FAIL, which needs no root
    assert load_osworld_task(
        {**spec, "evaluator": {"func": "infeasible"}}, support=DESKTOP
    ).evaluator.infeasible


@pytest.mark.parametrize(
    ("where", "command", "named"),
    [
        ("postconfig", "echo password | sudo -S sh ~/check.sh", "~"),
        ("postconfig", "echo password | sudo -S chown root /home/user/file", "/home/"),
        ("getter", "echo password | sudo -S cat /tmp/answer", "/tmp"),
        ("getter", "sudo -S python3 $HOME/eval.py", "$HOME"),
    ],
)
def test_root_steps_on_the_agents_files_after_it_acted_are_refused(where, command, named):
    step = {"type": "execute", "parameters": {"command": command, "shell": True}}
    ev = (
        {"func": "infeasible", "postconfig": [step]}
        if where == "postconfig"
        else {
            "func": "exact_match",
            "result": {"type": "vm_command_line", "command": command, "shell": True},
            "expected": {"type": "rule", "rules": {"expected": ""}},
        }
    )
    with pytest.raises(TaskNeedsRoot, match="runs as root after the agent has acted") as e:
        load_osworld_task(task(evaluator=ev), support=DESKTOP)
    assert repr(named) in str(e.value)
    # before the agent acts (config), root may touch the home: OSWorld's setups do
    assert load_osworld_task(task(config=[step]), support=DESKTOP).config[0].parameters["command"] == command


def test_a_folder_with_tasks_that_cannot_run_is_refused_counting_them(tmp_path):
    (tmp_path / "ok.json").write_text(json.dumps(task(id="ok")))
    (tmp_path / "root.json").write_text(json.dumps(MKDIR_TEST))
    (tmp_path / "chrome.json").write_text(
        json.dumps(
            task(id="chrome", config=[{"type": "launch", "parameters": {"command": ["google-chrome"]}}])
        )
    )
    with pytest.raises(UnsupportedOSWorldFeature) as e:
        load_osworld_dir(tmp_path, support=DESKTOP)
    message = str(e.value)
    assert message.startswith(f"2 of 3 task files under {tmp_path} cannot run here (1 of them need root): ")
    assert "43c2d64c" in message and "google-chrome" in message
