"""`stable_hash` is total over what env states hold (mixed-type keys, sets, tuples, objects
with a stable repr), ignores order where order does not matter, is the same in every
process, and an env whose hash fails raises in tests and is counted, not flooded, in runs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import random
import re
import subprocess
import sys
from typing import Any, ClassVar

import pytest

from arborl.envs import TextEnv
from arborl.envs.state_hash import (
    STRICT_ENV_VAR,
    StateHashError,
    canonical,
    stable_hash,
    state_hash_failures,
)

HEX16 = re.compile(r"[0-9a-f]{16}")


def _old_stable_hash(obj: Any) -> str:
    """The hash before it was total: plain JSON data must still hash to exactly this."""
    data = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclasses.dataclass
class Point:
    x: int
    y: float


MIXED = {
    12446: {"symbol": "AAPL", "amount": 10},
    "order_type": "Buy",  # BFCL's trading scenarios hold such a key beside the int order ids
    (1, "a"): frozenset({"x", "y"}),
    None: [1, (2, 3), {4, 5}],
    2.5: {"nested": {7: {"z", "w"}, "k": (Point(1, 2.0),)}},
}


def test_mixed_keys_sets_tuples_and_nested_mixes_hash() -> None:
    h = stable_hash(MIXED)
    assert HEX16.fullmatch(h)
    with pytest.raises(TypeError):
        json.dumps(MIXED, sort_keys=True, default=str)  # what failed before


def test_order_does_not_matter_where_it_means_nothing() -> None:
    reordered = dict(reversed(list(MIXED.items())))
    reordered[2.5] = {"nested": {"k": (Point(1, 2.0),), 7: {"w", "z"}}}
    assert stable_hash(reordered) == stable_hash(MIXED)
    assert stable_hash({"b": 1, "a": 2}) == stable_hash({"a": 2, "b": 1})
    assert stable_hash({3, 1, 2}) == stable_hash({2, 3, 1}) == stable_hash(frozenset({1, 2, 3}))
    assert stable_hash({1: "a", "1": "b"}) == stable_hash({"1": "b", 1: "a"})


def test_order_and_type_matter_where_they_mean_something() -> None:
    assert stable_hash([1, 2]) != stable_hash([2, 1])
    assert stable_hash({1: "a"}) != stable_hash({"1": "a"})  # two different dict lookups
    assert stable_hash(1) != stable_hash(1.0) != stable_hash(True)
    assert stable_hash({1, 2}) != stable_hash([1, 2])
    assert stable_hash(Point(1, 2.0)) != stable_hash(Point(2, 1.0))
    assert stable_hash({"a": {1, 2}}) != stable_hash({"a": {1, 3}})


def test_a_tuple_hashes_as_its_list_and_plain_json_as_before() -> None:
    assert stable_hash((1, "a", (2,))) == stable_hash([1, "a", [2]])
    for plain in (
        ["task", 3, {"b": [1, 2.5, None], "a": {"c": True}}],
        {"ünï": "cödé", "k": [[], {}]},
        "text",
        None,
    ):
        assert canonical(plain) == json.loads(json.dumps(plain))
        assert stable_hash(plain) == _old_stable_hash(plain)


def test_a_repr_with_a_memory_address_or_a_cycle_is_refused() -> None:
    with pytest.raises(StateHashError, match="memory address"):
        stable_hash({"rng": random.Random(0)})
    with pytest.raises(StateHashError, match="memory address"):
        stable_hash([object()])
    loop: list[Any] = [1]
    loop.append({"back": loop})
    with pytest.raises(StateHashError, match="cycle"):
        stable_hash(loop)
    shared = [1, 2]
    assert HEX16.fullmatch(stable_hash([shared, {"again": shared}]))  # shared, not a cycle


def test_hashes_are_the_same_in_processes_with_other_hash_seeds() -> None:
    code = (
        "from arborl.envs.state_hash import stable_hash\n"
        "print(stable_hash([{'b', 'a', 'c', 'dd'}, {'x': frozenset({'p', 'q'}), 1: ('t',)}]))"
    )
    here = stable_hash([{"a", "b", "c", "dd"}, {1: ("t",), "x": frozenset({"q", "p"})}])
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == here


class BrokenHashEnv(TextEnv):
    """An env whose state cannot be hashed: it keeps a random generator in its state."""

    default_task: ClassVar[dict[str, str]] = {"id": "broken"}

    async def on_reset(self, task: Any) -> str:
        return "start"

    async def on_step(self, action: str) -> Any:
        from arborl.envs.base import Step

        return Step("ok")

    async def state_hash(self) -> str:
        return stable_hash({"rng": random.Random(0)})


def test_a_hash_failure_raises_in_tests() -> None:
    assert os.environ.get(STRICT_ENV_VAR) == "1"  # tests/conftest.py
    env = BrokenHashEnv()
    with pytest.raises(StateHashError):
        env.reset()
    with pytest.raises(StateHashError):
        BrokenHashEnv(strict=True).reset()


def test_a_hash_failure_in_a_run_is_counted_and_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(STRICT_ENV_VAR, "0")
    before = state_hash_failures().get("BrokenHashEnv", 0)
    env = BrokenHashEnv()
    with caplog.at_level(logging.WARNING, logger="arborl.envs.state_hash"):
        _, info = env.reset()
        infos = [env.step("go")[-1] for _ in range(5)]
    for i in (info, *infos):
        assert i["state_hash"] == ""  # unknown: GiGPO matches it with nothing
        assert i["state_hash_error"].startswith("StateHashError: ")
    assert state_hash_failures()["BrokenHashEnv"] == before + 6
    logged = [r for r in caplog.records if "state hash failed" in r.getMessage()]
    assert len(logged) == (1 if before == 0 else 0)
    if logged:
        assert logged[0].exc_info is not None and "BrokenHashEnv" in logged[0].getMessage()
