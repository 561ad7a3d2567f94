"""Image turns against text turns of the same task (issue 52 §8): tokens, time, bytes.

The tiny VLM (`arborl.agents.tiny_vlm`, Qwen2-VL architecture) plays the same Sokoban rooms
twice per round, once shown the room as verl-agent's text grid (`obs_type="text"`) and once as
its picture (`obs_type="image"`), in alternating rounds of one process, each round on fresh
rooms. Per mode: prompt tokens of the first observation, tokens per picture (the processor's
placeholder tokens) and its pixel_values bytes; the rollout (the agent's episodes through the
transformers engine: generation, the env, the context) per episode and per generated token;
the learner's step (`Learner.ppo_update` on the episodes' batch: a forward with the pixels
and the backward, the tower frozen as `model.freeze_vision` defaults) per step and per token;
the stored Parquet bytes per turn. Ratios image / text are per round, then medians.

Also the tokens a picture costs at other sizes under the processor's own resizing (a desktop
screenshot is not a 96-pixel room), from `image_grid_thw` alone, no model run; and the peak
memory of one round per mode, each in a fresh child process (`--memory-child`): the resident
set sampled every 2 ms from /proc during the round's rollout and learner step, above what the
process held once the model, engine and processor were loaded (CPU torch has no caching
allocator, so the resident set follows the tensors).

    python bench/bench_vision.py [--quick] [--rounds 3] [--episodes 8] [--turns 3]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch

import arborl.envs  # noqa: F401 - registers the envs
from arborl.agents import Agent, AgentConfig
from arborl.agents.engines import HFEngineConfig, SamplingParams, make_engine
from arborl.agents.tiny_vlm import ensure_tiny_vlm
from arborl.agents.trajectory import write_trajectories
from arborl.agents.vision import load_processor, rope_positions
from arborl.tasks import get_suite
from arborl.trainer.dataproto import trajectories_to_dataproto
from arborl.trainer.local.learner import Learner, LearnerConfig
from arborl.trainer.local.policy import prepare_vision

RESULTS = Path(__file__).resolve().parent / "results" / "vision-turns.md"
MODES = ("text", "image")
#: (label, height, width) of the pictures costed from the processor alone.
SIZES = (("Sokoban room, 6x6 cells", 96, 96), ("320x240", 240, 320), ("VGA", 480, 640), ("720p", 720, 1280))


def picture_tokens(image_processor: Any, height: int, width: int) -> tuple[int, int]:
    """(placeholder tokens, pixel_values bytes) of one picture of this size."""
    from PIL import Image

    out = image_processor(images=[Image.new("RGB", (width, height))], return_tensors="np")
    grid = np.asarray(out["image_grid_thw"])
    tokens = int(np.prod(grid, axis=1).sum()) // image_processor.merge_size**2
    return tokens, np.asarray(out["pixel_values"], dtype=np.float32).nbytes


def qwen2_vl_image_processor() -> Any:
    """transformers' Qwen2-VL image processor at its class defaults (patch 14, merge 2,
    max_pixels 28·28·1280), no hub: what a real Qwen2-VL costs per picture, give or take its
    checkpoint's own max_pixels."""
    from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as pil

    return pil.Qwen2VLImageProcessorPil()


async def rollout(engine: Any, processor: Any, tasks: list[Any], obs_type: str, args: Any, seed: int) -> Any:
    config = AgentConfig(
        max_turns=args.turns,
        max_new_tokens=args.new_tokens,
        max_context_tokens=4096,
        sampling=SamplingParams(temperature=1.0, seed=seed),
    )
    agent = Agent(engine, processor, config)
    return await agent.run_episodes(
        lambda: gymnasium.make("arborl/Sokoban-v0", obs_type=obs_type), tasks, concurrency=len(tasks)
    )


