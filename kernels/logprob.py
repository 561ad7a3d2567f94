"""Chunked torch kernel: per-token log-prob and entropy without materialising ``[N, V]`` logits.

The CPU path and the reference for every other backend. Logits are produced one
``[token_chunk, vocab_chunk]`` block at a time into two reused scratch buffers::

    hidden [N, d] ──┐                         per block  z = (h W_v^T + b_v) / T    [Nc, Vc]
    weight [V, d] ──┼─▶ for v-block: for n-block ─▶ online log-sum-exp  (m, s, t)  [N]
    targets [N] ────┘                                 target logit                  [N]
                                                   ─▶ logprob [N], entropy [N], lse [N]

Forward keeps, per row, the running max ``m``, ``s = Σ exp(z - m)`` and
``t = Σ exp(z - m)(z - m)``; then ``lse = m + log s`` and ``entropy = log s - t / s``.
Backward recomputes each block (nothing ``[N, V]`` is saved) and forms the gradient
with respect to the scaled logits in place::

    dL/dz = g_lp · (onehot(target) - p) - g_ent · p · (log p + H)

then ``dH += dz W_v / T``, ``dW_v += dz^T h / T`` and ``db_v += Σ_rows dz / T``.
Peak extra memory is ``2 · Nc · Vc`` floats plus ``O(N·d + V·d)`` accumulators (the gradient
buffers themselves), instead of several ``[N, V]`` tensors.

Written by hand rather than taken from a library: verl's ``FusedLinearForPPO`` chunks over
tokens only (it still builds ``[chunk, V]`` logits), has no bias and no entropy gradient
through a chunked backward; Liger-Kernel's fused linear kernels are CUDA-only Triton.
"""

from __future__ import annotations

from typing import Any

import torch

from ._checks import compute_dtype

DEFAULT_TOKEN_CHUNK = 4096
DEFAULT_VOCAB_CHUNK = 1024


def log_floor(dtype: torch.dtype) -> float:
    """Floor for ``z - max`` and ``log p`` before ``exp``.

    x86 handles denormal floats in microcode, 20-40x slower than normal ones; a wide logit
    range (low temperature, peaked models) fills blocks with them. ``exp(-60) ≈ 9e-27`` keeps
    every ``p`` and ``p · coefficient`` normal in float32, and moves ``Σ p`` or any gradient
    by less than ``V · 9e-27`` relative (< 1e-20 for V = 152k): far below float32 precision.
    """
    return -700.0 if dtype == torch.float64 else -60.0


def _logits_block(
    hs: torch.Tensor, w: torch.Tensor, bs: torch.Tensor | None, buf: torch.Tensor
) -> torch.Tensor:
    """``hs [r, d] @ w[c, d]^T (+ bs [c])`` into the front of the flat scratch ``buf``."""
    out = buf[: hs.shape[0] * w.shape[0]].view(hs.shape[0], w.shape[0])
    if bs is None:
        return torch.mm(hs, w.T, out=out)
    return torch.addmm(bs, hs, w.T, out=out)


def _online_update(
    z: torch.Tensor, m: torch.Tensor, s: torch.Tensor, t: torch.Tensor, ebuf: torch.Tensor
) -> None:
    """Fold one logits block ``z [r, c]`` into the running row stats ``m, s, t [r]`` (in place).

    ``z`` is overwritten with ``z - m_new``.
    """
    m_new = torch.maximum(m, z.amax(dim=1))
    alpha = torch.exp(m - m_new)  # 0 on the first block, where m = -inf
    # t is kept relative to m: moving the reference from m to m_new adds (m - m_new) · s.
    # On the first block (m = -inf, s = 0) that product is nan, and the where drops it.
    shift = torch.where(s > 0, (m - m_new) * s, 0.0)
    z.sub_(m_new.unsqueeze(1)).clamp_(min=log_floor(z.dtype))
    e = torch.exp(z, out=ebuf[: z.numel()].view_as(z))
    t.copy_(alpha * (t + shift) + torch.linalg.vecdot(e, z))
    s.mul_(alpha).add_(e.sum(dim=1))
    m.copy_(m_new)


