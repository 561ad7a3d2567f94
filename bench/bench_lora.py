"""LoRA against full weights: the learner's step, the push to the engine, what each holds.

For each model size the same base weights are trained two ways in this process, in
alternating rounds: full weights (AdamW over every parameter, the state dict pushed) and a
LoRA adapter (`model.lora`, every linear layer, AdamW over the adapter, the adapter pushed).
The learner's step is `Learner.ppo_update` on one fixed batch of random token rows; the push
is `push_policy` into a transformers engine (`HFEngine.for_trainer`, the trainer's own path),
timed until the engine has the weights. Reports medians of the rounds and LoRA / full ratios
measured in the same run, the bytes each push sent, and the bytes of AdamW's state (read
from the optimiser after the steps). Writes bench/results/lora.md.

    python bench/bench_lora.py [--quick] [--rounds 5] [--rank 8]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from arborl.agents import Trajectory, Turn
from arborl.agents.engines import TrainerPolicy
from arborl.agents.engines.hf import HFEngine
from arborl.trainer.dataproto import trajectories_to_dataproto
from arborl.trainer.local.learner import Learner, LearnerConfig
from arborl.trainer.local.lora import LoraSettings, attach_lora, push_policy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trainer import main_job_model

RESULTS = Path(__file__).resolve().parent / "results" / "lora.md"
LARGER = {"hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 8}


def build(sizes: dict[str, Any]) -> Any:
    """A Qwen2 causal LM of the given sizes, random weights (no tokenizer needed here)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")
    cfg = {k: sizes[k] for k in keys if k in sizes}
    heads = max(2, sizes["hidden_size"] // 32)  # head_dim 32, as the tiny model
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            **cfg, num_attention_heads=heads, num_key_value_heads=heads // 2, tie_word_embeddings=True
        )
    )
    return model.to(torch.float32)


def batch(vocab: int, rows: int, prompt: int, response: int) -> Any:
    g = torch.Generator().manual_seed(1)
    trajs = [
        Trajectory(
            torch.randint(vocab, (prompt,), generator=g).tolist(),
            [Turn(torch.randint(vocab, (response,), generator=g).tolist(), [-1.0] * response)],
            group_id=str(i // 4),
        )
        for i in range(rows)
    ]
    data = trajectories_to_dataproto(trajs, pad_token_id=0)
    adv = torch.randn(rows, 1, generator=g)
    data.batch["advantages"] = adv * data.batch["response_mask"]
    return data


def optimizer_bytes(learner: Learner) -> int:
    return sum(
        t.numel() * t.element_size()
        for state in learner.optimizer.state.values()
        for t in state.values()
        if isinstance(t, torch.Tensor)
    )


async def measure(sizes: dict[str, Any], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    base = build(sizes)
    data = batch(sizes["vocab_size"], args.rows, args.prompt, args.response)
    setups: dict[str, dict[str, Any]] = {}
    for mode in ("full", "lora"):
        model = copy.deepcopy(base)
        peft = attach_lora(model, LoraSettings(r=args.rank, alpha=2 * args.rank)) if mode == "lora" else None
        learner = Learner(model, LearnerConfig(lr=1e-4 if peft else 1e-5, micro_batch_size=args.rows))
        policy = TrainerPolicy("bench", "bench", "float32", "cpu", model, lora_rank=args.rank if peft else 0)
        engine = HFEngine.for_trainer(policy, {})
        setups[mode] = {"model": model, "peft": peft, "learner": learner, "engine": engine}
    out: dict[str, dict[str, Any]] = {m: {"step_s": [], "push_s": [], "bytes": 0} for m in setups}

    async def once(mode: str) -> None:
        s = setups[mode]
        data.batch["rollout_log_probs"] = torch.full(data.batch["responses"].shape, -1.0)
        start = time.perf_counter()
        s["learner"].ppo_update(data)
        mid = time.perf_counter()
        out[mode]["bytes"] = await push_policy(s["engine"], s["model"], s["peft"])
        end = time.perf_counter()
        out[mode]["step_s"].append(mid - start)
        out[mode]["push_s"].append(end - mid)

    for mode in setups:  # warm-up (allocations, AdamW's state)
        await once(mode)
        out[mode]["step_s"].clear()
        out[mode]["push_s"].clear()
    for r in range(args.rounds):
        for mode in ("full", "lora") if r % 2 == 0 else ("lora", "full"):
            await once(mode)
    for mode, s in setups.items():
        named = list(s["model"].named_parameters())
        out[mode]["params"] = sum(p.numel() for n, p in named if ".lora_" not in n)
        out[mode]["trainable"] = sum(p.numel() for p in s["model"].parameters() if p.requires_grad)
        out[mode]["optimizer_bytes"] = optimizer_bytes(s["learner"])
        await s["engine"].close()
    return out


def rows_of(name: str, r: dict[str, dict[str, Any]]) -> list[str]:
    med = {m: {k: statistics.median(r[m][k]) for k in ("step_s", "push_s")} for m in r}
    full, lora = r["full"], r["lora"]
    cells = [
        f"{med['full']['step_s']:.3f} / {med['lora']['step_s']:.3f}",
        f"**{med['lora']['step_s'] / med['full']['step_s']:.2f}×**",
        f"{med['full']['push_s'] * 1e3:.1f} / {med['lora']['push_s'] * 1e3:.1f}",
        f"**{med['lora']['push_s'] / med['full']['push_s']:.3f}×**",
        f"{full['bytes'] / 2**20:.2f} MiB / {lora['bytes'] / 2**10:.1f} KiB",
        f"**{lora['bytes'] / full['bytes']:.4f}×**",
        f"{full['optimizer_bytes'] / 2**20:.2f} MiB / {lora['optimizer_bytes'] / 2**10:.1f} KiB",
    ]
    return [
        f"| {name} ({full['params'] / 1e6:.2f} M params; LoRA trains {lora['trainable']:,}) | "
        + " | ".join(cells)
        + " |"
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    args.rows, args.prompt, args.response = (4, 32, 16) if args.quick else (16, 192, 64)
    args.rounds = 2 if args.quick else args.rounds
    torch.set_num_threads(args.threads)
    job = main_job_model()
    sizes = {"the main job's tiny model": job, "a larger one": {**job, **LARGER}}
    if args.quick:
        sizes = {"the main job's tiny model": job}
    lines: list[str] = []
    for name, s in sizes.items():
        lines += rows_of(name, asyncio.run(measure(s, args)))
    table = "\n".join(lines)
    text = f"""# LoRA against full weights: learner step, push, optimiser state

`python bench/bench_lora.py{" --quick" if args.quick else ""}` on {platform.node()} \
({os.cpu_count()} cores, torch {torch.__version__}, {args.threads} torch thread(s)), \
{time.strftime("%Y-%m-%d %H:%M")}. LoRA r={args.rank}, alpha={2 * args.rank}, every linear layer \
(`model.lora.targets=[all-linear]`); float32. One PPO update (`Learner.ppo_update`, one \
optimiser step) on {args.rows} rows of {args.prompt} prompt + {args.response} response tokens, \
then the push into a transformers engine (`push_policy`: the state dict, or the adapter); \
medians of {args.rounds} alternating rounds; each cell full / LoRA, ratios LoRA / full.

| model | step s | step ratio | push ms | push ratio | bytes per push | bytes ratio | AdamW state |
|---|---:|---:|---:|---:|---:|---:|---:|
{table}

The step still runs the whole forward and backward through the frozen base (activations'
gradients are needed below every adapted layer); what LoRA saves is the weight gradients,
AdamW's state and update of the base weights, and nearly all of the push.
"""
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
