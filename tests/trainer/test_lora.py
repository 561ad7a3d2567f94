"""LoRA through peft on the real tiny model: the learner trains the adapter alone, the engine is
sent the adapter alone, and both then score tokens as peft's own merged model does.

Expected log-probs come from `merge_and_unload()` (peft folds ``B·A·alpha/r`` into each base
weight: a plain transformers model with no LoRA layers) scored with materialised logits, not
from the code under test. Tolerances are the learner's and the engines' own tests' (2e-5
against materialised float32 logits, 1e-5 for sampled log-probs against float64 scoring).
"""

from __future__ import annotations

import asyncio
import copy
import json

import numpy as np
import pytest
import torch
from arith_suite import generate, train_config
from transformers import AutoModelForCausalLM

from arborl.agents import Trajectory, Turn
from arborl.agents.engines import HFEngineConfig, SamplingParams, TrainerPolicy, make_engine
from arborl.agents.engines.adapters import AdapterMismatch, LoraAdapter
from arborl.agents.engines.hf import HFEngine
from arborl.agents.engines.scoring import score_tokens
from arborl.agents.engines.weights import resolve_model_dir
from arborl.agents.vision import load_policy_tokenizer
from arborl.trainer.dataproto import trajectories_to_dataproto
from arborl.trainer.local.checkpoint import Checkpointer
from arborl.trainer.local.learner import Learner, LearnerConfig
from arborl.trainer.local.lora import LoraSettings, LoraTargetError, adapter_of, attach_lora, push_policy
from arborl.trainer.local.progress import Progress
from arborl.trainer.local.run_context import RunContext
from arborl.trainer.local.trainer import Trainer

T = 0.7
LORA = LoraSettings(r=4, alpha=8)
PROMPTS = [[5, 17, 92, 4, 33], [7, 7, 120, 41], [250, 3, 64, 9, 11, 2]]


@pytest.fixture(scope="module")
def base_model(tiny_model):
    return AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)


def rows(vocab: int, n: int = 6, seed: int = 0) -> list[Trajectory]:
    """Two-turn trajectories of random ids, in groups of two."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        turns = [
            Turn(
                rng.integers(0, vocab, 4).tolist(),
                [0.0] * 4,
                observation_ids=rng.integers(0, vocab, 3).tolist(),
            ),
            Turn(rng.integers(0, vocab, 3).tolist(), [0.0] * 3),
        ]
        out.append(Trajectory(rng.integers(0, vocab, 6).tolist(), turns, group_id=str(i // 2)))
    return out


def train(learner: Learner, vocab: int, steps: int = 3) -> None:
    """`steps` PPO updates with random advantages on on-policy rows (the adapter moves)."""
    for s in range(steps):
        data = trajectories_to_dataproto(rows(vocab, seed=s), pad_token_id=0)
        data.batch["rollout_log_probs"] = learner.compute_logprobs(data)
        adv = torch.randn(data.batch["responses"].shape[0], 1, generator=torch.Generator().manual_seed(s))
        data.batch["advantages"] = adv * data.batch["response_mask"]
        learner.ppo_update(data)


def materialised_logprobs(model, data) -> torch.Tensor:
    """Log-probs at temperature T on the loss mask, from the model's full logits."""
    with torch.no_grad():
        logits = model(
            input_ids=data.batch["input_ids"],
            attention_mask=data.batch["attention_mask"],
            position_ids=data.batch["position_ids"],
        ).logits
    r = data.batch["responses"].shape[1]
    lp = torch.log_softmax(logits[:, -r - 1 : -1].float() / T, -1)
    return lp.gather(-1, data.batch["responses"].unsqueeze(-1)).squeeze(-1) * data.batch["response_mask"]


def lora_params(model) -> dict[str, torch.Tensor]:
    return {n: p for n, p in model.named_parameters() if ".lora_" in n}


def test_only_the_adapter_trains(base_model):
    model = copy.deepcopy(base_model)
    attach_lora(model, LORA)
    learner = Learner(model, LearnerConfig(lr=1e-2, temperature=T))
    adapter = lora_params(model)
    assert adapter and {id(p) for g in learner.optimizer.param_groups for p in g["params"]} == {
        id(p) for p in adapter.values()
    }
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    train(learner, model.config.vocab_size, steps=1)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and changed <= set(adapter)  # no base weight moved
    assert {n for n in adapter if ".lora_B." in n} <= changed  # B starts at 0: every one moved


