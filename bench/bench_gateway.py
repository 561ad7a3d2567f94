"""The gateway's cost per call: the `openai` client through the gateway against the engine
called directly with the same prompt ids, in the same process and run.

The workload is one harness episode: a 6-turn chat (each reply 32 tokens, ``ignore_eos``),
over the tiny model's transformers engine with one torch thread. Each round runs the
episode through the gateway (HTTP on loopback, chat-template rendering, splicing,
recording), then replays the very prompt ids the engine got into `engine.generate` with
the same sampling. Rounds alternate; the table gives the median wall time per call and the
ratio gateway / direct, plus the overhead in milliseconds. Writes bench/results/gateway.md.

    python bench/bench_gateway.py [--quick] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from pathlib import Path

import openai
from transformers import AutoTokenizer

from arborl.agents.engines import HFEngineConfig, InferenceEngine, SamplingParams, make_engine
from arborl.agents.gateway import Gateway
from arborl.agents.gateway.serve import serving
from arborl.agents.tiny import ensure_tiny_model

RESULTS = Path(__file__).resolve().parent / "results" / "gateway.md"


class Prompts(InferenceEngine):
    """The engine, keeping the prompts it was given (to replay them directly)."""

    def __init__(self, inner: InferenceEngine) -> None:
        self.inner, self.prompts = inner, []

    async def generate(self, prompts, sampling):  # type: ignore[no-untyped-def]
        self.prompts += [list(p) for p in prompts]
        return await self.inner.generate(prompts, sampling)

    async def update_weights(self, weights):  # type: ignore[no-untyped-def]
        await self.inner.update_weights(weights)

    async def close(self) -> None:
        await self.inner.close()


def through_gateway(gw: Gateway, url: str, turns: int, new: int) -> tuple[float, int]:
    eid = gw.open_episode()
    c = openai.OpenAI(base_url=f"{url}/e/{eid}/v1", api_key="EMPTY", max_retries=0)
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Begin."}]
    start = time.perf_counter()
    for k in range(turns):
        r = c.chat.completions.create(
            model="tiny", messages=messages, max_tokens=new, seed=k, extra_body={"ignore_eos": True}
        )
        messages += [
            r.choices[0].message.model_dump(exclude_none=True),
            {"role": "user", "content": f"Step {k}."},
        ]
    elapsed = time.perf_counter() - start
    (traj,) = gw.end_episode(eid, reward=0.0)
    assert len(traj.turns) == turns, "the episode must stay one segment"
    return elapsed / turns, turns


def direct(engine: InferenceEngine, prompts: list[list[int]], new: int) -> float:
    async def run() -> float:
        start = time.perf_counter()
        for k, p in enumerate(prompts):
            await engine.generate([p], SamplingParams(max_new_tokens=new, ignore_eos=True, seed=k))
        return (time.perf_counter() - start) / len(prompts)

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rounds, turns, new = (2, 3, 16) if args.quick else (args.rounds, 6, 32)
    path = ensure_tiny_model()
    tok = AutoTokenizer.from_pretrained(path)
    engine = Prompts(make_engine(HFEngineConfig(model=str(path), torch_threads=1)))
    gw = Gateway(engine, tok)
    via, plain = [], []
    with serving(gw) as url:
        through_gateway(gw, url, turns, new)  # warm-up: first HTTP connection, first decode
        for _ in range(rounds):
            engine.prompts = []
            per_call, _ = through_gateway(gw, url, turns, new)
            via.append(per_call)
            plain.append(direct(engine.inner, list(engine.prompts), new))
    g, d = statistics.median(via), statistics.median(plain)
    table = (
        "# Gateway overhead per call\n\n"
        f"{platform.processor() or platform.machine()}, tiny model, transformers engine (1 torch thread), "
        f"{turns}-turn chat, {new} new tokens per call, median of {rounds} alternating rounds.\n\n"
        "| path | ms per call |\n|---|---|\n"
        f"| engine.generate directly | {d * 1000:.1f} |\n"
        f"| openai client → gateway → engine | {g * 1000:.1f} |\n\n"
        f"**ratio gateway / direct: {g / d:.2f}x**; overhead {1000 * (g - d):.1f} ms per call "
        "(HTTP on loopback, template rendering, splicing, recording).\n"
    )
    print(table)
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(table)


if __name__ == "__main__":
    sys.exit(main())
