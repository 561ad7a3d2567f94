"""BFCL-v0's state hash on every multi-turn backend bfcl-eval ships, driven through the real
env with the calls of BFCL's own ground truth: always 16 hex digits (tests make a failure
raise), equal for equal states (two resets, two envs, two processes), and changed exactly
when a call changed the backends (Python's `==` on a copy of their attributes, the file
system's working directory by `pwd`, is the reference)."""

from __future__ import annotations

import copy
import functools
import itertools
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium
import pytest

import arborl.envs  # noqa: F401
from arborl.envs.bfcl import BfclEnv
from arborl.tasks.bfcl.backends import parse_ground_truth_call
from arborl.tasks.bfcl.data import MULTI_TURN_CATEGORIES, BfclTask, load_category
from arborl.tasks.bfcl.policies import TURN_DONE, tool_calls

HEX16 = re.compile(r"[0-9a-f]{16}")
#: bfcl-eval's multi-turn backends (posting_api.py's class is TwitterAPI).
BACKENDS = (
    "GorillaFileSystem",
    "MathAPI",
    "MessageAPI",
    "TwitterAPI",
    "TicketAPI",
    "TradingBot",
    "TravelAPI",
    "VehicleControlAPI",
)


def _env() -> BfclEnv:
    env = gymnasium.make("arborl/BFCL-v0").unwrapped
    assert isinstance(env, BfclEnv)
    return env


def _reference(env: BfclEnv) -> dict[str, dict[str, Any]]:
    """The backends' state as Python compares it (not hashed)."""
    assert env._backends is not None
    state = {}
    for name, inst in env._backends.instances.items():
        attrs = {
            k: copy.deepcopy(v)
            for k, v in vars(inst).items()
            if k != "_api_description" and not isinstance(v, random.Random)
        }
        if "_current_dir" in attrs:
            attrs["_current_dir"] = inst.pwd()
        state[name] = attrs
    return state


def walk(task: BfclTask, env: BfclEnv | None = None) -> list[tuple[str, int, dict[str, Any]]]:
    """Reset, then each ground-truth call as a step of its own, turn by turn (the last turn is
    not ended: that would score the run). Per state: (hash, user turn, reference)."""
    env = env or _env()
    _, info = env.reset(options={"task": task})
    states = [(info["state_hash"], 0, _reference(env))]
    assert env._backends is not None
    for turn, calls in enumerate(task.ground_truth):
        if turn:
            *_, info = env.step(TURN_DONE)
            states.append((info["state_hash"], turn, _reference(env)))
        for source in calls:
            *_, info = env.step(tool_calls([parse_ground_truth_call(source, env._backends)]))
            states.append((info["state_hash"], turn, _reference(env)))
    return states


@functools.cache
def task_for(backend: str) -> BfclTask:
    """The first multi_turn_base task of `backend` whose ground truth changes its state (any,
    for MathAPI, which has none)."""
    tasks = [t for t in load_category("multi_turn_base") if backend in t.entry["involved_classes"]]
    for task in tasks:
        refs = [ref[backend] for *_, ref in walk(task)]
        if any(r != refs[0] for r in refs):
            return task
    return tasks[0]


def test_the_backends_are_all_of_bfcls() -> None:
    shipped = {
        c for cat in MULTI_TURN_CATEGORIES for t in load_category(cat) for c in t.entry["involved_classes"]
    }
    assert shipped == set(BACKENDS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_hash_follows_the_backends_state(backend: str) -> None:
    task = task_for(backend)
    states = walk(task)
    changed = 0
    for (h0, turn0, ref0), (h1, turn1, ref1) in itertools.pairwise(states):
        assert HEX16.fullmatch(h1)
        if turn1 != turn0:
            assert h1 != h0  # a new user turn is a new state
            continue
        assert (h1 != h0) == (ref1 != ref0), f"{task.id}: hash and state disagree"
        changed += ref1[backend] != ref0[backend]
    if backend == "MathAPI":
        assert _reference(_reset(task))["MathAPI"] == {}  # no state: its calls change nothing
    else:
        assert changed, f"{task.id}: no ground-truth call changed {backend}"


def _reset(task: BfclTask) -> BfclEnv:
    env = _env()
    env.reset(options={"task": task})
    return env


def test_equal_states_hash_equal() -> None:
    for backend in BACKENDS:
        task = task_for(backend)
        env = _env()
        first = walk(task, env)
        _, info = env.reset(options={"task": task})
        assert info["state_hash"] == first[0][0]  # a reset after a walk: the start again
        assert [h for h, *_ in walk(task, env)] == [h for h, *_ in first]
        assert [h for h, *_ in walk(task)] == [h for h, *_ in first]  # another env


def test_the_file_systems_working_directory_is_state() -> None:
    task = task_for("GorillaFileSystem")
    env = _reset(task)
    _, info = env.reset(options={"task": task})
    home = info["state_hash"]
    folder = next(
        k
        for k, v in env._backends.instances["GorillaFileSystem"].root.contents.items()
        if hasattr(v, "contents")
    )
    *_, info = env.step(tool_calls([("cd", {"folder": folder})]))
    assert info["state_hash"] != home
    *_, info = env.step(tool_calls([("cd", {"folder": ".."})]))
    assert info["state_hash"] == home


def test_hashes_are_the_same_in_another_process() -> None:
    here = {b: [h for h, *_ in walk(task_for(b))] for b in BACKENDS}
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import test_bfcl_state_hash as t; "
        "print(json.dumps({b: [h for h, *_ in t.walk(t.task_for(b))] for b in t.BACKENDS}))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == here


@pytest.mark.parametrize("category", MULTI_TURN_CATEGORIES)
def test_every_state_of_every_gold_run_hashes(category: str) -> None:
    """All of BFCL's multi-turn tasks (long_context included): the reset and every ground-truth
    call give a hash (a failure raises in tests)."""
    env = _env()
    for task in load_category(category):
        _, info = env.reset(options={"task": task})
        hashes = [info["state_hash"]]
        for turn, calls in enumerate(task.ground_truth):
            if turn:
                hashes.append(env.step(TURN_DONE)[-1]["state_hash"])
            if calls:
                reply = tool_calls([parse_ground_truth_call(c, env._backends) for c in calls])
                hashes.append(env.step(reply)[-1]["state_hash"])
        assert all(HEX16.fullmatch(h) for h in hashes), task.id
