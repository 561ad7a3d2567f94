"""The ScienceWorld tasks: the suites come from the package's own task list and variation
splits (the snapshot is checked against the simulator), tasks are validated, the score maps
to reward as the paper reports it."""

from __future__ import annotations

import copy
import math
import shutil

import pytest
from arborl_require import unavailable

from arborl.tasks import get_suite, list_suites
from arborl.tasks.scienceworld import ScienceWorldTask, episode_reward, is_success, task_names
from arborl.tasks.scienceworld.task import DEFAULT_STEP_LIMIT, SUITE_VARIATIONS, load_train, make_task
from arborl.tasks.scienceworld.variations import read_from_package, variations


def test_every_task_type_of_the_package_has_a_suite():
    from scienceworld.constants import TASKS
    from scienceworld.utils import infer_task

    names = sorted(infer_task(t["task_name"]) for t in TASKS)
    assert len(names) == 30 and task_names() == names
    suites = {s.name for s in list_suites()}
    assert {f"scienceworld-{n}" for n in names} | {"scienceworld", "scienceworld-train"} <= suites


def test_a_suite_runs_the_first_test_variations_of_its_type():
    tasks = get_suite("scienceworld-boil").tasks()
    assert [t.variation for t in tasks] == variations()["boil"]["test"][:SUITE_VARIATIONS]
    assert {t.split for t in tasks} == {"test"} and len(
        get_suite("scienceworld").tasks()
    ) == 30 * SUITE_VARIATIONS
    train = load_train()
    assert len(train) == sum(len(v["train"]) for v in variations().values())


def _budget(gold: int) -> int:
    """The paper's rule as the suites state it: the package's 100 steps, or a quarter more
    than the gold path (rounded up) where that is more."""
    return max(100, math.ceil(gold * 1.25))


def test_a_suites_turn_budget_is_the_most_turns_its_own_variations_need():
    snapshot = variations()
    for name, info in snapshot.items():
        own = [info["gold_steps"][str(v)] for v in info["test"][:SUITE_VARIATIONS]]
        assert get_suite(f"scienceworld-{name}").max_turns == max(map(_budget, own)), name
    every_test = [i["gold_steps"][str(v)] for i in snapshot.values() for v in i["test"][:SUITE_VARIATIONS]]
    assert get_suite("scienceworld").max_turns == max(map(_budget, every_test))
    longest = max(n for i in snapshot.values() for n in i["gold_steps"].values())
    train = [i["gold_steps"].get(str(v), longest) for i in snapshot.values() for v in i["train"]]
    assert get_suite("scienceworld-train").max_turns == max(map(_budget, train))


def test_a_step_limit_bounds_moves_not_actions_and_covers_the_types_longest_gold_path():
    """The step limit is the package's `envStepLimit`, which bounds the simulator's moves:
    `wait` is 11 moves, so freeze's gold paths take more moves than actions (train variation
    5: 65 actions, 139 moves; a limit from its actions, 100, ended its gold at score 82)."""
    snapshot = variations()
    info = snapshot["freeze"]
    assert any(info["gold_moves"][v] > info["gold_steps"][v] for v in info["gold_moves"])
    for name, info in snapshot.items():
        longest = max([*info["gold_moves"].values(), *info["gold_steps"].values()])
        for v in (info["train"][0], info["dev"][0], info["test"][0]):
            assert make_task(name, v).step_limit == _budget(longest), name


def test_measuring_train_gold_lengths_gives_train_room_and_leaves_test_suites_turns_as_they_were(
    monkeypatch,
):
    """Train variations of inclined-plane-friction-named-surfaces have gold paths of up to 797
    actions (measured with `--gold train`), past every test variation's 194. A train length
    longer than any in the snapshot must give every variation of its type, the train split's
    turns and every unmeasured variation's turns room for it, and change no test suite's turn
    budget (it did once: the budgets were the longest length in the whole snapshot)."""
    from arborl.tasks.scienceworld import task as task_module

    real = variations()
    before = {n: task_module.split_budget(names=[n]) for n in real} | {"*": task_module.split_budget()}
    longer = max(n for info in real.values() for n in info["gold_steps"].values()) + 50
    fake = copy.deepcopy(real)
    name = "inclined-plane-friction-named-surfaces"
    measured, unmeasured = fake[name]["train"][0], fake[name]["dev"][0]
    fake[name]["gold_steps"][str(measured)] = longer
    fake[name]["gold_moves"][str(measured)] = longer - 2
    monkeypatch.setattr(task_module, "variations", lambda: fake)
    task_module.longest_gold_budget.cache_clear()
    try:
        after = {n: task_module.split_budget(names=[n]) for n in real} | {"*": task_module.split_budget()}
        assert after == before
        assert task_module.split_budget("train", None) == _budget(longer)
        assert (
            task_module.turn_budget(name, measured)
            == task_module.turn_budget("boil", unmeasured)
            == _budget(longer)
        )
        for v in (measured, unmeasured, real[name]["test"][0]):
            assert make_task(name, v).step_limit == _budget(longer)
    finally:
        task_module.longest_gold_budget.cache_clear()


