"""Checks shared by the engine tests: an engine's samples against the transformers reference,
the prompts they sample and a different policy's weights for the update tests."""

from __future__ import annotations

import torch

from arborl.agents.engines import SamplingParams

ATOL = 1e-5  # float32 sampling vs float64 teacher forcing
PROMPTS = [[1, 5, 9, 200, 33, 7, 91], [7, 8, 9], [300, 4, 4, 4, 12]]  # unequal: left padding is exercised
SHARED = [
    [1, 5, 9, 200, 33, 7, 91, 4],
    [1, 5, 9, 200, 12],
    [1, 5, 9, 200, 33, 7],
]  # prefilled once: 1 5 9 200
GREEDY = SamplingParams(temperature=0, max_new_tokens=16, ignore_eos=True)


def seeded(seed: int) -> SamplingParams:
    return SamplingParams(
        temperature=0.8, top_k=50, top_p=0.9, max_new_tokens=16, n=2, seed=seed, ignore_eos=True
    )


def assert_scored(hf, prompt, gen, sampling) -> None:
    """The engine's log-probs are transformers' scores of the very ids it returned."""
    expected = hf.score(prompt, gen.token_ids, sampling.temperature, sampling.top_k, sampling.top_p)
    torch.testing.assert_close(torch.tensor(gen.logprobs, dtype=torch.float64), expected, rtol=0, atol=ATOL)


async def assert_same_samples(engine, hf, prompts, seed: int) -> None:
    """Greedy and seeded sampling give transformers' tokens (greedy: the same argmax; seeded:
    both draw the exponential race from a generator seeded with seed + sample index) and
    log-probs that score them, scored after the ids we sent (an engine that re-tokenized the
    prompt or decoded and re-encoded the response would not match)."""
    for sampling in (GREEDY, seeded(seed)):
        out = await engine.generate(prompts, sampling)
        ref = await hf.generate(prompts, sampling)
        assert [(g.prompt_index, g.sample_index) for g in out] == [
            (g.prompt_index, g.sample_index) for g in ref
        ]
        for g, h in zip(out, ref, strict=True):
            assert g.finish_reason == "length" and len(g.token_ids) == 16
            assert g.num_prompt_tokens == len(prompts[g.prompt_index])
            assert_scored(hf, prompts[g.prompt_index], g, sampling)
            assert g.token_ids == h.token_ids


def new_policy(model, seed=0):
    """Weights of a clearly different policy: perturbed MLPs (the argmax moves) and a larger
    final-norm gain (every logit scaled up: a peaked distribution, unlike the untrained one)."""
    gen = torch.Generator().manual_seed(seed)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for name, value in state.items():
        if ".mlp." in name:
            value += 0.3 * torch.randn(value.shape, generator=gen, dtype=value.dtype)
    state["model.norm.weight"] *= 6.0
    return state