async def test_engine_and_learner_agree_after_an_adapter_sync(tiny_model, base_model):
    model = copy.deepcopy(base_model)
    peft = attach_lora(model, LORA)
    policy = TrainerPolicy(str(tiny_model), str(tiny_model), "float32", "cpu", model, lora_rank=LORA.r)
    engine = HFEngine.for_trainer(policy, {})
    learner = Learner(model, LearnerConfig(lr=1e-2, temperature=T))
    train(learner, model.config.vocab_size)

    sent: list[tuple[str, dict[str, torch.Tensor]]] = []
    for name in ("update_weights", "update_adapter"):
        original = getattr(engine, name)

        async def spy(payload, _name=name, _original=original):
            tensors = payload.tensors if _name == "update_adapter" else payload
            sent.append((_name, dict(tensors)))
            await _original(payload)

        setattr(engine, name, spy)
    merged = copy.deepcopy(peft).merge_and_unload()  # peft's own: plain linear layers, no adapter
    assert not lora_params(merged)
    sampling = SamplingParams(temperature=T, max_new_tokens=10, seed=3, ignore_eos=True)
    stale = await engine.generate(PROMPTS[:1], sampling)  # before the sync: the starting adapter
    want = score_tokens(merged.double(), PROMPTS[0], stale[0].token_ids, T)
    assert (torch.tensor(stale[0].logprobs, dtype=torch.float64) - want).abs().max() > 1e-3

    # the adapter in peft's own saved naming (what checkpoints and vLLM load)
    from peft import get_peft_model_state_dict

    peft_own = get_peft_model_state_dict(peft)
    mine = adapter_of(peft).tensors
    assert set(mine) == set(peft_own) and all(torch.equal(mine[k], peft_own[k]) for k in mine)
    reported = await push_policy(engine, model, peft)

    # what crossed: the adapter's tensors alone, as many bytes as the trained parameters
    assert [name for name, _ in sent] == ["update_adapter"]
    crossed = sum(t.numel() * t.element_size() for t in sent[0][1].values())
    trained = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    full = sum(p.numel() * p.element_size() for p in base_model.parameters())
    assert crossed == trained == reported and crossed < full / 10
    # the engine samples with the merged model's log-probs
    gens = await engine.generate(PROMPTS, sampling)
    for prompt, g in zip(PROMPTS, gens, strict=True):
        want = score_tokens(merged.double(), prompt, g.token_ids, T)
        torch.testing.assert_close(torch.tensor(g.logprobs, dtype=torch.float64), want, rtol=0, atol=1e-5)
    # and the learner scores those samples as the merged model does
    trajs = [Trajectory(p, [Turn(g.token_ids, g.logprobs)]) for p, g in zip(PROMPTS, gens, strict=True)]
    data = trajectories_to_dataproto(trajs, pad_token_id=0)
    ours = learner.compute_logprobs(data)
    torch.testing.assert_close(ours, materialised_logprobs(merged, data), rtol=0, atol=2e-5)
    engine_lp = torch.zeros_like(ours)
    for i, g in enumerate(gens):
        engine_lp[i, : len(g.logprobs)] = torch.tensor(g.logprobs)
    torch.testing.assert_close(ours, engine_lp * data.batch["response_mask"], rtol=0, atol=2e-5)
    await engine.close()


def test_a_target_that_matches_no_module_names_the_linear_ones(base_model):
    with pytest.raises(LoraTargetError, match=r"qproj.*matches no linear module.*down_proj.*q_proj.*v_proj"):
        attach_lora(copy.deepcopy(base_model), LoraSettings(r=4, targets=["q_proj", "qproj"]))
    with pytest.raises(LoraTargetError, match="output head"):
        attach_lora(copy.deepcopy(base_model), LoraSettings(r=4, targets=["lm_head"]))
    with pytest.raises(LoraTargetError, match=r"norm.*matches no linear module"):  # a module, not linear
        attach_lora(copy.deepcopy(base_model), LoraSettings(r=4, targets=["norm"]))


