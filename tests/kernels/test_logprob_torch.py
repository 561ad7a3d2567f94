"""Chunked torch kernel against the float64 materialised reference: outputs and gradients."""

from __future__ import annotations

import functools

import pytest
import torch
from kernels_testlib import (
    FWD_ATOL,
    assert_matches_reference,
    make_case,
    max_rel_err,
    reference,
    run_with_grads,
)

from arborl.kernels import (
    ChunkedLogprobEntropyFunction,
    fused_logprob_entropy,
    materialized_logprob_entropy,
)

# (n, vocab, d, bias, token_chunk, vocab_chunk): odd sizes, chunks that do and do not divide.
SHAPES = [
    (1, 7, 1, False, 1, 3),  # a single token, d = 1, V not a multiple of the chunk
    (37, 101, 13, True, 8, 16),  # nothing divides
    (64, 256, 32, True, 64, 256),  # one block exactly
    (5, 1, 4, True, 2, 1),  # V = 1: log-prob and entropy are 0, so are the gradients
    (20, 50, 8, False, 1024, 4096),  # chunks larger than the problem
]
TEMPERATURES = [0.5, 1.0, 2.0]


def chunked(token_chunk: int, vocab_chunk: int):
    return functools.partial(
        fused_logprob_entropy, backend="torch", token_chunk=token_chunk, vocab_chunk=vocab_chunk
    )


