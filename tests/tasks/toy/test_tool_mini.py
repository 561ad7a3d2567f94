"""tool-mini: the problems, its calculator (`calculator.py`), the corpus, the held-out split, the gold transcripts."""

from __future__ import annotations

import json
import re
from collections import Counter

import gymnasium
import pytest

import arborl.envs  # noqa: F401 - registers arborl/Tool-v0
from arborl.envs.episodes import run_episodes_sync
from arborl.envs.function_calling.search import BM25
from arborl.tasks import get_suite, load_corpus
from arborl.tasks.toy import calculator as calc
from arborl.tasks.toy import tool_mini as tm

CALL = re.compile(r'^<tool_call>\n(\{"name": "(search|calculator)", "arguments": \{.*\}\})\n</tool_call>$')


def test_the_suite_is_120_tasks_of_three_kinds_mixed_from_the_start():
    tasks = get_suite("tool-mini").tasks()
    assert len(tasks) == 120 and len({t.id for t in tasks}) == 120
    assert Counter(t.metadata["kind"] for t in tasks) == {"arith": 40, "lookup": 40, "multi": 40}
    assert {t.metadata["kind"] for t in tasks[:3]} == set(tm.KINDS)  # a prefix mixes every kind
    assert len({t.question for t in tasks}) == 120
    for t in tasks:
        assert t.tools[0].handler == "arborl.tasks.toy.calculator:calculator"
        assert t.builtin_tools == ("search",)  # the python tool was dropped from the recipe


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("37 * 12", "444"),
        ("2**10", "1024"),
        ("7 / 2", "3.5"),
        ("6/3", "2"),
        ("(3 + 4) * -5", "-35"),
        (" 9 // 2 % 3", "1"),
        ("2 × 3", "6"),
    ],
)
def test_calculator_evaluates_arithmetic(expression, value):
    assert calc.calculator(expression) == value


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("__import__('os').system('id')", "unsupported"),
        ("a + 1", "unsupported"),
        ("(1).real", "unsupported"),
        ("2 ** 10000", "exponent too large"),
        ("10 ** 20", "exponent too large|too large"),
        ("99999999 * 99999999 * 99999999", "too large"),
        ("1 / 0", "division by zero"),
        ("1e400", "too large|finite"),
        ("(" * 200 + "1" + ")" * 200, "nested too deeply|longer than|cannot parse"),
        ("1 +", "cannot parse"),
        ("", "empty"),
        ("9" * 300, "longer than"),
        ("'a' * 3", "unsupported"),
    ],
)
def test_calculator_refuses_what_is_not_bounded_arithmetic(expression, why):
    with pytest.raises(calc.CalculatorError, match=why):
        calc.calculator(expression)


def test_training_stream_is_reproducible_and_never_holds_an_evaluation_question():
    a, b = tm.generate_tool_tasks(3000, seed=7), tm.generate_tool_tasks(3000, seed=7)
    assert [t.model_dump() for t in a] == [t.model_dump() for t in b]
    assert [t.question for t in tm.generate_tool_tasks(50, seed=8)] != [t.question for t in a[:50]]
    assert not {t.question for t in a} & tm.eval_questions()
    assert len({t.id for t in a}) == 3000
    only = tm.generate_tool_tasks(30, seed=1, kinds=["lookup"])
    assert {t.metadata["kind"] for t in only} == {"lookup"}
    with pytest.raises(ValueError, match="kinds"):
        tm.generate_tool_tasks(5, kinds=["poetry"])


@pytest.mark.parametrize("world", tm.WORLDS)
def test_the_shipped_corpora_are_what_the_generator_makes_and_search_finds_each_fact_first(world):
    shipped = load_corpus(tm.corpus_path(world))
    assert shipped == tuple(tm.build_corpus(world))
    assert len(shipped) == 5 * {"eval": tm.N_COUNTRIES, "train": tm.N_TRAIN_COUNTRIES}[world]
    index = BM25(shipped)
    facts = tm.build_facts(world)
    tasks = [t for t in tm.generate_tool_tasks(300, seed=2, train_world=0.5) if t.metadata["world"] == world]
    if world == "eval":
        tasks += get_suite("tool-mini").tasks()
    assert len(tasks) > 50
    for task in tasks:
        assert task.corpus_path == str(tm.corpus_path(world))
        for query in task.metadata["plan"]["searches"]:
            country, attribute = query.split()
            (_, top), *_ = index.search(query, 1)
            assert top.id == f"{country.lower()}-{attribute}"
            assert tm.read_fact(top.text) == str(facts[country][attribute])


