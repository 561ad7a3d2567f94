"""Triton kernels for the fused LM-head log-prob + entropy (CUDA; CPU under ``TRITON_INTERPRET=1``).

Forward, one program per ``(row block, vocab split)``::

    for each BLOCK_V tile of its split:      z = (h W_tile^T + b) / T      (tl.dot over BLOCK_D)
        m, s, t  <- online log-sum-exp update  (s = Σ e^(z-m), t = Σ e^(z-m)(z-m))
        z_tgt    += z at the row's target column
    -> partial (m, s, t, z_tgt) [splits, N], merged in torch into lse, entropy, logprob

Backward: a kernel recomputes each ``[token_chunk, vocab_chunk]`` logits block tile by tile
and writes ``dL/dlogits`` (the chunked torch module's formula, already divided by T) into
one reused buffer; cuBLAS matmuls then accumulate ``dH += dz W_v`` and ``dW_v += dz^T H``.

The interpreter reads ``TRITON_INTERPRET`` when ``@triton.jit`` runs, i.e. when this module
is imported: set it before the import. Under the interpreter, ``tl.dot`` on bfloat16 operands
returns garbage (numpy has no bfloat16), so tiles are upcast to float32 there (``UPCAST``).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import triton
import triton.language as tl

from ._checks import compute_dtype
from .errors import DTypeMismatchError
from .logprob import log_floor

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEFAULT_TRITON_CHUNKS = (4096, 16384)
"""(token_chunk, vocab_chunk) of the backward's ``dlogits`` buffer."""


