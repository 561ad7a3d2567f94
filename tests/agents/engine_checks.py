"""Checks shared by the engine tests: an engine's samples against the transformers reference."""

from __future__ import annotations

import torch

from arborl.agents.engines import SamplingParams

ATOL = 1e-5
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