def one_round(
    model: Any,
    engine: Any,
    processor: Any,
    rope: Any,
    tasks: list[Any],
    args: Any,
    seed: int,
    modes: tuple[str, ...] = MODES,
) -> dict:
    out: dict[str, dict[str, float]] = {}
    for obs_type in modes if seed % 2 == 0 else modes[::-1]:  # each mode first every other round
        t0 = time.perf_counter()
        episodes = asyncio.run(rollout(engine, processor, tasks, obs_type, args, seed))
        rollout_s = time.perf_counter() - t0
        trajs = [e.trajectory for e in episodes]
        turns = sum(len(t.turns) for t in trajs)
        generated = sum(t.num_response_tokens for t in trajs)
        data = trajectories_to_dataproto(trajs, processor.tokenizer.pad_token_id, rope_index=rope)
        data.batch["advantages"] = (
            torch.linspace(-1, 1, len(trajs)).unsqueeze(1).expand_as(data.batch["responses"])
        )
        learner = Learner(model, LearnerConfig(lr=1e-6, micro_batch_size=args.micro_batch))
        t0 = time.perf_counter()
        learner.ppo_update(data)
        learner_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "t.parquet"
            write_trajectories(path, trajs)
            stored = path.stat().st_size
        first = trajs[0]
        out[obs_type] = {
            "prompt_tokens": float(len(first.prompt_ids)),
            "tokens": float(sum(len(t.token_ids()) for t in trajs)),
            "generated": float(generated),
            "turns": float(turns),
            "rollout_s": rollout_s,
            "rollout_ms_per_generated": 1000 * rollout_s / max(1, generated),
            "learner_s": learner_s,
            "learner_ms_per_token": 1000 * learner_s / float(data.batch["attention_mask"].sum()),
            "stored_per_turn": stored / max(1, turns),
        }
    return out


def rss_bytes() -> int:
    """This process's resident set now (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRss:
    """The highest resident set while the block runs, sampled every `every` seconds."""

    def __init__(self, every: float = 0.002) -> None:
        self.every, self.peak, self._stop = every, 0, threading.Event()

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(self.every)

    def __enter__(self) -> PeakRss:
        self.peak = rss_bytes()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def memory_child(args: Any) -> None:
    """One round of `args.memory_child`'s mode in this (fresh) process; prints its peak memory
    above the loaded state as JSON."""
    model, engine, processor, rope = load(args)
    base = rss_bytes()
    mode = args.memory_child
    with PeakRss() as peak:
        one_round(
            model,
            engine,
            processor,
            rope,
            get_suite("sokoban-6x6").tasks()[: args.episodes],
            args,
            0,
            (mode,),
        )
    asyncio.run(engine.close())
    print(json.dumps({"mode": mode, "base": base, "peak_above": peak.peak - base}))


def memory_rows(args: Any, repeats: int = 2) -> dict[str, list[float]]:
    """Each mode's peak round memory above the loaded state (bytes), `repeats` fresh children a
    mode, the modes alternating."""
    out: dict[str, list[float]] = {m: [] for m in MODES}
    flags = [
        "--episodes",
        str(args.episodes),
        "--turns",
        str(args.turns),
        "--new-tokens",
        str(args.new_tokens),
    ]
    flags += ["--micro-batch", str(args.micro_batch)]
    for r in range(repeats):
        for mode in MODES if r % 2 == 0 else MODES[::-1]:
            run = subprocess.run(
                [sys.executable, __file__, "--memory-child", mode, *flags],
                capture_output=True,
                text=True,
                check=True,
            )
            out[mode].append(float(json.loads(run.stdout.strip().splitlines()[-1])["peak_above"]))
    return out


def table(
    rounds: list[dict], processor: Any, args: Any, elapsed: float, memory: dict[str, list[float]]
) -> str:
    def med(mode: str, key: str) -> float:
        return statistics.median(r[mode][key] for r in rounds)

    def ratio(key: str) -> float:
        return statistics.median(r["image"][key] / r["text"][key] for r in rounds)

    rows = [
        ("prompt tokens (first observation)", "prompt_tokens", "{:.0f}"),
        ("tokens per batch (all rows)", "tokens", "{:.0f}"),
        ("turns per batch", "turns", "{:.0f}"),
        ("generated tokens per batch", "generated", "{:.0f}"),
        ("rollout s per batch", "rollout_s", "{:.2f}"),
        ("rollout ms per generated token", "rollout_ms_per_generated", "{:.1f}"),
        ("learner step s (forward + backward + AdamW)", "learner_s", "{:.2f}"),
        ("learner ms per batch token", "learner_ms_per_token", "{:.3f}"),
        ("stored Parquet bytes per turn", "stored_per_turn", "{:.0f}"),
    ]
    body = "\n".join(
        f"| {label} | {fmt.format(med('text', key))} | {fmt.format(med('image', key))} | **{ratio(key):.2f}×** |"
        for label, key, fmt in rows
    )
    mib = {m: statistics.median(v) / 2**20 for m, v in memory.items()}
    body += (
        f"\n| peak memory of a round above the loaded model, MiB (fresh process, median of "
        f"{len(memory['text'])}) | {mib['text']:.0f} | {mib['image']:.0f} | **{mib['image'] / mib['text']:.2f}×** |"
    )
    real = qwen2_vl_image_processor()
    sizes = "\n".join(
        f"| {label} ({w}×{h}) | {t} | {b / 1024:.0f} KiB | {rt} | {rb / 1024:.0f} KiB |"
        for label, h, w in SIZES
        for (t, b), (rt, rb) in [
            (picture_tokens(processor.image_processor, h, w), picture_tokens(real, h, w))
        ]
    )
    return f"""# Image turns against text turns (issue 52 §8)

