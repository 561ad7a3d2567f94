"""Typed errors for bad input, and backend selection."""

from __future__ import annotations

import sys

import pytest
import torch

from arborl.kernels import (
    BackendUnavailableError,
    DTypeMismatchError,
    KernelInputError,
    ShapeMismatchError,
    fused_logprob_entropy,
    resolve_backend,
)

N, V, D = 4, 10, 3


def args(**over):
    base = {
        "hidden": torch.randn(N, D),
        "weight": torch.randn(V, D),
        "targets": torch.randint(0, V, (N,)),
        "temperature": 1.0,
        "bias": None,
    }
    base.update(over)
    return base


@pytest.mark.parametrize(
    ("over", "error", "match"),
    [
        ({"hidden": torch.randn(N, D + 1)}, ShapeMismatchError, "hidden must be"),
        ({"weight": torch.randn(V)}, ShapeMismatchError, "weight must be"),
        ({"weight": torch.randn(0, D)}, ShapeMismatchError, "V > 0"),
        ({"targets": torch.zeros(N + 1, dtype=torch.long)}, ShapeMismatchError, "targets must have"),
        ({"bias": torch.randn(V + 1)}, ShapeMismatchError, "bias must be"),
        ({"targets": torch.zeros(N)}, DTypeMismatchError, "int64 or int32"),
        ({"hidden": torch.randn(N, D).double()}, DTypeMismatchError, "share a dtype"),
        ({"bias": torch.randn(V).double()}, DTypeMismatchError, "bias"),
        ({"hidden": torch.ones(N, D, dtype=torch.int64)}, DTypeMismatchError, "hidden must be one of"),
        ({"temperature": 0.0}, KernelInputError, "temperature"),
        ({"temperature": float("nan")}, KernelInputError, "temperature"),
        ({"temperature": torch.tensor(1.0)}, KernelInputError, "temperature must be a float"),
        ({"targets": torch.full((N,), V)}, KernelInputError, r"\[0, V=10\)"),
        ({"targets": torch.full((N,), -100)}, KernelInputError, "mask padding"),
    ],
)
def test_bad_input_raises_typed_error(over, error, match):
    with pytest.raises(error, match=match):
        fused_logprob_entropy(**args(**over))


def test_dtype_errors_are_also_type_errors():
    with pytest.raises(TypeError):
        fused_logprob_entropy(**args(targets=torch.zeros(N)))


def test_bad_chunk_and_backend():
    with pytest.raises(KernelInputError, match="token_chunk"):
        fused_logprob_entropy(**args(), token_chunk=0)
    with pytest.raises(KernelInputError, match="backend"):
        fused_logprob_entropy(**args(), backend="cuda")  # type: ignore[arg-type]


def test_backend_resolution_on_cpu(monkeypatch):
    cpu = torch.device("cpu")
    assert resolve_backend("auto", cpu) == "torch"
    assert resolve_backend("torch", cpu) == "torch"
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(BackendUnavailableError, match="TRITON_INTERPRET"):
        resolve_backend("triton", cpu)


def test_backend_resolution_for_cuda_tensors():
    """Pure selection logic (no device is touched): Triton for float32/bfloat16 CUDA tensors."""
    pytest.importorskip("triton")
    cuda = torch.device("cuda")
    assert resolve_backend("auto", cuda, torch.float32) == "triton"
    assert resolve_backend("auto", cuda, torch.bfloat16) == "triton"
    assert resolve_backend("auto", cuda, torch.float64) == "torch"
    assert resolve_backend("auto", cuda, torch.float16) == "torch"
    with pytest.raises(DTypeMismatchError, match="backend='torch'"):
        resolve_backend("triton", cuda, torch.float16)


def test_triton_on_cpu_refused_when_kernels_were_compiled_before_the_flag(monkeypatch):
    """Setting TRITON_INTERPRET after logprob_triton was imported cannot take effect."""
    import types

    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setitem(sys.modules, "arborl.kernels.logprob_triton", types.SimpleNamespace(INTERPRET=False))
    with pytest.raises(BackendUnavailableError, match=r"before arborl\.kernels\.logprob_triton"):
        resolve_backend("triton", torch.device("cpu"))
    monkeypatch.setitem(sys.modules, "arborl.kernels.logprob_triton", types.SimpleNamespace(INTERPRET=True))
    assert resolve_backend("triton", torch.device("cpu")) == "triton"