def test_an_adapter_that_does_not_fit_the_model_is_refused(base_model, tmp_path):
    peft = attach_lora(copy.deepcopy(base_model), LORA)
    peft.save_pretrained(tmp_path / "good")
    good = LoraAdapter.load(tmp_path / "good")
    # another base: its layers are wider than this model's (lora_A takes the input width)
    wide = {
        k: torch.zeros(v.shape[0], 2 * v.shape[1]) if ".lora_A." in k else v for k, v in good.tensors.items()
    }
    engine = HFEngine(HFEngineConfig(model=str(resolve_model_dir(good.config["base_model_name_or_path"]))))
    with pytest.raises(
        AdapterMismatch, match=r"lora_A.weight is \(4, 128\), the model's \(4, 64\).*trained on"
    ):
        asyncio.run(engine.update_adapter(LoraAdapter(good.config, wide)))
    # other settings than the engine's LoRA layers were made with (alpha / r scales every update)
    with_layers = HFEngine(HFEngineConfig(model="lora"), model=copy.deepcopy(peft.get_base_model()))
    with pytest.raises(AdapterMismatch, match="scaling"):
        asyncio.run(with_layers.update_adapter(LoraAdapter({**good.config, "lora_alpha": 32}, good.tensors)))
    # a module the model does not have
    other = {**good.config, "target_modules": ["c_attn"]}
    fresh = HFEngine(HFEngineConfig(model=good.config["base_model_name_or_path"]))
    with pytest.raises(AdapterMismatch, match="c_attn"):
        asyncio.run(fresh.update_adapter(LoraAdapter(other, good.tensors)))
    # a base that is not here
    config = json.loads((tmp_path / "good" / "adapter_config.json").read_text())
    (tmp_path / "good" / "adapter_config.json").write_text(
        json.dumps({**config, "base_model_name_or_path": "/nowhere/base"})
    )
    with pytest.raises(AdapterMismatch, match="/nowhere/base, which is not on this machine"):
        HFEngine(HFEngineConfig(model=str(tmp_path / "good")))
    # another rank than the run's
    with pytest.raises(AdapterMismatch, match=r"r=4.*model.lora has r=8"):
        attach_lora(copy.deepcopy(base_model), LoraSettings(r=8, alpha=8), adapter=tmp_path / "good")


def test_lora_settings_are_checked_keys_of_the_model_section():
    from arborl.cli.config import ConfigError
    from arborl.cli.train_cmds import compose_train

    assert compose_train([])[1].model.lora.r == 0  # off by default: full weights
    on = compose_train(["model.lora.r=8", "model.lora.targets=[q_proj,v_proj]"])[1].model.lora
    assert (on.r, on.alpha, on.targets, on.dropout) == (8, 16.0, ["q_proj", "v_proj"], 0.0)
    with pytest.raises(ConfigError, match=r"the keys of model.lora are: r, alpha, targets, dropout"):
        compose_train(["model.lora.rank=8"])


def test_a_bad_target_fails_the_run_at_start(tmp_path):
    cfg = train_config(tmp_path / "run", sft={"steps": 0}, model={"lora": {"r": 4, "targets": ["qkv"]}})
    ctx = RunContext(cfg, Progress())
    with pytest.raises(LoraTargetError, match="'qkv' matches no linear module"):
        ctx.open()


def coin_tasks(n: int, seed: int) -> list:
    """The arithmetic tasks scored by a hash of the answer (`coin_verifier`): an untrained
    model's groups then hold successes and failures, so every batch trains."""
    return [t.model_copy(update={"verifier": "coin_verifier:coin"}) for t in generate(n, seed)]