`{" ".join(["python", "bench/bench_vision.py", *sys.argv[1:]])}` on {platform.node()} ({os.cpu_count()} \
cores), {time.strftime("%Y-%m-%d %H:%M")}, {elapsed:.0f} s. The tiny VLM (Qwen2-VL architecture, \
random weights; `arborl.agents.tiny_vlm`) on {args.episodes} `sokoban-6x6` rooms a round, each \
played as a text grid and as a picture (`obs_type`), up to {args.turns} turns of at most \
{args.new_tokens} sampled tokens, {args.rounds} rounds (after one not counted) on fresh rooms, each \
mode first every other round; \
the learner's step is one `ppo_update` on the round's episodes (micro-batch {args.micro_batch}, \
tower frozen). Medians of the rounds; the ratio is image / text per round, then the median.

| per round | text | image | image / text |
|---|---:|---:|---:|
{body}

Tokens one picture costs (the processor's resizing and 2×2 patch merge) and its pixel_values
(float32), under the tiny VLM's processor (patch 4, so that a 96-pixel room has detail) and
under transformers' Qwen2-VL image processor at its defaults (patch 14):

| picture | tiny VLM tokens | pixel_values | Qwen2-VL tokens | pixel_values |
|---|---:|---:|---:|---:|
{sizes}
"""


def load(args: Any) -> tuple[Any, Any, Any, Any]:
    """The tiny VLM (learner copy, tower frozen), its engine, its processor and its positions."""
    torch.manual_seed(0)
    path = ensure_tiny_vlm()
    processor = load_processor(path)
    from transformers import Qwen2VLForConditionalGeneration

    model = Qwen2VLForConditionalGeneration.from_pretrained(path, dtype=torch.float32)
    rope = functools.partial(rope_positions, model)
    prepare_vision(model, True)
    engine = make_engine(HFEngineConfig(model=str(path)))
    return model, engine, processor, rope


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--memory-child", choices=MODES, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.episodes, args.turns = 1, 2, 2
    if args.memory_child:
        memory_child(args)
        return
    t_start = time.time()
    model, engine, processor, rope = load(args)
    rooms = get_suite("sokoban-6x6").tasks()
    # a round not counted: the first calls of each path (allocations, the processor's first
    # image) would otherwise fall on whichever mode runs first
    one_round(model, engine, processor, rope, rooms[-2:], args, seed=99)
    rounds = []
    for r in range(args.rounds):
        tasks = rooms[r * args.episodes : (r + 1) * args.episodes]
        rounds.append(one_round(model, engine, processor, rope, tasks, args, seed=r))
        print(
            f"round {r + 1}/{args.rounds}: "
            + ", ".join(
                f"{m} rollout {rounds[-1][m]['rollout_s']:.1f} s learner {rounds[-1][m]['learner_s']:.2f} s"
                for m in MODES
            ),
            flush=True,
        )
    asyncio.run(engine.close())
    memory = memory_rows(args, repeats=1 if args.quick else 2)
    text = table(rounds, processor, args, time.time() - t_start, memory)
    out = RESULTS.with_name("vision-turns-quick.md") if args.quick else RESULTS
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
