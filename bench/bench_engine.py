"""The transformers engine's decode loop: `sdpa_gqa` attention against transformers' `sdpa`.

The workload is one decode batch as the trainer makes them: 64 rows whose prompts share a
300-token prefix (system prompt, tool list) and differ after it (20-120 tokens), sampled at
temperature 1 for 64 new tokens each. Both attention implementations run in alternating
rounds in this process, on the same engine code (continuous batching, the in-place KV
cache), with one torch thread as in the trainer's async mode. Reports decode tokens/s and
the ratio (median of the rounds). Writes bench/results/engine.md.

    python bench/bench_engine.py [--quick] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from arborl.agents.engines import HFEngineConfig, SamplingParams
from arborl.agents.engines.hf import HFEngine
from arborl.agents.tiny import TinyModelConfig, ensure_tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trainer import main_job_model

RESULTS = Path(__file__).resolve().parent / "results" / "engine.md"


def workload(vocab: int, rows: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    shared = [rng.randrange(vocab) for _ in range(300)]
    return [shared + [rng.randrange(vocab) for _ in range(rng.randrange(20, 120))] for _ in range(rows)]


async def timed(engine: HFEngine, prompts: list[list[int]], new: int) -> tuple[float, int]:
    sampling = SamplingParams(temperature=1.0, max_new_tokens=new, ignore_eos=True, seed=1)
    start = time.perf_counter()
    out = await engine.generate(prompts, sampling)
    return time.perf_counter() - start, sum(len(g.token_ids) for g in out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rows, new = (16, 16) if args.quick else (64, 64)
    rounds = 2 if args.quick else args.rounds
    model = str(ensure_tiny_model(config=TinyModelConfig(**main_job_model())))
    impls = ("sdpa", "sdpa_gqa")
    engines = {
        a: HFEngine(HFEngineConfig(model=model, attn_implementation=a, torch_threads=1)) for a in impls
    }
    prompts = workload(engines["sdpa"].vocab_size, rows)
    secs: dict[str, list[float]] = {a: [] for a in impls}
    tokens = 0

    async def run() -> None:
        nonlocal tokens
        for a in impls:  # warm-up
            await timed(engines[a], prompts[:4], 4)
        for r in range(rounds):
            for a in impls if r % 2 == 0 else impls[::-1]:
                dt, tokens = await timed(engines[a], prompts, new)
                secs[a].append(dt)
        for e in engines.values():
            await e.close()

    asyncio.run(run())
    med = {a: statistics.median(s) for a, s in secs.items()}
    table = "\n".join(
        f"| {a} | {med[a]:.2f} | {tokens / med[a]:.0f} | **{med['sdpa'] / med[a]:.2f}×** |" for a in impls
    )
    text = f"""# Engine benchmark: grouped-query attention in the decode loop

`python bench/bench_engine.py{" --quick" if args.quick else ""}` on {platform.node()} \
({os.cpu_count()} cores, torch {torch.__version__}, 1 torch thread), \
{time.strftime("%Y-%m-%d %H:%M")}. The main job's tiny model (hidden 128, 4 layers, 4 query heads on 2 \
key/value heads); {rows} rows sharing a 300-token prefix plus 20-120 tokens of their own, \
{new} tokens each at temperature 1; median of {rounds} alternating rounds (after the first, the \
engine's cache of recently prefilled rows serves all but each row's last prompt token).

| attention | seconds | tokens/s | vs sdpa |
|---|---:|---:|---:|
{table}

`sdpa` is transformers' own: with an attention mask (a left-padded batch, every decode step)
it copies each key/value head once per query head in its group (`repeat_kv`) before SDPA.
`sdpa_gqa` (`arborl.kernels.attention`) hands SDPA the grouped heads with `enable_gqa=True`,
which on CPU takes the mask and reads them in place; same logits
(tests/kernels/test_attention.py).
"""
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
