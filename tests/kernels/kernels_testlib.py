"""Shared helpers of the kernel tests: inputs, the float64 reference and a relative-error check.

Imported by module name (pytest puts this folder on sys.path), also from the Triton cases that
run in a subprocess under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from arborl.kernels import materialized_logprob_entropy

# Tolerances, per input dtype. Forward: max |actual - reference| (nats). Gradients: max |error| /
# max |reference| per tensor. The reference is float64 on the *same* (rounded) input values.
FWD_ATOL = {torch.float64: 1e-12, torch.float32: 2e-5, torch.bfloat16: 2e-5}
# bfloat16 gradients are returned in bfloat16: one rounding (2^-8 ≈ 4e-3 relative) dominates.
GRAD_RTOL = {torch.float64: 1e-11, torch.float32: 2e-5, torch.bfloat16: 1.6e-2}


@dataclass
class Case:
    hidden: torch.Tensor
    weight: torch.Tensor
    targets: torch.Tensor
    bias: torch.Tensor | None
    grad_logprobs: torch.Tensor
    grad_entropy: torch.Tensor

    @property
    def leaves(self) -> list[torch.Tensor]:
        return [self.hidden, self.weight] + ([self.bias] if self.bias is not None else [])


def make_case(
    n: int,
    vocab: int,
    d: int,
    dtype: torch.dtype = torch.float32,
    bias: bool = True,
    seed: int = 0,
    device: str = "cpu",
    lead: tuple[int, ...] | None = None,
) -> Case:
    """Random inputs with logits of standard deviation ~2 (a softmax neither flat nor one-hot)."""
    g = torch.Generator().manual_seed(seed)
    shape = lead if lead is not None else (n,)
    hidden = torch.randn(*shape, d, generator=g)
    weight = torch.randn(vocab, d, generator=g) * (2.0 / d**0.5)
    b = torch.randn(vocab, generator=g) if bias else None
    targets = torch.randint(0, vocab, shape, generator=g)
    grad_lp = torch.randn(*shape, generator=g, dtype=torch.float64)
    grad_ent = torch.randn(*shape, generator=g, dtype=torch.float64)

    def leaf(x: torch.Tensor) -> torch.Tensor:
        return x.to(device=device, dtype=dtype).requires_grad_()

    return Case(
        hidden=leaf(hidden),
        weight=leaf(weight),
        targets=targets.to(device),
        bias=None if b is None else leaf(b),
        grad_logprobs=grad_lp.to(device),
        grad_entropy=grad_ent.to(device),
    )


def run_with_grads(
    fn: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    case: Case,
    temperature: float,
    use_logprobs: bool = True,
    use_entropy: bool = True,
    cast: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """``fn(hidden, weight, targets, temperature, bias)`` and the gradients of
    ``Σ g_lp·logprob + Σ g_ent·entropy`` with respect to the case's leaves (optionally on
    float64 copies of the inputs, for the reference)."""
    leaves = case.leaves if cast is None else [x.detach().to(cast).requires_grad_() for x in case.leaves]
    bias = leaves[2] if case.bias is not None else None
    lp, ent = fn(leaves[0], leaves[1], case.targets, temperature, bias)
    obj = torch.zeros((), dtype=torch.float64, device=lp.device)
    if use_logprobs:
        obj = obj + (lp.double() * case.grad_logprobs).sum()
    if use_entropy:
        obj = obj + (ent.double() * case.grad_entropy).sum()
    grads = list(torch.autograd.grad(obj, leaves))
    return lp.detach(), ent.detach(), grads


def reference(
    case: Case, temperature: float, **kw: bool
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Float64 materialised reference on the case's own input values."""
    return run_with_grads(materialized_logprob_entropy, case, temperature, cast=torch.float64, **kw)


def max_rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """``max |actual - expected| / max |expected|`` (absolute error when expected is all 0)."""
    err = (actual.double() - expected.double()).abs().max().item()
    scale = expected.double().abs().max().item()
    return err / scale if scale > 0 else err


def assert_matches_reference(
    got: tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]],
    ref: tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]],
    dtype: torch.dtype,
    names: tuple[str, ...] = ("hidden", "weight", "bias"),
) -> None:
    lp, ent, grads = got
    lp_ref, ent_ref, grads_ref = ref
    assert lp.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    for label, a, e in (("logprobs", lp, lp_ref), ("entropy", ent, ent_ref)):
        err = (a.double() - e.double()).abs().max().item() if a.numel() else 0.0
        assert err <= FWD_ATOL[dtype], f"{label}: max abs error {err:.3g} > {FWD_ATOL[dtype]:.1g} ({dtype})"
    assert len(grads) == len(grads_ref)
    for name, g, g_ref in zip(names, grads, grads_ref, strict=False):
        assert g.dtype == dtype, f"grad {name} has dtype {g.dtype}, expected {dtype}"
        assert g.shape == g_ref.shape
        err = max_rel_err(g, g_ref)
        assert err <= GRAD_RTOL[dtype], (
            f"grad {name}: relative error {err:.3g} > {GRAD_RTOL[dtype]:.1g} ({dtype})"
        )