@pytest.mark.parametrize(
    "bad", [{"task_name": "boil-everything", "variation": 0}, {"task_name": "boil", "variation": 30}]
)
def test_unknown_tasks_and_variations_are_refused(bad):
    with pytest.raises(ValueError, match=r"unknown ScienceWorld task|has variations"):
        ScienceWorldTask(id="t", **bad)


def test_reward_is_the_score_clipped_at_zero_and_success_needs_the_full_score():
    assert [episode_reward(s) for s in (-100, 0, 25, 100)] == [0.0, 0.0, 0.25, 1.0]
    assert is_success(100, True) and not is_success(100, False) and not is_success(75, True)


@pytest.mark.slow
@pytest.mark.parametrize(
    # `all` makes 90 gold paths, the mendelian-genetics ones 30 s or more each on a busy
    # 2-core machine: past the suite's 300 s timeout there (9 min once).
    "types",
    ["sample", pytest.param("all", marks=[pytest.mark.full, pytest.mark.timeout(1800)])],
)
def test_the_snapshot_is_the_packages_own_variation_lists(types):
    """Every type under `-m full` (minutes of JVM). Otherwise four types spread over the
    list, splits only: a gold path's length depends on the simulator's random state, which
    the loads before it move (mendelian-genetics' differ when loaded first)."""
    if shutil.which("java") is None:
        unavailable("java", "no Java runtime: apt-get install default-jre-headless (scripts/setup.sh does)")
    snapshot = variations()
    if types == "all":
        # the suites' test variations' gold lengths; `--gold train` adds other variations'
        measured = {
            n: {
                **info,
                **{
                    key: {v: k for v, k in info[key].items() if int(v) in info["test"][:SUITE_VARIATIONS]}
                    for key in ("gold_steps", "gold_moves")
                },
            }
            for n, info in snapshot.items()
        }
        assert read_from_package() == measured
        return
    names = sorted(snapshot)[::8]
    got = read_from_package(suite_variations=0, names=names)
    assert got == {n: {**snapshot[n], "gold_steps": {}, "gold_moves": {}} for n in names}


@pytest.mark.slow
def test_a_train_variation_gets_room_for_a_gold_path_longer_than_its_types_test_ones():
    """Train variation 28 of inclined-plane-determine-angle has a gold path twice as long as
    any of its type's test variations, and more than the package's 100 steps: with that
    default, its own gold scored 0.2 (eval of a train sample, docs/benchmarks.md)."""
    if shutil.which("java") is None:
        unavailable("java", "no Java runtime: apt-get install default-jre-headless (scripts/setup.sh does)")
    from arborl.tasks.scienceworld.gold import gold_actions

    name = "inclined-plane-determine-angle"
    task = make_task(name, 28, "train")
    gold = gold_actions(task)
    info = variations()[name]
    assert len(gold) > max(
        DEFAULT_STEP_LIMIT, *(info["gold_steps"][str(v)] for v in info["test"][:SUITE_VARIATIONS])
    )
    assert task.step_limit >= len(gold) * 5 // 4


