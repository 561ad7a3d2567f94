"""A ScienceWorld world depends on its task and variation alone (`tasks/scienceworld/simulator.py`):
the same in every load, in every JVM, from every thread, random events included; and the
package's plain start, as a control, does not give that (if a new package does, this notices)."""

from __future__ import annotations

import shutil
import threading

import pytest
from arborl_require import unavailable

from arborl.tasks.scienceworld import simulator

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _java():
    if shutil.which("java") is None:
        unavailable("java", "no Java runtime: apt-get install default-jre-headless (scripts/setup.sh does)")


def worlds(game, name: str, variation: int, loads: int) -> list[str]:
    """The first room of `loads` loads of a variation, a gold path drawn between the first two
    and each load made from a new thread (Py4J serves each on a thread of its own)."""
    seen: list[str] = []

    def load() -> None:
        game.load(name, variation, "")
        game.server.reset()
        seen.append(str(game.server.step("look around")))

    for i in range(loads):
        thread = threading.Thread(target=load)
        thread.start()
        thread.join()
        if i == 0:
            game.load("boil", 3, "", generateGoldPath=True)
    return seen


def replay(game, name: str, variation: int, path: list[str]) -> tuple[int, list[str]]:
    """The score and every observation of `path` in a new load of the variation."""
    game.load(name, variation, "")
    game.server.reset()
    observations = [str(game.server.step(a)) for a in path]
    return round(100 * float(game.server.getScore())), observations


def test_every_load_of_a_variation_is_the_same_world_and_the_plain_start_is_not(monkeypatch):
    one, other = simulator.start(), simulator.start()
    try:
        rooms = worlds(one, "find-living-thing", 225, 4) + worlds(other, "find-living-thing", 225, 1)
        assert len(set(rooms)) == 1 and "This room is called" in rooms[0]
    finally:
        one.close()
        other.close()
    monkeypatch.setattr(simulator, "JVM_OPTIONS", "-Xshare:auto")  # the package's own start
    plain = simulator.start()
    try:
        assert len(set(worlds(plain, "find-living-thing", 225, 4))) > 1
    finally:
        plain.close()


def test_a_gold_path_drawn_in_one_jvm_plays_out_the_same_in_another():
    """grow-fruit's path waits for a bee to pollinate a flower and a fruit to grow: random
    events. Drawn in one JVM, it gets the same answers, every one, in a fresh load of another
    JVM after other loads."""
    drawer, player = simulator.start(), simulator.start()
    try:
        drawer.load("grow-fruit", 4, "", generateGoldPath=True)
        path = [str(a) for a in drawer.get_gold_action_sequence()]
        player.load("grow-plant", 0, "")
        first = replay(player, "grow-fruit", 4, path)
        assert first[0] == 100 and first == replay(drawer, "grow-fruit", 4, path)
        # under the heap cap: without one a JVM may take a quarter of the machine's memory
        assert drawer._gateway.jvm.java.lang.Runtime.getRuntime().maxMemory() <= 512 * 2**20
    finally:
        drawer.close()
        player.close()
