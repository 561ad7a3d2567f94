"""Triton kernel cases. Not collected by a plain ``pytest`` run (the name has no ``test_``
prefix): ``test_logprob_triton.py`` runs this file in a fresh interpreter with
``TRITON_INTERPRET=1`` (CPU), or in-process on a CUDA host.

The interpreter is slow: shapes stay tiny (N <= 16, V <= 100, d <= 32).
"""

from __future__ import annotations

import os

import pytest
import torch
from kernels_testlib import assert_matches_reference, make_case, max_rel_err, reference, run_with_grads

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"
if not INTERPRET and not torch.cuda.is_available():
    pytest.skip("needs CUDA or TRITON_INTERPRET=1 (set before import)", allow_module_level=True)

# Imported after the check above on purpose: the interpreter flag is read at decoration time.
from arborl.kernels import fused_logprob_entropy  # noqa: E402
from arborl.kernels import logprob_triton as lt  # noqa: E402


def triton_fn(token_chunk: int, vocab_chunk: int):
    def fn(h, w, t, temperature, b):
        return lt.TritonLogprobEntropyFunction.apply(h, w, t, b, temperature, token_chunk, vocab_chunk)

    return fn


def test_kernels_are_the_interpreted_ones():
    """Guards against a silent fallback: under the interpreter both kernels must be
    InterpretedFunction objects, and this module must really be running them."""
    if not INTERPRET:
        pytest.skip("CUDA run: kernels are compiled")
    from triton.runtime.interpreter import InterpretedFunction

    assert lt.INTERPRET
    assert isinstance(lt._fwd_kernel, InterpretedFunction)
    assert isinstance(lt._dlogits_kernel, InterpretedFunction)


# (n, vocab, d, bias, temperature, token_chunk, vocab_chunk)
SHAPES = [
    (13, 100, 32, True, 0.7, 8, 48),  # 2 vocab splits in forward, 2x3 backward chunks
    (1, 5, 1, False, 1.0, 4, 2),  # one token, d = 1, V = 5
    (16, 64, 16, True, 2.0, 16, 64),  # tile-aligned
    (7, 33, 5, True, 1.0, 3, 10),  # nothing aligned
]


@pytest.mark.parametrize(("n", "vocab", "d", "bias", "temperature", "tc", "vc"), SHAPES)
def test_float32_matches_reference(n, vocab, d, bias, temperature, tc, vc):
    case = make_case(n, vocab, d, torch.float32, bias, seed=n + vocab, device=DEVICE)
    got = run_with_grads(triton_fn(tc, vc), case, temperature)
    assert_matches_reference(got, reference(case, temperature), torch.float32)


@pytest.mark.parametrize(("n", "vocab", "d", "bias", "temperature", "tc", "vc"), SHAPES[:2])
def test_bfloat16_matches_reference(n, vocab, d, bias, temperature, tc, vc):
    case = make_case(n, vocab, d, torch.bfloat16, bias, seed=3, device=DEVICE)
    got = run_with_grads(triton_fn(tc, vc), case, temperature)
    assert_matches_reference(got, reference(case, temperature), torch.bfloat16)


@pytest.mark.parametrize(("use_logprobs", "use_entropy"), [(True, False), (False, True)])
def test_one_output_used(use_logprobs, use_entropy):
    case = make_case(10, 40, 8, torch.float32, True, seed=5, device=DEVICE)
    kw = {"use_logprobs": use_logprobs, "use_entropy": use_entropy}
    got = run_with_grads(triton_fn(4, 16), case, 0.9, **kw)
    assert_matches_reference(got, reference(case, 0.9, **kw), torch.float32)


def _source_node(out: torch.Tensor) -> str:
    """Name of the autograd node below the reshape views, i.e. the Function that made ``out``."""
    node = out.grad_fn
    while node is not None and type(node).__name__.startswith(("View", "Reshape")):
        node = node.next_functions[0][0]
    return type(node).__name__


def test_dispatch_and_agreement_with_chunked_torch():
    """backend='triton' reaches the Triton Function and agrees with the torch kernel."""
    case = make_case(12, 90, 24, torch.float32, True, seed=8, device=DEVICE)
    args = (case.hidden, case.weight, case.targets, 1.1, case.bias)
    lp_t, ent_t = fused_logprob_entropy(*args, backend="triton", token_chunk=5, vocab_chunk=40)
    assert "Triton" in _source_node(lp_t)
    lp_c, ent_c = fused_logprob_entropy(*args, backend="torch", token_chunk=5, vocab_chunk=40)
    assert "Chunked" in _source_node(lp_c)
    assert (lp_t - lp_c).abs().max() < 1e-5
    assert (ent_t - ent_c).abs().max() < 1e-5
    gt = torch.autograd.grad(lp_t.sum() + ent_t.sum(), case.leaves)
    gc = torch.autograd.grad(lp_c.sum() + ent_c.sum(), case.leaves)
    for a, b in zip(gt, gc, strict=True):
        assert max_rel_err(a, b) < 1e-5