@pytest.mark.slow
def test_measuring_a_splits_gold_lengths_adds_them_and_goes_on_where_it_stopped(tmp_path, monkeypatch):
    """`python -m arborl.tasks.scienceworld.variations --gold train`, on a snapshot of one type
    with three train variations: a run stopped after its first part keeps that part, the next
    run measures only the rest, a length from an earlier, longer draw is kept (the limits
    cover the longest path seen), and a run after that measures nothing again."""
    if shutil.which("java") is None:
        unavailable("java", "no Java runtime: apt-get install default-jre-headless (scripts/setup.sh does)")
    import json

    from arborl.tasks.scienceworld import variations as snapshot_module

    name = "find-living-thing"
    info = {**variations()[name], "train": variations()[name]["train"][:3]}
    longer_draw = str(info["train"][0])
    info["gold_steps"] = {**info["gold_steps"], longer_draw: 9999}
    info["gold_moves"] = {v: n for v, n in info["gold_moves"].items() if v != longer_draw}
    path = tmp_path / "variations.json"
    path.write_text(json.dumps({"scienceworld": snapshot_module.package_version(), "tasks": {name: info}}))

    measured: list[list[int]] = []
    original = snapshot_module._gold_lengths

    def stopped_after_one_part(game, n, chosen):
        if measured:
            raise KeyboardInterrupt
        measured.append(chosen)
        return original(game, n, chosen)

    monkeypatch.setattr(snapshot_module, "SAVE_EVERY", 2)
    monkeypatch.setattr(snapshot_module, "_gold_lengths", stopped_after_one_part)
    with pytest.raises(KeyboardInterrupt):
        snapshot_module.main(["--gold", "train", "--out", str(path)])
    kept = json.loads(path.read_text())["tasks"][name]["gold_moves"]
    assert measured == [info["train"][:2]] and {str(v) for v in info["train"][:2]} <= set(kept)

    measured.clear()
    monkeypatch.setattr(
        snapshot_module,
        "_gold_lengths",
        lambda game, n, chosen: measured.append(chosen) or original(game, n, chosen),
    )
    snapshot_module.main(["--gold", "train", "--out", str(path)])
    assert measured == [info["train"][2:]]
    written = json.loads(path.read_text())["tasks"][name]
    for key in ("gold_steps", "gold_moves"):
        assert {str(v) for v in info["train"]} | set(info[key]) == set(written[key])
        assert all(written[key][str(v)] > 0 for v in info["train"])
    assert written["gold_steps"][longer_draw] == 9999 and written["gold_moves"][longer_draw] < 9999

    measured.clear()
    snapshot_module.main(["--gold", "train", "--out", str(path)])
    assert measured == [] and json.loads(path.read_text())["tasks"][name] == written


@pytest.mark.slow
def test_a_measured_move_count_is_the_packages_own_loops():
    """grow-fruit train 6 has random events (bees), and the package's `step` lists the valid
    actions every step, which moves those events. The snapshot tool's replay must step the
    world as the package's loop does: its gold path then completes the task, and the moves
    measured (and kept in the snapshot) are the package's own count."""
    if shutil.which("java") is None:
        unavailable("java", "no Java runtime: apt-get install default-jre-headless (scripts/setup.sh does)")
    from arborl.tasks.scienceworld import simulator
    from arborl.tasks.scienceworld import variations as snapshot_module

    name, variation = "grow-fruit", 6
    game = simulator.start()
    try:
        game.load(name, variation, "", generateGoldPath=True)
        path = [str(a) for a in game.get_gold_action_sequence()]
        game.load(name, variation, "")
        game.reset()
        for action in path:
            _, _, done, info = game.step(action)
            if done:
                break
        assert done and info["score"] == 100
        assert snapshot_module._moves(game, name, variation, path) == info["moves"]
        assert variations()[name]["gold_moves"][str(variation)] == info["moves"]
    finally:
        game.close()


@pytest.mark.slow
def test_a_gold_jvm_that_dies_is_dropped_and_the_next_draw_starts_a_new_one():
    """A gold JVM that failed a draw went back to the idle pool, so every later draw that took
    it failed too (the train split's run lost 204 variations in a row to one dead JVM)."""
    if shutil.which("java") is None:
        unavailable("java", "no Java runtime: apt-get install default-jre-headless (scripts/setup.sh does)")
    from arborl.tasks.scienceworld import gold

    first, second = make_task("find-plant", 0, "train"), make_task("find-plant", 1, "train")
    assert gold.gold_actions(first)
    (game,) = gold._idle
    game._gateway.java_process.kill()
    game._gateway.java_process.wait()
    with pytest.raises(Exception, match="Java server"):
        gold.gold_actions(second)
    assert game not in gold._idle and game not in gold._started
    assert gold.gold_actions(second)  # a new JVM