def test_the_training_world_shares_no_name_with_the_evaluated_one():
    def names(world):
        return {
            str(v).casefold()
            for c, fs in tm.build_facts(world).items()
            for v in (c, fs["capital"], fs["currency"])
        }

    evaluated, training = names("eval"), names("train")
    assert len(evaluated) == 3 * tm.N_COUNTRIES and len(training) == 3 * tm.N_TRAIN_COUNTRIES
    assert not evaluated & training
    assert {t.metadata["world"] for t in tm.generate_tool_tasks(100, seed=4)} == {"eval"}  # the default
    stream = tm.generate_tool_tasks(2000, seed=4, train_world=0.75)
    share = sum(t.metadata["world"] == "train" for t in stream) / len(stream)
    assert 0.7 < share < 0.8
    assert {t.metadata["world"] for t in tm.generate_tool_tasks(100, seed=4, train_world=0.0)} == {"eval"}
    assert {t.metadata["world"] for t in tm.generate_tool_tasks(100, seed=4, train_world=1.0)} == {"train"}
    with pytest.raises(ValueError, match="train_world"):
        tm.generate_tool_tasks(5, train_world=1.5)
    with pytest.raises(ValueError, match="world"):
        tm.build_facts("moon")
    with pytest.raises(ValueError, match="world"):
        tm.corpus_path("moon")


def test_counterfactual_tasks_carry_their_own_made_up_facts_and_search_finds_them():
    facts = tm.build_facts("eval")
    stream = tm.generate_tool_tasks(600, seed=6, counterfactual=0.5)
    made_up = [t for t in stream if t.metadata["world"] == "counterfactual"]
    # arithmetic has no facts: it stays in the eval world
    assert {t.metadata["kind"] for t in made_up} == {"lookup", "multi"}
    assert 0.4 < len(made_up) / sum(t.metadata["kind"] != "arith" for t in stream) < 0.6
    assert not {t.question for t in stream} & tm.eval_questions()
    differs = 0
    for task in made_up:
        assert task.corpus_path is None and len(task.corpus) == 5 * (
            2 + len(set(task.metadata["plan"]["searches"]))
        )
        index = BM25(task.corpus)
        for query in task.metadata["plan"]["searches"]:
            country, attribute = query.split()
            assert country in facts  # the evaluated countries' names ...
            (_, top), *_ = index.search(query, 1)
            assert top.id == f"{country.lower()}-{attribute}"
            differs += tm.read_fact(top.text) != str(facts[country][attribute])  # ... other facts
    assert differs > 0.9 * sum(len(t.metadata["plan"]["searches"]) for t in made_up)
    assert {t.metadata["world"] for t in tm.generate_tool_tasks(60, seed=6, counterfactual=1.0)} == {
        "counterfactual",
        "eval",
    }
    with pytest.raises(ValueError, match="at most 1"):
        tm.generate_tool_tasks(5, train_world=0.6, counterfactual=0.6)
    with pytest.raises(ValueError, match="counterfactual"):
        tm.generate_tool_tasks(5, counterfactual=-0.1)


