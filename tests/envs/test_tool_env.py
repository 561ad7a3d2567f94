"""`arborl/Tool-v0`: task-declared tools, the sandboxed interpreter, search, verifiers."""

from __future__ import annotations

import json

import pytest

from arborl.envs.function_calling.verifiers import last_number
from arborl.envs.parsers import get_parser
from arborl.tasks import Document, ToolTask

pytestmark = pytest.mark.docker
P = get_parser("hermes")


def call(name: str, **args) -> str:
    return P.format_call(name, args)


def host_lookup(city: str) -> dict:
    """A trusted suite function (referenced as `module:function`)."""
    return {"city": city, "population": {"Paris": 2_102_650, "Lyon": 522_250}.get(city)}


def host_counter(step: int, episode) -> dict:
    """A host tool with state: a counter that lives as long as the episode."""
    episode.state["total"] = episode.state.get("total", 0) + step
    return {"task": episode.task.id, "total": episode.state["total"]}


def verify_even(answer: str, task) -> bool:
    n = last_number(answer)
    return n is not None and n % 2 == 0


CORPUS = [
    {"id": "d1", "title": "Mount Everest", "text": "Mount Everest is 8,849 metres high, in the Himalayas."},
    {"id": "d2", "title": "K2", "text": "K2 is the second-highest mountain, 8,611 metres, in the Karakoram."},
    {"id": "d3", "title": "Mont Blanc", "text": "Mont Blanc rises 4,806 metres in the Alps."},
]


def test_python_tool_runs_in_a_sandbox_and_the_answer_is_verified(make_env, leased):
    env = make_env("arborl/Tool-v0")
    obs, info = env.reset()  # the built-in default task
    assert [t["function"]["name"] for t in info["tools"]] == ["python", "final_answer"]
    assert env.unwrapped._lease is None  # lazy: no sandbox until code runs
    obs, reward, terminated, _, info = env.step(
        call("python", code="import os\nprint(1234 * 5678, os.getuid())")
    )
    assert obs[0]["content"].startswith("7006652 ") and not terminated
    assert env.unwrapped._lease is not None and info["timing"]["sandbox_s"] > 0
    obs, reward, terminated, truncated, info = env.step("It is <answer>7,006,652</answer>.")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["answer"] == "7,006,652" and info["verifier"] == {"name": "numeric", "reward": 1.0}


def test_python_cannot_hang_the_episode(make_env):
    env = make_env("arborl/Tool-v0", python_timeout_s=2)
    env.reset()
    obs, _, _, _, info = env.step(call("python", code="while True: pass"))
    assert "timed out after 2s" in obs[0]["content"] and info["tool_calls"][0]["error"] == "timeout"


def test_declared_tools_search_and_final_answer(make_env, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(d) for d in CORPUS))
    task = ToolTask(
        id="mountains",
        question="How high is K2, and how many people live in Lyon?",
        tools=[
            {
                "name": "population",
                "description": "Population of a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
                "handler": f"{__name__}:host_lookup",
            },
            {
                "name": "double",
                "description": "Twice a number",
                "parameters": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
                "python": "def double(x):\n    return {'twice': 2 * x}\n",
            },
        ],
        corpus_path=str(corpus),
        answer="8611",
        verifier="contains",
    )
    env = make_env("arborl/Tool-v0")
    _, info = env.reset(options={"task": task})
    assert [t["function"]["name"] for t in info["tools"]] == [
        "python",
        "search",
        "population",
        "double",
        "final_answer",
    ]
    obs, *_ = env.step(call("search", query="second highest mountain", k=1))
    assert obs[0]["content"].startswith("[1] K2 (id: d2)") and "8,611" in obs[0]["content"]
    obs, *_, info = env.step(call("population", city="Lyon") + call("double", x=21))
    assert json.loads(obs[0]["content"])["population"] == 522250
    assert json.loads(obs[1]["content"]) == {"twice": 42}
    assert [c["ok"] for c in info["tool_calls"]] == [True, True]
    obs, *_ = env.step(call("double", x="lots"))
    assert "invalid arguments for `double`" in obs[0]["content"]
    obs, reward, terminated, _, info = env.step(
        call("final_answer", answer="K2: 8611 m") + call("search", query="x")
    )
    assert reward == 1.0 and terminated
    assert obs[1]["content"].startswith("Skipped") and info["tool_calls"][1]["error"] == "skipped"


