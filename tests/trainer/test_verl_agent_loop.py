"""arborl's agent loop run by verl's own AgentLoopWorker (verl's code path, without Ray), with
a real local engine (the tiny model through arborl's transformers engine) behind verl's
server-client interface; verl's GRPO then runs on what it returns."""

from __future__ import annotations

import json

import arith_suite
import numpy as np
import pytest
import torch

from arborl.agents.engines import HFEngineConfig, SamplingParams, make_engine
from arborl.envs import register_env
from arborl.trainer.verl.main import build_verl_dataset, compose_verl_config

verl_loop = pytest.importorskip("verl.experimental.agent_loop.agent_loop")
from verl import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402


class LocalServer:
    """verl's LLM server client interface over a real local arborl engine."""

    def __init__(self, engine) -> None:
        self.engine, self.requests = engine, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        self.requests.append(request_id)
        sampling = SamplingParams(
            temperature=sampling_params["temperature"],
            top_p=sampling_params["top_p"],
            top_k=max(0, int(sampling_params.get("top_k") or 0)),
            max_new_tokens=sampling_params["max_tokens"],
        )
        gen = (await self.engine.generate([prompt_ids], sampling))[0]
        return TokenOutput(token_ids=gen.token_ids, log_probs=gen.logprobs, stop_reason="completed")