def test_the_main_jobs_questions_are_the_counterfactual_ones_and_take_other_options():
    from arborl.cli.config import load_config, section
    from arborl.tasks.stream import task_stream
    from arborl.trainer.local.config import TrainConfig

    # the main job's stream is tool-mix's: half houses, half the counterfactual questions
    tasks = TrainConfig.model_validate({"tasks": section(load_config([], "train"), "tasks")}).tasks
    assert tasks.train == "arborl.tasks.toy.tool_mix:generate_mix_tasks" and not tasks.train_options
    task_at = task_stream(tasks.train, 180, seed=4)
    questions = [task_at(i) for i in range(180) if task_at(i).metadata.get("suite") != "tool-doors"]
    ours = tm.generate_counterfactual_tasks(90, seed=4)
    assert sorted(t.model_dump_json() for t in questions) == sorted(t.model_dump_json() for t in ours)
    same = tm.generate_tool_tasks(90, seed=4, counterfactual=1.0)
    assert [t.model_dump() for t in ours] == [t.model_dump() for t in same]

    def made_up(stream):
        facts = [t for t in stream if t.metadata["kind"] != "arith"]
        return sum(t.metadata["world"] == "counterfactual" for t in facts) / len(facts)

    assert made_up(ours) == 1.0
    assert 0.3 < made_up(tm.generate_counterfactual_tasks(90, seed=4, counterfactual=0.5)) < 0.7


@pytest.fixture(scope="module")
def gold_episodes():
    tasks = [
        *get_suite("tool-mini").tasks(),
        *tm.generate_tool_tasks(60, seed=3),
        *tm.generate_tool_tasks(30, seed=13, counterfactual=1.0),
    ]
    envs = [gymnasium.make("arborl/Tool-v0") for _ in range(4)]

    by_id = {t.id: tm.gold_policy(t) for t in tasks}

    def policy(messages, info):
        return by_id[info["task_id"]](messages, info)

    return tasks, run_episodes_sync(envs, policy, tasks, max_turns=6)


def test_gold_solves_every_task_in_plain_hermes_replies(gold_episodes):
    tasks, episodes = gold_episodes
    assert [e.total_reward for e in episodes] == [1.0] * len(tasks)
    for task, ep in zip(tasks, episodes, strict=True):
        replies = [m["content"] for m in ep.messages if m["role"] == "assistant"]
        plan = task.metadata["plan"]
        assert len(replies) == len(plan["searches"]) + (plan["expr"] is not None) + 1
        for reply in replies[:-1]:
            call = CALL.match(reply)
            assert call, reply
            json.loads(call.group(1))
        assert replies[-1] == str(task.answer)  # the bare answer
        assert all(info.get("n_tool_errors", 0) == 0 for info in ep.infos)


def test_gold_reads_values_from_the_observations_not_from_the_task():
    task = next(t for t in get_suite("tool-mini").tasks() if t.metadata["kind"] == "multi")
    policy = tm.gold_policy(task.model_copy(update={"answer": -1}))
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": task.question}]
    for n, query in enumerate(task.metadata["plan"]["searches"]):
        assert json.loads(CALL.match(policy(messages, {})).group(1))["arguments"] == {"query": query, "k": 1}
        messages += [
            {"role": "assistant", "content": "."},
            {"role": "tool", "content": f"[1] x\nThe area of X is {n + 2}."},
        ]
    expr = json.loads(CALL.match(policy(messages, {})).group(1))["arguments"]["expression"]
    assert expr == task.metadata["plan"]["expr"].format(*range(2, 2 + len(task.metadata["plan"]["searches"])))
    messages += [{"role": "assistant", "content": "."}, {"role": "tool", "content": "12345"}]
    assert policy(messages, {}) == "12345"


def test_gold_transcripts_fit_the_trainers_context_with_the_tiny_tokenizer(gold_episodes, tiny_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    tasks, episodes = gold_episodes
    env = gymnasium.make("arborl/Tool-v0")
    _, info = env.reset(options={"task": tasks[0]})
    longest = 0
    for ep in episodes:
        chat = [m for m in ep.messages if m["content"] != "Answer recorded."]
        ids = tok.apply_chat_template(chat, tools=info["tools"], tokenize=True)
        longest = max(longest, len(ids["input_ids"] if isinstance(ids, dict) else ids))
    assert longest <= 1024, longest  # TrainConfig's rollout.max_context_tokens


def test_empty_policy_never_answers():
    for task in get_suite("tool-mini").tasks()[:9]:
        assert tm.empty_policy(task)([], {}) == "I don't know."