def test_state_hash_follows_the_information_gathered(make_env):
    task = ToolTask(id="s", question="q", corpus=[Document(**d) for d in CORPUS], builtin_tools=("search",))
    a, b = make_env("arborl/Tool-v0"), make_env("arborl/Tool-v0")
    ha = a.reset(options={"task": task})[1]["state_hash"]
    assert b.reset(options={"task": task})[1]["state_hash"] == ha
    q1, q2 = call("search", query="Everest"), call("search", query="Alps")
    h1 = [a.step(q1)[-1]["state_hash"], a.step(q2)[-1]["state_hash"]]
    h2 = [b.step(q2)[-1]["state_hash"], b.step(q1)[-1]["state_hash"]]
    assert h1[1] == h2[1] and len({ha, h1[0], h2[0], h1[1]}) == 4
    assert a.step("not a call, an answer")[-1]["state_hash"] == h1[1]


@pytest.mark.parametrize(
    ("verifier", "answer", "reply", "reward"),
    [
        ("exact", "Paris", "  paris. ", 1.0),
        ("exact", "Paris", "Paris, France", 0.0),
        ("numeric", 0.1, "about 1.0e-1", 1.0),
        ("numeric", 3, "3.5", 0.0),
        ("contains", "blue", "The sky is Blue today", 1.0),
        (f"{__name__}:verify_even", None, "<answer>14</answer>", 1.0),
        (f"{__name__}:verify_even", None, "<answer>15</answer>", 0.0),
    ],
)
def test_verifiers(make_env, verifier, answer, reply, reward):
    env = make_env("arborl/Tool-v0")
    env.reset(options={"task": {"id": "v", "question": "q", "answer": answer, "verifier": verifier}})
    assert env.step(reply)[1] == reward


def test_bad_tasks_are_refused_clearly(make_env):
    from arborl.envs import TaskError

    env = make_env("arborl/Tool-v0")
    with pytest.raises(TaskError, match="question"):
        env.reset(options={"task": {"id": "x"}})
    with pytest.raises(TaskError, match="unknown built-in tools"):
        env.reset(options={"task": {"id": "x", "question": "q", "builtin_tools": ["telepathy"]}})
    with pytest.raises(TaskError, match="two tools are named"):
        env.reset(
            options={
                "task": {
                    "id": "x",
                    "question": "q",
                    "tools": [{"name": "python", "python": "def python(): pass"}],
                }
            }
        )


def test_a_host_tool_keeps_state_for_its_episode_only_and_the_agent_cannot_hand_it_one(make_env):
    """A handler with an `episode` parameter gets the task and a dict that lives as long as
    the episode: it counts across calls, starts again at the next reset, and an `episode`
    argument the agent sends is replaced by the env's own."""
    counter = {
        "name": "count",
        "description": "Add to a running total",
        "parameters": {"type": "object", "properties": {"step": {"type": "integer"}}, "required": ["step"]},
        "handler": f"{__name__}:host_counter",
    }
    env = make_env("arborl/Tool-v0")
    totals = []
    for episode in ("first", "second"):
        task = ToolTask(id=episode, question="Count.", tools=[counter], builtin_tools=(), answer="x")
        env.reset(options={"task": task})
        for step in (2, 3):
            obs, *_ = env.step(call("count", step=step))
            totals.append(json.loads(obs[0]["content"]))
        obs, *_ = env.step(call("count", step=1, episode={"task": "forged", "state": {"total": 100}}))
        totals.append(json.loads(obs[0]["content"]))
    assert [t["total"] for t in totals] == [2, 5, 6, 2, 5, 6]
    assert [t["task"] for t in totals] == ["first"] * 3 + ["second"] * 3