def _hydra(value) -> str:
    """A value in Hydra's override grammar (a dict as {key:value,...})."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra(v)}" for k, v in value.items()) + "}"
    return str(value)


def worker(tiny_model, n: int, prompt_length: int = 512, extra: tuple[str, ...] = (), **arborl):
    overrides = [
        *extra,
        f"actor_rollout_ref.model.path={tiny_model}",
        f"actor_rollout_ref.rollout.prompt_length={prompt_length}",
        "actor_rollout_ref.rollout.response_length=96",
        f"actor_rollout_ref.rollout.n={n}",
        "actor_rollout_ref.rollout.temperature=1.0",
        "arborl.max_turns=3",
        *(f"arborl.{k}={_hydra(v)}" for k, v in arborl.items()),
    ]
    cfg = compose_verl_config(overrides)
    server = LocalServer(make_engine(HFEngineConfig(model=str(tiny_model))))
    return verl_loop.AgentLoopWorker(cfg, llm_client=server), server


def batch(tasks, n: int) -> DataProto:
    rows = [t for t in tasks for _ in range(n)]  # verl repeats each prompt n times, interleaved
    non_tensors = {
        "raw_prompt": np.array(
            [[{"role": "user", "content": t.question}] for t in rows] + [None], dtype=object
        )[:-1],
        "task": np.array([json.loads(t.model_dump_json()) for t in rows], dtype=object),
        "agent_name": np.array(["arborl_agent"] * len(rows), dtype=object),
        "uid": np.array([t.id for t in rows], dtype=object),
        "index": np.arange(len(rows)),
        "data_source": np.array(["arborl/test-arith"] * len(rows), dtype=object),
    }
    return DataProto.from_dict(non_tensors=non_tensors, meta_info={"global_steps": 1})


async def test_verls_worker_runs_arborl_episodes_and_verls_grpo_trains_on_them(tiny_model):
    tasks = arith_suite.generate(2, seed=5)
    w, server = worker(tiny_model, n=2)
    out = await w.generate_sequences(batch(tasks, 2))
    b = out.batch
    assert b["responses"].shape == (4, 96) and b["prompts"].shape == (4, 512)
    mask, logp = b["response_mask"], b["rollout_log_probs"]
    assert mask.sum() > 0 and torch.isfinite(logp).all()
    assert (logp[mask == 0] == 0).all() and (
        logp[mask == 1] < 0
    ).all()  # behaviour log-probs on sampled tokens
    scores = b["rm_scores"].sum(-1)
    assert set(scores.tolist()) <= {0.0, 1.0}  # the env's verifier gave the reward
    for row, task in enumerate([t for t in tasks for _ in range(2)]):
        prompt = w.tokenizer.decode(b["prompts"][row][b["attention_mask"][row][:512].bool()])
        assert task.question in prompt and "\ncalculator(expression: string)" in prompt  # the env's tools
    assert len(set(server.requests)) == 4  # one sticky session per episode
    adv, _ = core_algos.compute_grpo_outcome_advantage(b["rm_scores"], mask, out.non_tensor_batch["uid"])
    assert adv.shape == mask.shape and torch.isfinite(adv).all()


async def test_a_first_observation_longer_than_the_prompt_length_names_the_setting(tiny_model):
    """verl pads prompts to max_prompt_length and cannot cut them; an env whose first observation
    is longer (TextWorld's is ~1,000 tokens) failed in verl's collation with a size mismatch."""
    tasks = arith_suite.generate(1, seed=5)
    w, _ = worker(tiny_model, n=1, prompt_length=32)
    with pytest.raises(ValueError, match=r"data\.max_prompt_length=32; raise data\.max_prompt_length"):
        await w.generate_sequences(batch(tasks, 1))


async def test_the_n_samples_of_a_prompt_can_be_one_rollout_tree(tiny_model):
    # Countdown always takes 3 turns, so the tree forks at turn boundaries and shares prefixes.
    register_env("arborl-test/Countdown-v0", "countdown:Countdown", force=True)
    w, server = worker(
        tiny_model,
        n=4,
        env_id="arborl-test/Countdown-v0",
        max_new_tokens=12,  # all 3 turns fit the 96-token response: the whole paths are kept
        tree={"roots": 1, "branches": 1, "branch_at": "turn"},
    )
    rows = [{"id": "c", "start": 3}] * 4
    non_tensors = {
        "raw_prompt": np.array([[{"role": "user", "content": "3 left"}]] * 4 + [None], dtype=object)[:-1],
        "task": np.array([json.dumps(r) for r in rows], dtype=object),
        "agent_name": np.array(["arborl_agent"] * 4, dtype=object),
        "uid": np.array(["prompt-0"] * 4, dtype=object),
        "index": np.arange(4),
    }
    out = await w.generate_sequences(
        DataProto.from_dict(non_tensors=non_tensors, meta_info={"global_steps": 1})
    )
    assert out.batch["responses"].shape[0] == 4
    assert (out.batch["rm_scores"].sum(-1) == 1.0).all()  # every leaf is a whole, successful episode
    leaf_turns = 4 * 3
    assert len(server.requests) < leaf_turns  # shared prefixes were generated once for the tree
    assert len({tuple(p) for p in out.non_tensor_batch["tree_paths"]}) == 4  # four distinct leaves


@pytest.fixture
def fresh_env_loop(monkeypatch):
    """This process's env event loop and sandbox defaults as a new verl worker process has
    them, put back afterwards (the agent loop configures them once per process)."""
    from arborl.envs import event_loop
    from arborl.trainer.verl import agent_loop

    monkeypatch.setattr(event_loop, "_loop", None)
    monkeypatch.setattr(event_loop, "_DEFAULTS", dict(event_loop._DEFAULTS))
    monkeypatch.setattr(agent_loop, "_SANDBOX", {})
    yield event_loop
    if event_loop._loop is not None:
        event_loop._loop.shutdown()


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.timeout(300)
@pytest.mark.xdist_group("ray")  # one Ray cluster at a time (tests/conftest.py)
async def test_sandbox_ray_runs_the_workers_episodes_on_its_own_ray_node(
    tiny_model, bwrap_backend, fresh_env_loop, monkeypatch
):
    """`sandbox=ray` in verl's config: the worker's Code episodes run on the Ray cluster's
    sandbox nodes, on the worker's own node (this process runs on the head) while it has room."""
    from ray_cluster import ray_cluster

    from arborl.envs.code import DEFAULT_TASK
    from arborl.sandboxes.ray import RaySandboxPool

    with ray_cluster(2) as cluster:
        extra = ("sandbox=ray", f"sandbox.address={cluster.address}", "sandbox.backend.type=bwrap")
        w, _ = worker(tiny_model, n=2, extra=extra, env_id="arborl/Code-v0", pool={"max_size": 2})
        placed: list[str] = []
        checkout = RaySandboxPool.checkout

        async def counted(self, *args, **kwargs):
            sb = await checkout(self, *args, **kwargs)
            placed.append(sb.node_id)
            return sb

        monkeypatch.setattr(RaySandboxPool, "checkout", counted)
        task = json.loads(DEFAULT_TASK.model_dump_json())
        non_tensors = {
            "raw_prompt": np.array([[{"role": "user", "content": "fix calc.py"}]] * 2 + [None], dtype=object)[
                :-1
            ],
            "task": np.array([task, task], dtype=object),
            "agent_name": np.array(["arborl_agent"] * 2, dtype=object),
            "uid": np.array(["p0", "p1"], dtype=object),
            "index": np.arange(2),
        }
        out = await w.generate_sequences(
            DataProto.from_dict(non_tensors=non_tensors, meta_info={"global_steps": 1})
        )
        assert out.batch["responses"].shape[0] == 2
        pool = fresh_env_loop.default_pool()
        assert isinstance(pool, RaySandboxPool) and pool.config.pool.max_size == 2
        assert placed == [cluster.head_node.node_id] * 2, placed
        fresh_env_loop._loop.shutdown()  # closes the pool while the cluster is up
        fresh_env_loop._loop = None


def test_verl_datasets_from_a_suite(tmp_path):
    import pyarrow.parquet as pq

    train, val = build_verl_dataset("test-arith", tmp_path)
    rows = pq.read_table(train).to_pylist() + pq.read_table(val).to_pylist()
    assert len(rows) == 8 and {r["agent_name"] for r in rows} == {"arborl_agent"}
    assert json.loads(rows[0]["task"])["question"] in rows[0]["prompt"][0]["content"]