def test_a_lora_run_checkpoints_resumes_and_evaluates_its_adapter(tmp_path, tiny_model):
    run = tmp_path / "run"
    lora = {"lora": {"r": 4, "alpha": 8}}
    tasks = {"train": "test_lora:coin_tasks"}
    learner = {"lr": 1e-2, "use_kl_loss": True}
    cfg = train_config(run, tasks=tasks, sft={"steps": 0}, model=lora, learner=learner, run={"steps": 2})
    asyncio.run(Trainer(cfg).run())
    rl = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [e for e in rl if e.get("phase") == "rl"]
    checkpoint = Checkpointer(run).latest()
    saved = checkpoint / "model"
    # the checkpoint holds the adapter in peft's format (and the tokenizer), no full weights
    assert (saved / "adapter_model.safetensors").exists() and not list(saved.glob("model*.safetensors"))
    adapter = LoraAdapter.load(saved)
    assert all(e["batch/trajectories"] > 0 for e in rl), "a batch with no signal trains nothing"
    assert [e["sync/bytes"] for e in rl] == [float(adapter.nbytes)] * 2
    assert any(t.abs().max() > 0 for k, t in adapter.tensors.items() if ".lora_B." in k)  # it trained
    # the KL's reference is the starting policy merged into plain weights (loadable as a model)
    assert (run / "reference" / "model.safetensors").exists() and all("actor/kl_loss" in e for e in rl)

    # resume: the learner continues from the saved adapter, with its optimiser state
    more = train_config(run, tasks=tasks, sft={"steps": 0}, model=lora, learner=learner, run={"steps": 3})
    again = RunContext(more, Progress())
    again.open()
    try:
        resumed = lora_params(again.model)
        for key, value in adapter.tensors.items():
            name = key.removeprefix("base_model.model.").replace(".weight", ".default.weight")
            torch.testing.assert_close(resumed[name], value, rtol=0, atol=0)
        saved_state = torch.load(checkpoint / "trainer_state.pt", weights_only=False)
        assert again.state.version == 2 and again.learner.steps == saved_state["learner"]["steps"] > 0
        assert again.learner.optimizer.state  # AdamW's moments came back too
        assert not [n for n, p in again.model.named_parameters() if p.requires_grad and ".lora_" not in n]
    finally:
        asyncio.run(again.close())
    with pytest.raises(AdapterMismatch, match=r"model.lora.r is 0"):  # resumed without LoRA
        RunContext(train_config(run, tasks=tasks, sft={"steps": 0}, run={"steps": 3}), Progress()).open()

    # `arborl eval model.path=<run>`: the model driver's path, engine and tokenizer
    path = resolve_model_dir(run)
    assert path == str(saved)
    engine = make_engine({"type": "transformers", "model": path})
    assert load_policy_tokenizer(path).pad_token_id is not None
    from peft import PeftModel

    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float64)
    merged = PeftModel.from_pretrained(base, path).merge_and_unload()
    greedy = SamplingParams(temperature=0, max_new_tokens=8, ignore_eos=True)
    for prompt, g in zip(PROMPTS, asyncio.run(engine.generate(PROMPTS, greedy)), strict=True):
        want = score_tokens(merged, prompt, g.token_ids, 1.0)
        torch.testing.assert_close(torch.tensor(g.logprobs, dtype=torch.float64), want, rtol=0, atol=1e-5)
    asyncio.run(engine.close())


@pytest.mark.parametrize("engine", ["transformers", pytest.param("vllm", marks=pytest.mark.slow)])
def test_each_step_samples_with_the_adapter_just_trained(tmp_path, engine):
    """Sync mode: every batch is sampled after the last update's push, so the learner's
    log-probs of it (π_prox) equal the engine's behaviour log-probs only if the engine got the
    adapter; with lr 1e-2 a missed push shows as a log-ratio far above the float noise."""
    options: dict = {}
    if engine == "vllm":
        pytest.importorskip("vllm")
        options = {"dtype": "float32", "max_model_len": 1024, "cpu_kv_cache_gib": 1}
    cfg = train_config(
        tmp_path / engine,
        tasks={"train": "test_lora:coin_tasks"},
        sft={"steps": 0},
        model={"lora": {"r": 4, "alpha": 8}, "engine": engine, "engine_options": options},
        learner={"lr": 1e-2},
        run={"steps": 3, "eval_every": 100, "checkpoint_every": 100},
        **{"async": {"mode": "sync"}},
    )
    trainer = Trainer(cfg)
    asyncio.run(trainer.run())
    rl = [json.loads(line) for line in (tmp_path / engine / "metrics.jsonl").read_text().splitlines()]
    rl = [e for e in rl if e.get("phase") == "rl"]
    adapter_bytes = sum(p.numel() * p.element_size() for p in lora_params(trainer.ctx.model).values())
    assert [e["sync/bytes"] for e in rl] == [float(adapter_bytes)] * 3
    assert all(e["batch/trajectories"] > 0 and e["actor/grad_norm"] > 0 for e in rl)
    assert all(e["offpolicy/log_ratio_abs_mean"] < 1e-5 for e in rl), [
        e["offpolicy/log_ratio_abs_mean"] for e in rl
    ]