def _target_logits(
    hs: torch.Tensor, w: torch.Tensor, bs: torch.Tensor | None, targets: torch.Tensor, chunk: int
) -> torch.Tensor:
    """``z[i, targets[i]]`` for every row, as ``[N]``, gathering weight rows chunk by chunk."""
    out = torch.empty(hs.shape[0], dtype=hs.dtype, device=hs.device)
    for n0 in range(0, hs.shape[0], chunk):
        idx = targets[n0 : n0 + chunk]
        out[n0 : n0 + chunk] = torch.linalg.vecdot(hs[n0 : n0 + chunk], w[idx].to(hs.dtype))
        if bs is not None:
            out[n0 : n0 + chunk] += bs[idx]
    return out


def _scaled(x: torch.Tensor | None, inv_t: float, dtype: torch.dtype) -> torch.Tensor | None:
    """``x / T`` in the compute dtype, as a new tensor (never an alias of the input)."""
    return None if x is None else x.to(dtype) * inv_t


def chunked_logprob_entropy_forward(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    bias: torch.Tensor | None,
    temperature: float,
    token_chunk: int = DEFAULT_TOKEN_CHUNK,
    vocab_chunk: int = DEFAULT_VOCAB_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward statistics, no autograd.

    Shapes::

        hidden [N, d], weight [V, d], targets [N], bias [V] | None
        -> logprobs [N], entropy [N], lse [N]   (float32, or float64 for float64 inputs)
    """
    n, vocab = hidden.shape[0], weight.shape[0]
    cdt = compute_dtype(hidden.dtype)
    inv_t = 1.0 / temperature
    hs = _scaled(hidden, inv_t, cdt)
    bs = _scaled(bias, inv_t, cdt)
    assert hs is not None
    m = torch.full((n,), float("-inf"), dtype=cdt, device=hidden.device)
    s = torch.zeros(n, dtype=cdt, device=hidden.device)
    t = torch.zeros(n, dtype=cdt, device=hidden.device)
    block = min(token_chunk, n) * min(vocab_chunk, vocab)
    zbuf = torch.empty(block, dtype=cdt, device=hidden.device)
    ebuf = torch.empty(block, dtype=cdt, device=hidden.device)
    # Vocabulary outside, tokens inside: each weight block is cast once and stays in cache
    # while every token chunk streams past it.
    for v0 in range(0, vocab, vocab_chunk):
        w = weight[v0 : v0 + vocab_chunk].to(cdt)
        b = None if bs is None else bs[v0 : v0 + vocab_chunk]
        for n0 in range(0, n, token_chunk):
            rows = slice(n0, n0 + token_chunk)
            z = _logits_block(hs[rows], w, b, zbuf)
            _online_update(z, m[rows], s[rows], t[rows], ebuf)
    log_s = torch.log(s)
    lse = m + log_s
    entropy = log_s - t / s
    logprobs = _target_logits(hs, weight, bs, targets, token_chunk) - lse
    return logprobs, entropy, lse


def chunked_logprob_entropy_backward(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    bias: torch.Tensor | None,
    temperature: float,
    lse: torch.Tensor,
    entropy: torch.Tensor,
    grad_logprobs: torch.Tensor | None,
    grad_entropy: torch.Tensor | None,
    needs_grad: tuple[bool, bool, bool],
    token_chunk: int = DEFAULT_TOKEN_CHUNK,
    vocab_chunk: int = DEFAULT_VOCAB_CHUNK,
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Gradients ``(d hidden [N, d], d weight [V, d], d bias [V])`` from ``g_lp [N]``, ``g_ent [N]``.

    ``needs_grad`` says which of (hidden, weight, bias) to compute; the others come back None.
    Logits are recomputed block by block; see the module docstring for the formula.
    """
    need_h, need_w, need_b = needs_grad
    need_b = need_b and bias is not None
    if (grad_logprobs is None and grad_entropy is None) or not (need_h or need_w or need_b):
        return None, None, None
    n, vocab = hidden.shape[0], weight.shape[0]
    cdt = compute_dtype(hidden.dtype)
    dev = hidden.device
    inv_t = 1.0 / temperature
    hs = _scaled(hidden, inv_t, cdt)
    bs = _scaled(bias, inv_t, cdt)
    assert hs is not None
    # dz = p · (a · log p + c) + g_lp · onehot, with per-row a = -g_ent, c = -(g_lp + g_ent · H).
    g_lp = None if grad_logprobs is None else grad_logprobs.to(cdt)
    g_ent = None if grad_entropy is None else grad_entropy.to(cdt)
    c = torch.zeros(n, dtype=cdt, device=dev)
    if g_lp is not None:
        c -= g_lp
    if g_ent is not None:
        c -= g_ent * entropy.to(cdt)
    a = None if g_ent is None else (-g_ent).unsqueeze(1)
    c = c.unsqueeze(1)
    lse_col = lse.to(cdt).unsqueeze(1)
    floor = log_floor(cdt)

    dh = torch.zeros(n, hidden.shape[1], dtype=cdt, device=dev) if need_h else None
    dw = torch.empty(weight.shape, dtype=cdt, device=dev) if need_w else None
    db = torch.empty(vocab, dtype=cdt, device=dev) if need_b else None
    block = min(token_chunk, n) * min(vocab_chunk, vocab)
    zbuf = torch.empty(block, dtype=cdt, device=dev)
    pbuf = torch.empty(block, dtype=cdt, device=dev)
    for v0 in range(0, vocab, vocab_chunk):
        v1 = min(v0 + vocab_chunk, vocab)
        w = weight[v0:v1].to(cdt)
        b = None if bs is None else bs[v0:v1]
        if dw is not None:
            dw[v0:v1].zero_()
        if db is not None:
            db[v0:v1].zero_()
        for n0 in range(0, n, token_chunk):
            rows = slice(n0, n0 + token_chunk)
            dz = _logits_block(hs[rows], w, b, zbuf).sub_(lse_col[rows]).clamp_(min=floor)  # log p
            p = torch.exp(dz, out=pbuf[: dz.numel()].view_as(dz))
            if a is not None:
                dz.mul_(a[rows]).add_(c[rows]).mul_(p)
            else:
                dz = p.mul_(c[rows])
            if g_lp is not None:
                _add_target_onehot(dz, targets[rows], g_lp[rows], v0, v1)
            if dh is not None:
                dh[rows].addmm_(dz, w)
            if dw is not None:
                dw[v0:v1].addmm_(dz.T, hs[rows])  # hs carries the 1/T of dz/dW
            if db is not None:
                db[v0:v1] += dz.sum(dim=0)
    grad_h = None if dh is None else dh.mul_(inv_t).to(hidden.dtype)
    grad_w = None if dw is None else dw.to(weight.dtype)
    grad_b = None if db is None or bias is None else db.mul_(inv_t).to(bias.dtype)
    return grad_h, grad_w, grad_b


def _add_target_onehot(dz: torch.Tensor, targets: torch.Tensor, g_lp: torch.Tensor, v0: int, v1: int) -> None:
    """``dz[i, targets[i] - v0] += g_lp[i]`` for the rows whose target lies in ``[v0, v1)``."""
    hit = ((targets >= v0) & (targets < v1)).nonzero().squeeze(1)
    if hit.numel():
        dz.index_put_((hit, targets[hit] - v0), g_lp[hit], accumulate=True)


class ChunkedLogprobEntropyFunction(torch.autograd.Function):
    """Autograd wrapper of the chunked torch kernel on flat inputs (``hidden [N, d]``, ``targets [N]``).

    Both outputs are differentiable; double backward is not supported.
    """

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        bias: torch.Tensor | None,
        temperature: float,
        token_chunk: int,
        vocab_chunk: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logprobs, entropy, lse = chunked_logprob_entropy_forward(
            hidden, weight, targets, bias, temperature, token_chunk, vocab_chunk
        )
        ctx.save_for_backward(hidden, weight, targets, bias, lse, entropy)
        ctx.temperature = temperature
        ctx.chunks = (token_chunk, vocab_chunk)
        ctx.set_materialize_grads(False)
        return logprobs, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(
        ctx: Any, grad_logprobs: torch.Tensor | None, grad_entropy: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, targets, bias, lse, entropy = ctx.saved_tensors
        grads = chunked_logprob_entropy_backward(
            hidden,
            weight,
            targets,
            bias,
            ctx.temperature,
            lse,
            entropy,
            grad_logprobs,
            grad_entropy,
            (ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[3]),
            *ctx.chunks,
        )
        return grads[0], grads[1], None, grads[2], None, None, None
