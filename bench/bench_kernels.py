"""Kernel benchmarks: the fused LM-head log-prob + entropy against materialised logits and
against verl's own kernels (its chunked torch FusedLinearForPPO; on GPUs also its Triton
linear_cross_entropy). The estimators' numba loops have their own: bench/bench_credit.py.

    python bench/bench_kernels.py [--quick] [--rounds R] [--only logprob,gpu] [--shapes N,d,V;...]

Prints Markdown tables and writes them to bench/results/kernels.md. The machine is shared
and noisy, so every number that matters is a ratio against a baseline measured in the same
run, and the log-prob variants alternate in paired rounds.

Memory on CPU: each log-prob variant runs in a fresh subprocess. After its inputs exist
(and a tiny warm-up has loaded every kernel), it resets the kernel's peak-RSS mark
(``/proc/self/clear_refs``), runs forward + backward once, and reports ``VmHWM - VmRSS``:
the peak memory the computation added on top of its inputs (torch's CPU allocations are
invisible to tracemalloc). The weight gradient (V x d floats) is part of both variants.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "kernels.md"
GiB = 1024**3

# ─── log-prob + entropy on CPU ──────────────────────────────────────────────────────────


def _proc_status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def worker(spec: dict) -> dict:
    """One variant, one forward+backward (peak memory and time), one no-grad forward (time)."""
    import torch

    from arborl.kernels import fused_logprob_entropy, materialized_logprob_entropy

    fns: dict[str, Callable] = {
        "materialised": lambda h, w, t: materialized_logprob_entropy(h, w, t, 1.0),
        "fused": lambda h, w, t: fused_logprob_entropy(h, w, t, 1.0, backend="torch"),
        "verl": _verl_fused_torch(),
    }
    fn = fns[spec["variant"]]
    n, d, v = spec["n"], spec["d"], spec["v"]
    torch.manual_seed(spec["seed"])
    # Filled in place: no temporaries that would raise the peak before the measurement.
    hidden = torch.empty(n, d).normal_(0.0, 1.0).requires_grad_()
    weight = torch.empty(v, d).normal_(0.0, 2.0 / math.sqrt(d)).requires_grad_()
    targets = torch.randint(0, v, (n,))
    g_lp, g_ent = torch.randn(n), torch.randn(n)
    # Warm-up on a slice (256 tokens x 4096 vocabulary): loads every kernel and lets the
    # allocator settle, so the measured pass is a steady-state one; its peak is reset below.
    wn, wv = min(n, 256), min(v, 4096)
    lp, ent = fn(hidden[:wn], weight[:wv], targets[:wn] % wv)
    (lp.sum() + ent.sum()).backward()
    hidden.grad = weight.grad = None
    del lp, ent
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed heap back, so none of it hides in rss0

    rss0 = _proc_status_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak-RSS mark to the current RSS
    start = time.perf_counter()
    lp, ent = fn(hidden, weight, targets)
    ((lp * g_lp).sum() + (ent * g_ent).sum()).backward()
    fwd_bwd = time.perf_counter() - start
    peak = _proc_status_kb("VmHWM") - rss0
    del lp, ent
    hidden.grad = weight.grad = None
    with torch.no_grad():
        start = time.perf_counter()
        fn(hidden, weight, targets)
        fwd = time.perf_counter() - start
    return {"peak_bytes": peak * 1024, "fwd_bwd_s": fwd_bwd, "fwd_s": fwd}


def _verl_fused_torch() -> Callable:
    """verl's own chunked torch kernel (``FusedLinearForPPO``, the peer of arborl's fused one):
    the same (log-probs, entropy) of ``hidden @ weight.T`` at temperature 1."""

    def run(hidden, weight, targets):
        from verl.utils.experimental.torch_functional import FusedLinearForPPO

        return FusedLinearForPPO(chunk_size=512)(hidden, weight, targets, 1.0)

    return run


def run_worker(spec: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True, check=False
    )
    if proc.returncode:
        raise RuntimeError(f"worker {spec} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Peak extra memory of the materialised path, in units of one [N, V] float32 tensor: measured
# 5.0-5.1 here (logits, log-softmax, probabilities, and their gradients alive together).
MATERIALISED_PEAK_TENSORS = 5.2


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def _fits(n: int, v: int, d: int) -> bool:
    need = MATERIALISED_PEAK_TENSORS * n * v * 4 + 3 * v * d * 4  # + weight, its grad, slack
    return need < 0.85 * _mem_available()


def _paired(n: int, d: int, v: int, rounds: int, variants: list[str]) -> dict[str, list[dict]]:
    res: dict[str, list[dict]] = defaultdict(list)
    for r in range(rounds):
        order = variants if r % 2 == 0 else variants[::-1]  # alternate who goes first
        for variant in order:
            out = run_worker({"variant": variant, "n": n, "d": d, "v": v, "seed": r})
            res[variant].append(out)
            print(
                f"  N={n} d={d} V={v} round {r} {variant:>12}: peak +{out['peak_bytes'] / GiB:.2f} GiB, "
                f"fwd+bwd {out['fwd_bwd_s']:.2f} s, fwd {out['fwd_s']:.2f} s",
                flush=True,
            )
    return res


def bench_logprob(shapes: list[tuple[int, int, int]], rounds: int) -> str:
    rows = [
        "| N × d × V (fp32, CPU) | variant | peak extra memory | fwd+bwd time | fwd-only time |",
        "|---|---|---|---|---|",
    ]
    summary = [
        "| N × d × V | memory: materialised / fused | time fwd+bwd: fused / materialised (paired, median) "
        "| time fwd-only: fused / materialised |",
        "|---|---|---|---|",
    ]
    notes = []
    peer = [
        "| N × d × V | memory: verl / arborl fused | time fwd+bwd: arborl / verl (paired, median) "
        "| time fwd-only: arborl / verl |",
        "|---|---|---|---|",
    ]
    for n, d, v in shapes:
        runs = [(n, ["materialised", "fused", "verl"])]
        if not _fits(n, v, d):
            # The materialised baseline would not fit in this machine's memory: measure the fused
            # kernel at the requested shape alone, and both at the largest N that fits.
            need = MATERIALISED_PEAK_TENSORS * n * v * 4 / GiB
            notes.append(
                f"materialised at {n} × {d} × {v} not run: it needs ~{need:.0f} GiB "
                f"({MATERIALISED_PEAK_TENSORS} × N·V floats), more than this machine's "
                f"{_mem_available() / GiB:.0f} GiB available"
            )
            m = n
            while m > 1 and not _fits(m, v, d):
                m //= 2
            runs = [(n, ["fused", "verl"]), (m, ["materialised", "fused"])]
        for nn, variants in runs:
            res = _paired(nn, d, v, rounds if len(variants) > 1 else 1, variants)
            for variant in variants:
                rs = res[variant]
                rows.append(
                    f"| {nn} × {d} × {v} | {variant} | {max(x['peak_bytes'] for x in rs) / GiB:.2f} GiB "
                    f"| {statistics.median(x['fwd_bwd_s'] for x in rs):.2f} s "
                    f"| {statistics.median(x['fwd_s'] for x in rs):.2f} s |"
                )
            if "verl" in variants:
                fused, ver = res["fused"], res["verl"]
                peer.append(
                    f"| {nn} × {d} × {v} "
                    f"| {max(x['peak_bytes'] for x in ver) / max(x['peak_bytes'] for x in fused):.2f}× "
                    f"| {statistics.median(f['fwd_bwd_s'] / r['fwd_bwd_s'] for f, r in zip(fused, ver, strict=True)):.2f}× "
                    f"| {statistics.median(f['fwd_s'] / r['fwd_s'] for f, r in zip(fused, ver, strict=True)):.2f}× |"
                )
            if "materialised" not in variants:
                rows.append(f"| {nn} × {d} × {v} | materialised | not run (see note) | | |")
                continue
            fused, mat = res["fused"], res["materialised"]
            mem = max(x["peak_bytes"] for x in mat) / max(x["peak_bytes"] for x in fused)
            t_ratio = statistics.median(
                f["fwd_bwd_s"] / m["fwd_bwd_s"] for f, m in zip(fused, mat, strict=True)
            )
            f_ratio = statistics.median(f["fwd_s"] / m["fwd_s"] for f, m in zip(fused, mat, strict=True))
            summary.append(f"| {nn} × {d} × {v} | {mem:.1f}× less | {t_ratio:.2f}× | {f_ratio:.2f}× |")
    text = (
        "\n".join(rows)
        + "\n\n"
        + "\n".join(summary)
        + "\n\nAgainst verl's own chunked torch kernel:\n\n"
        + "\n".join(peer)
    )
    return text + "".join(f"\n\nNote: {note}." for note in notes)


# ─── log-prob + entropy on GPU (Triton vs chunked torch vs materialised) ────────────────


def _verl_triton() -> Callable:
    """verl's Triton kernel (``verl.utils.kernel.linear_cross_entropy``: CUDA only), as
    (log-probs, entropy): it returns the token log-probs and the entropy per token."""

    def run(hidden, weight, targets):
        from verl.utils.kernel.linear_cross_entropy import linear_cross_entropy

        logp, entropy = linear_cross_entropy(hidden, weight, targets, 1.0, "none")
        return logp, entropy

    return run


def bench_gpu(quick: bool) -> str:
    import torch

    if not torch.cuda.is_available():
        reason = "skipped: no CUDA device on this machine (the Triton kernels were checked under TRITON_INTERPRET=1)"
        print(f"  GPU benchmark {reason}")
        return f"GPU benchmark {reason}."
    from arborl.kernels import fused_logprob_entropy, materialized_logprob_entropy

    shapes = [(2048, 1024, 32000)] if quick else [(8192, 4096, 151936), (8192, 4096, 32000)]
    rows = [
        f"Device: {torch.cuda.get_device_name()}, bfloat16 inputs.\n",
        "| N × d × V | variant | peak extra memory | fwd+bwd time (median of 5) |",
        "|---|---|---|---|",
    ]
    variants = {
        "materialised": lambda h, w, t: materialized_logprob_entropy(h, w, t, 1.0),
        "torch chunked": lambda h, w, t: fused_logprob_entropy(h, w, t, 1.0, backend="torch"),
        "triton": lambda h, w, t: fused_logprob_entropy(h, w, t, 1.0, backend="triton"),
        "verl torch (FusedLinearForPPO)": _verl_fused_torch(),
        "verl triton (linear_cross_entropy)": _verl_triton(),
    }
    for n, d, v in shapes:
        hidden = (torch.randn(n, d, device="cuda") * 1.0).bfloat16().requires_grad_()
        weight = (torch.randn(v, d, device="cuda") * (2.0 / math.sqrt(d))).bfloat16().requires_grad_()
        targets = torch.randint(0, v, (n,), device="cuda")
        for name, fn in variants.items():
            times = []
            for i in range(6):
                hidden.grad = weight.grad = None
                torch.cuda.synchronize()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                start = time.perf_counter()
                lp, ent = fn(hidden, weight, targets)
                (lp.sum() + ent.sum()).backward()
                torch.cuda.synchronize()
                if i:  # the first call compiles the kernels
                    times.append(time.perf_counter() - start)
                peak = torch.cuda.max_memory_allocated() - base
                del lp, ent
            rows.append(
                f"| {n} × {d} × {v} | {name} | {peak / GiB:.2f} GiB | {statistics.median(times) * 1e3:.1f} ms |"
            )
            print("  " + rows[-1], flush=True)
    return "\n".join(rows)


# ─── main ────────────────────────────────────────────────────────────────────────────────


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small shapes (a smoke run, ~1 min)")
    ap.add_argument("--rounds", type=int, default=None, help="paired rounds per log-prob shape")
    ap.add_argument("--only", default="logprob,gpu", help="comma-separated sections")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--shapes", default=None, help="CPU log-prob shapes N,d,V;N,d,V (default: by --quick)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0

    import torch

    sections = {s.strip() for s in args.only.split(",")}
    shapes = (
        [(1024, 256, 32000), (512, 128, 8192)] if args.quick else [(8192, 1024, 151936), (8192, 1024, 32000)]
    )
    if args.shapes:
        shapes = [tuple(int(x) for x in shape.split(",")) for shape in args.shapes.split(";")]
    rounds = args.rounds or (2 if args.quick else 3)
    parts = [
        "# Kernel benchmark\n",
        f"`python bench/bench_kernels.py{' --quick' if args.quick else ''}` on {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"{time.strftime('%Y-%m-%d %H:%M')}. Ratios are within this run; absolute times are noisy "
        "(shared machine).\n",
    ]
    if "logprob" in sections:
        print("log-prob + entropy, CPU:", flush=True)
        parts += [
            "## Fused log-prob + entropy vs materialised logits (CPU)\n",
            bench_logprob(shapes, rounds),
            "",
        ]
    if "gpu" in sections:
        print("log-prob + entropy, GPU:", flush=True)
        parts += ["## Triton vs chunked torch vs materialised (GPU)\n", bench_gpu(args.quick), ""]
    text = "\n".join(parts)
    print("\n" + text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