@triton.jit
def _logits_tile(
    h_ptr, w_ptr, b_ptr, rows, cols, row_ok, col_ok, D, stride_h, stride_w, inv_t,
    HAS_BIAS: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """``(h[rows] @ w[cols]^T + b[cols]) / T`` as a float32 ``[BLOCK_N, BLOCK_V]`` tile."""
    acc = tl.zeros([BLOCK_N, BLOCK_V], dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        ks = d0 + tl.arange(0, BLOCK_D)
        k_ok = ks < D
        h = tl.load(
            h_ptr + rows[:, None] * stride_h + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0
        )
        w = tl.load(
            w_ptr + cols[None, :] * stride_w + ks[:, None], mask=col_ok[None, :] & k_ok[:, None], other=0.0
        )
        if UPCAST:
            h = h.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(h, w, acc, input_precision=PRECISION)
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    return acc * inv_t


@triton.jit
def _fwd_kernel(
    h_ptr, w_ptr, b_ptr, tgt_ptr, m_ptr, s_ptr, t_ptr, zt_ptr,
    N, V, D, split_v, stride_h, stride_w, inv_t,
    HAS_BIAS: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr, LOG_FLOOR: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """Partial online-LSE stats of one row block over one vocabulary split."""
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    tgt = tl.load(tgt_ptr + rows, mask=row_ok, other=-1)
    v_lo = split * split_v
    v_hi = tl.minimum(v_lo + split_v, V)
    m = tl.full([BLOCK_N], float("-inf"), dtype=tl.float32)
    s = tl.zeros([BLOCK_N], dtype=tl.float32)
    t = tl.zeros([BLOCK_N], dtype=tl.float32)
    zt = tl.zeros([BLOCK_N], dtype=tl.float32)
    for v0 in range(v_lo, v_hi, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        col_ok = cols < v_hi
        z = _logits_tile(
            h_ptr, w_ptr, b_ptr, rows, cols, row_ok, col_ok, D, stride_h, stride_w, inv_t,
            HAS_BIAS, UPCAST, PRECISION, BLOCK_N, BLOCK_V, BLOCK_D,
        )  # fmt: skip
        z = tl.where(col_ok[None, :], z, float("-inf"))
        m_new = tl.maximum(m, tl.max(z, axis=1))
        alpha = tl.exp(m - m_new)
        # t is relative to m; moving the reference to m_new adds (m - m_new)·s (0 on the first tile).
        shift = tl.where(m == float("-inf"), 0.0, m - m_new) * s
        zs = tl.maximum(z - m_new[:, None], LOG_FLOOR)
        e = tl.where(col_ok[None, :], tl.exp(zs), 0.0)
        t = alpha * (t + shift) + tl.sum(e * zs, axis=1)
        s = alpha * s + tl.sum(e, axis=1)
        m = m_new
        zt += tl.sum(tl.where(cols[None, :] == tgt[:, None], z, 0.0), axis=1)
    out = split * N + rows
    tl.store(m_ptr + out, m, mask=row_ok)
    tl.store(s_ptr + out, s, mask=row_ok)
    tl.store(t_ptr + out, t, mask=row_ok)
    tl.store(zt_ptr + out, zt, mask=row_ok)


@triton.jit
def _dlogits_kernel(
    h_ptr, w_ptr, b_ptr, tgt_ptr, lse_ptr, a_ptr, c_ptr, glp_ptr, dz_ptr,
    n0, n1, v0, v1, D, stride_h, stride_w, stride_dz, inv_t,
    HAS_BIAS: tl.constexpr, HAS_LP: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    LOG_FLOOR: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """``dL/dlogits`` for rows ``[n0, n1)`` x columns ``[v0, v1)`` into ``dz`` (block-local indices).

    ``dz = (p · (a·log p + c) + g_lp · onehot) / T`` with per-row ``a = -g_ent`` and
    ``c = -(g_lp + g_ent·H)``.
    """
    rows = n0 + tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = v0 + tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    row_ok = rows < n1
    col_ok = cols < v1
    z = _logits_tile(
        h_ptr, w_ptr, b_ptr, rows, cols, row_ok, col_ok, D, stride_h, stride_w, inv_t,
        HAS_BIAS, UPCAST, PRECISION, BLOCK_N, BLOCK_V, BLOCK_D,
    )  # fmt: skip
    lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0)
    a = tl.load(a_ptr + rows, mask=row_ok, other=0.0)
    c = tl.load(c_ptr + rows, mask=row_ok, other=0.0)
    logp = tl.maximum(z - lse[:, None], LOG_FLOOR)
    p = tl.exp(logp)
    dz = p * (a[:, None] * logp + c[:, None])
    if HAS_LP:
        tgt = tl.load(tgt_ptr + rows, mask=row_ok, other=-1)
        g = tl.load(glp_ptr + rows, mask=row_ok, other=0.0)
        dz += tl.where(cols[None, :] == tgt[:, None], g[:, None], 0.0)
    dz = dz * inv_t
    ptrs = dz_ptr + (rows - n0)[:, None] * stride_dz + (cols - v0)[None, :]
    tl.store(ptrs, dz.to(dz_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def _launch_config(dtype: torch.dtype) -> dict[str, Any]:
    """Tile sizes and dot precision. Small tiles under the interpreter keep the numpy work
    small; the CUDA tiles are a reasonable default for Hopper/Ampere, not autotuned."""
    upcast = INTERPRET and dtype != torch.float32
    # float32 inputs get IEEE float32 dots, not TF32: the PPO ratio exp(logp - old_logp)
    # amplifies logit error. Half-precision inputs use their native tensor-core dot.
    precision = "ieee" if dtype == torch.float32 or upcast else "tf32"
    blocks = (16, 32, 16) if INTERPRET else (64, 128, 64)
    return {
        "UPCAST": upcast,
        "PRECISION": precision,
        "BLOCK_N": blocks[0],
        "BLOCK_V": blocks[1],
        "BLOCK_D": blocks[2],
    }


def _num_splits(n_row_blocks: int, n_vocab_tiles: int, device: torch.device) -> int:
    """Vocabulary splits per row block: enough programs to fill the GPU (2 per SM)."""
    if device.type != "cuda":
        return min(2, n_vocab_tiles)  # exercises the split merge under the interpreter
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(n_vocab_tiles, triton.cdiv(2 * sms, n_row_blocks)))


def triton_logprob_entropy_forward(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    bias: torch.Tensor | None,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``hidden [N, d]``, ``weight [V, d]`` -> ``logprobs [N]``, ``entropy [N]``, ``lse [N]`` (float32)."""
    if hidden.dtype not in (torch.float32, torch.bfloat16):
        raise DTypeMismatchError(f"the Triton backend takes float32 or bfloat16, got {hidden.dtype}")
    hidden, weight = hidden.contiguous(), weight.contiguous()
    n, d = hidden.shape
    vocab = weight.shape[0]
    cfg = _launch_config(hidden.dtype)
    row_blocks = triton.cdiv(n, cfg["BLOCK_N"])
    tiles = triton.cdiv(vocab, cfg["BLOCK_V"])
    splits = _num_splits(row_blocks, tiles, hidden.device)
    split_v = triton.cdiv(tiles, splits) * cfg["BLOCK_V"]
    splits = triton.cdiv(vocab, split_v)
    m, s, t, zt = (torch.empty(splits, n, dtype=torch.float32, device=hidden.device) for _ in range(4))
    _fwd_kernel[(row_blocks, splits)](
        hidden, weight, hidden if bias is None else bias, targets, m, s, t, zt,
        n, vocab, d, split_v, hidden.stride(0), weight.stride(0), 1.0 / temperature,
        HAS_BIAS=bias is not None, LOG_FLOOR=log_floor(torch.float32), **cfg,
    )  # fmt: skip
    # Merge the splits' log-sum-exps: rescale each split's (s, t) to the global max.
    m_all = m.amax(dim=0)
    scale = torch.exp(m - m_all)
    s_all = (scale * s).sum(dim=0)
    t_all = (scale * (t + (m - m_all) * s)).sum(dim=0)
    log_s = torch.log(s_all)
    lse = m_all + log_s
    return zt.sum(dim=0) - lse, log_s - t_all / s_all, lse


def _accumulate_mm(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``acc += a @ b``; in place when dtypes agree, else through a temporary (bf16 matmul)."""
    if a.dtype == acc.dtype:
        acc.addmm_(a, b)
    else:
        acc += (a @ b).to(acc.dtype)


def triton_logprob_entropy_backward(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, bias: torch.Tensor | None,
    temperature: float, lse: torch.Tensor, entropy: torch.Tensor, grad_logprobs: torch.Tensor | None,
    grad_entropy: torch.Tensor | None, needs_grad: tuple[bool, bool, bool], token_chunk: int, vocab_chunk: int,
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:  # fmt: skip
    """Gradients ``(d hidden, d weight, d bias)``; same contract as the chunked torch backward."""
    need_h, need_w, need_b = needs_grad
    need_b = need_b and bias is not None
    if (grad_logprobs is None and grad_entropy is None) or not (need_h or need_w or need_b):
        return None, None, None
    hidden, weight = hidden.contiguous(), weight.contiguous()
    n, d = hidden.shape
    vocab = weight.shape[0]
    dev, f32 = hidden.device, torch.float32
    zeros = torch.zeros(n, dtype=f32, device=dev)
    g_lp = zeros if grad_logprobs is None else grad_logprobs.to(f32).contiguous()
    g_ent = zeros if grad_entropy is None else grad_entropy.to(f32).contiguous()
    a = -g_ent
    c = -(g_lp + g_ent * entropy)
    cfg = _launch_config(hidden.dtype)
    dh = torch.zeros(n, d, dtype=f32, device=dev) if need_h else None
    dw = torch.empty_like(weight) if need_w else None
    db = torch.empty(vocab, dtype=f32, device=dev) if need_b else None
    tc, vc = min(token_chunk, n), min(vocab_chunk, vocab)
    dz_buf = torch.empty(tc * vc, dtype=hidden.dtype, device=dev)
    for v0 in range(0, vocab, vc):
        v1 = min(v0 + vc, vocab)
        w_v = weight[v0:v1]
        dw_acc = torch.zeros(v1 - v0, d, dtype=f32, device=dev) if need_w else None
        if db is not None:
            db[v0:v1] = 0.0
        for n0 in range(0, n, tc):
            n1 = min(n0 + tc, n)
            dz = dz_buf[: (n1 - n0) * (v1 - v0)].view(n1 - n0, v1 - v0)
            grid = (triton.cdiv(n1 - n0, cfg["BLOCK_N"]), triton.cdiv(v1 - v0, cfg["BLOCK_V"]))
            _dlogits_kernel[grid](
                hidden, weight, hidden if bias is None else bias, targets, lse, a, c, g_lp, dz,
                n0, n1, v0, v1, d, hidden.stride(0), weight.stride(0), dz.stride(0), 1.0 / temperature,
                HAS_BIAS=bias is not None, HAS_LP=grad_logprobs is not None,
                LOG_FLOOR=log_floor(torch.float32), **cfg,
            )  # fmt: skip
            if dh is not None:
                _accumulate_mm(dh[n0:n1], dz, w_v)
            if dw_acc is not None:
                _accumulate_mm(dw_acc, dz.T, hidden[n0:n1])
            if db is not None:
                db[v0:v1] += dz.sum(dim=0, dtype=f32)
        if dw is not None and dw_acc is not None:
            dw[v0:v1] = dw_acc
    grad_b = None if db is None or bias is None else db.to(bias.dtype)
    return (None if dh is None else dh.to(hidden.dtype)), dw, grad_b


class TritonLogprobEntropyFunction(torch.autograd.Function):
    """Autograd wrapper of the Triton kernels on flat inputs (``hidden [N, d]``, ``targets [N]``)."""

    @staticmethod
    def forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
        bias: torch.Tensor | None, temperature: float, token_chunk: int, vocab_chunk: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        targets = targets.contiguous()
        logprobs, entropy, lse = triton_logprob_entropy_forward(hidden, weight, targets, bias, temperature)
        ctx.save_for_backward(hidden, weight, targets, bias, lse, entropy)
        ctx.temperature = temperature
        ctx.chunks = (token_chunk, vocab_chunk)
        ctx.set_materialize_grads(False)
        assert logprobs.dtype == compute_dtype(hidden.dtype)
        return logprobs, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(
        ctx: Any, grad_logprobs: torch.Tensor | None, grad_entropy: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, targets, bias, lse, entropy = ctx.saved_tensors
        needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[3])
        grads = triton_logprob_entropy_backward(
            hidden, weight, targets, bias, ctx.temperature, lse, entropy,
            grad_logprobs, grad_entropy, needs, *ctx.chunks,
        )  # fmt: skip
        return grads[0], grads[1], None, grads[2], None, None, None
