"""`sdpa_gqa`: transformers' attention with SDPA reading grouped key/value heads in place.
Same logits and gradients as transformers' own sdpa (which repeats the heads) on the real
tiny model, in a left-padded batch (a mask: the case where sdpa repeats) and in a decode
step against a KV cache."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from arborl.kernels.attention import NAME, register_sdpa_gqa


@pytest.fixture(scope="module")
def models(tiny_model):
    register_sdpa_gqa()
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32, attn_implementation="sdpa")
    assert base.config.num_attention_heads > base.config.num_key_value_heads  # grouped heads
    gqa = copy.deepcopy(base)
    gqa.set_attn_implementation(NAME)
    return base, gqa


def padded_batch(vocab: int):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (4, 24), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :5], mask[3, :11] = 0, 0  # left padding
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def test_same_logits_and_gradients_as_transformers_sdpa_on_a_padded_batch(models):
    ids, mask, pos = padded_batch(models[0].config.vocab_size)
    outs, grads = [], []
    for model in models:
        model.zero_grad()
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        (logits.float().logsumexp(-1) * mask).sum().backward()
        outs.append(logits.detach())
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)
    assert models[1].config._attn_implementation == NAME


@torch.inference_mode()
def test_same_next_token_logits_in_a_decode_step_on_a_kv_cache(models):
    ids, mask, pos = padded_batch(models[0].config.vocab_size)
    step = []
    for model in models:
        cache = DynamicCache(config=model.config)
        model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache)
        mask2 = torch.cat([mask, torch.ones((4, 1), dtype=mask.dtype)], 1)
        nxt = torch.tensor([[5], [6], [7], [8]])
        step.append(
            model(
                input_ids=nxt, attention_mask=mask2, position_ids=pos[:, -1:] + 1, past_key_values=cache
            ).logits
        )
    torch.testing.assert_close(step[1], step[0], rtol=1e-5, atol=1e-5)


def test_registering_twice_is_harmless():
    assert register_sdpa_gqa() == register_sdpa_gqa() == NAME