@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize(("n", "vocab", "d", "bias", "tc", "vc"), SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_reference(n, vocab, d, bias, tc, vc, temperature, dtype):
    case = make_case(n, vocab, d, dtype, bias, seed=n * 1000 + vocab)
    got = run_with_grads(chunked(tc, vc), case, temperature)
    assert_matches_reference(got, reference(case, temperature), dtype)


@pytest.mark.parametrize(("n", "vocab", "d", "bias", "tc", "vc"), SHAPES)
def test_float64_matches_reference_tightly(n, vocab, d, bias, tc, vc):
    case = make_case(n, vocab, d, torch.float64, bias, seed=7)
    got = run_with_grads(chunked(tc, vc), case, 0.7)
    assert_matches_reference(got, reference(case, 0.7), torch.float64)


def test_gradcheck_both_outputs():
    """torch's finite-difference check of the full Jacobian, both outputs, float64."""
    case = make_case(6, 23, 5, torch.float64, bias=True, seed=3)

    def fn(h, w, b):
        return ChunkedLogprobEntropyFunction.apply(h, w, case.targets, b, 0.8, 4, 7)

    assert torch.autograd.gradcheck(fn, tuple(case.leaves))


@pytest.mark.parametrize(("use_logprobs", "use_entropy"), [(True, False), (False, True)])
def test_one_output_used(use_logprobs, use_entropy):
    """Backward with only one output in the loss (the other's gradient arrives as None)."""
    case = make_case(19, 67, 9, torch.float32, bias=True, seed=11)
    kw = {"use_logprobs": use_logprobs, "use_entropy": use_entropy}
    got = run_with_grads(chunked(4, 16), case, 1.3, **kw)
    assert_matches_reference(got, reference(case, 1.3, **kw), torch.float32)


def test_frozen_weight_only_hidden_grad():
    case = make_case(9, 40, 6, torch.float32, bias=True, seed=5)
    case.weight.requires_grad_(False)
    case.bias.requires_grad_(False)
    lp, ent = fused_logprob_entropy(case.hidden, case.weight, case.targets, 1.0, case.bias, token_chunk=4)
    (lp.sum() + ent.sum()).backward()
    h64 = case.hidden.detach().double().requires_grad_()
    lp_r, ent_r = fused_logprob_entropy(h64, case.weight.double(), case.targets, 1.0, case.bias.double())
    (lp_r.sum() + ent_r.sum()).backward()
    assert case.weight.grad is None
    assert max_rel_err(case.hidden.grad, h64.grad) < 2e-5


def test_batched_leading_dims_and_int32_targets():
    case = make_case(0, 30, 8, torch.float32, bias=False, seed=2, lead=(3, 4))
    targets32 = case.targets.to(torch.int32)
    lp, ent = fused_logprob_entropy(case.hidden, case.weight, targets32, 1.0, token_chunk=5, vocab_chunk=7)
    assert lp.shape == ent.shape == (3, 4)
    lp_r, ent_r, _ = reference(case, 1.0)
    assert (lp - lp_r).abs().max() < FWD_ATOL[torch.float32]
    assert (ent - ent_r).abs().max() < FWD_ATOL[torch.float32]


def test_empty_batch_gives_empty_outputs_and_zero_grads():
    case = make_case(0, 11, 4, torch.float32, bias=True, seed=0)
    lp, ent = fused_logprob_entropy(case.hidden, case.weight, case.targets, 1.0, case.bias)
    assert lp.shape == ent.shape == (0,)
    (lp.sum() + ent.sum()).backward()
    assert torch.count_nonzero(case.hidden.grad) == 0
    assert torch.count_nonzero(case.weight.grad) == 0


def test_wide_logit_range_stays_accurate():
    """Logit spreads of hundreds of nats (the denormal floor must not move the results)."""
    case = make_case(8, 300, 16, torch.float64, bias=True, seed=4)
    with torch.no_grad():
        case.weight.mul_(40.0)
    got = run_with_grads(chunked(3, 64), case, 0.5)
    assert_matches_reference(got, reference(case, 0.5), torch.float64)
    case32 = make_case(8, 300, 16, torch.float32, bias=True, seed=4)
    with torch.no_grad():
        case32.weight.mul_(40.0)
    lp, ent, _ = run_with_grads(chunked(3, 64), case32, 0.5)
    lp_r, ent_r, _ = reference(case32, 0.5)
    # logits reach ~1e3 here, so float32's absolute error scales with them
    assert (lp - lp_r).abs().max() < 1e-3
    assert (ent - ent_r).abs().max() < 1e-3


def test_wrong_temperature_is_detected():
    """The comparison can fail: a 5% temperature error is far outside the tolerance."""
    case = make_case(16, 50, 8, torch.float32, bias=True, seed=9)
    lp, ent, _ = run_with_grads(chunked(4, 16), case, 1.0)
    lp_r, ent_r, _ = reference(case, 1.05)
    assert (lp - lp_r).abs().max() > 100 * FWD_ATOL[torch.float32]
    assert (ent - ent_r).abs().max() > 100 * FWD_ATOL[torch.float32]


def test_no_block_of_size_tokens_by_vocab_is_allocated():
    """Extra memory is O(chunk x vocab_chunk): no op in forward + backward allocates anything
    near one [N, V] float32 tensor, and the graph saves nothing of that size. (The
    materialised reference allocates >= N·V floats in a single op, as a control.)"""
    from torch.profiler import ProfilerActivity, profile

    n, vocab, d = 256, 4096, 8
    case = make_case(n, vocab, d, torch.float32, bias=True, seed=1)
    nv_bytes = n * vocab * 4

    def largest_alloc(fn) -> tuple[int, int]:
        saved: list[int] = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            saved.append(t.numel() * t.element_size())
            return t

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                lp, ent = fn()
            (lp.sum() + ent.sum()).backward()
        return max(e.cpu_memory_usage for e in prof.events()), max(saved, default=0)

    fused_alloc, fused_saved = largest_alloc(
        lambda: fused_logprob_entropy(
            case.hidden, case.weight, case.targets, 1.0, case.bias, token_chunk=128, vocab_chunk=1024
        )
    )
    ref_alloc, ref_saved = largest_alloc(
        lambda: materialized_logprob_entropy(case.hidden, case.weight, case.targets, 1.0, case.bias)
    )
    # the largest fused buffers are the weight gradient (V·d) and one 128x1024 block
    assert fused_alloc <= max(vocab * d, 128 * 1024) * 4 * 1.1 < nv_bytes / 2
    assert fused_saved <= max(vocab * d, n * d) * 4
    assert ref_alloc >= nv_bytes and ref_saved >= nv_bytes
