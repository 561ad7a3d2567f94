"""The gateway's cost per call: the `openai` client through the gateway against the engine
called directly with the same prompt ids, in the same process and run.

The workload is one harness episode: a 6-turn chat (each reply 32 tokens, ``ignore_eos``),
over the tiny model's transformers engine with one torch thread. Each round runs the
episode through the gateway (HTTP on loopback, chat-template rendering, splicing,
recording), then replays the very prompt ids the engine got into `engine.generate` with
the same sampling. Rounds alternate; the table gives the median wall time per call and the
ratio gateway / direct, plus the overhead in milliseconds.

Then throughput under concurrency: N episodes at once (1, 8 and 32) through one gateway
(`openai.AsyncOpenAI`, one client an episode), against the same N episodes' prompt ids
replayed concurrently into `engine.generate` (the engine batches concurrent calls either
way): generated tokens per second and the ratio. Writes bench/results/gateway.md.

    python bench/bench_gateway.py [--quick] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import subprocess
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


async def _client_episodes(url: str, eids: list[str], turns: int, new: int) -> tuple[float, int]:
    """The harness side: one `AsyncOpenAI` client an episode, all episodes at once; the clients
    are made before the clock starts (their TLS setup is the harness's cost, not the gateway's)."""
    clients = [openai.AsyncOpenAI(base_url=f"{url}/e/{e}/v1", api_key="EMPTY", max_retries=0) for e in eids]

    async def episode(c: openai.AsyncOpenAI, k0: int) -> int:
        messages = [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": f"Begin {k0}."},
        ]
        tokens = 0
        for k in range(turns):
            r = await c.chat.completions.create(
                model="tiny",
                messages=messages,  # type: ignore[arg-type]
                max_tokens=new,
                seed=k0 * 100 + k,
                extra_body={"ignore_eos": True},
            )
            tokens += r.usage.completion_tokens if r.usage else 0
            messages += [
                r.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": f"Step {k}."},
            ]
        return tokens

    start = time.perf_counter()
    counts = await asyncio.gather(*(episode(c, k) for k, c in enumerate(clients)))
    seconds = time.perf_counter() - start
    for c in clients:
        await c.close()
    return seconds, sum(counts)


def concurrent_gateway(
    gw: Gateway, url: str, episodes: int, turns: int, new: int
) -> tuple[float, int, list[list[list[int]]]]:
    """`episodes` harness episodes at once through the gateway, driven from another process as a
    harness is (so its client work does not share this process's interpreter with the gateway
    and the decode thread): (seconds, tokens generated, each episode's prompts in order)."""
    eids = [gw.open_episode() for _ in range(episodes)]
    out = subprocess.run(
        [sys.executable, __file__, "--client", url, "--turns", str(turns), "--new", str(new), *eids],
        check=True,
        capture_output=True,
        text=True,
    )
    seconds, tokens = json.loads(out.stdout.strip().splitlines()[-1])
    lanes = []
    for eid in eids:
        (traj,) = gw.end_episode(eid, reward=0.0)
        assert len(traj.turns) == turns, "each episode must stay one segment"
        prompt, prompts = list(traj.prompt_ids), []
        for turn in traj.turns:
            prompts.append(list(prompt))
            prompt += turn.response_ids + turn.observation_ids
        lanes.append(prompts)
    return seconds, tokens, lanes


def concurrent_direct(engine: InferenceEngine, lanes: list[list[list[int]]], new: int) -> float:
    """The same episodes' prompts into `engine.generate`, the episodes at once and each one's
    turns in order, with the same seeds: seconds."""

    async def lane(ps: list[list[int]], k0: int) -> None:
        for k, p in enumerate(ps):
            await engine.generate([p], SamplingParams(max_new_tokens=new, ignore_eos=True, seed=k0 * 100 + k))

    async def run() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(lane(ps, k) for k, ps in enumerate(lanes)))
        return time.perf_counter() - start

    return asyncio.run(run())


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
    ap.add_argument("--client", default=None, help=argparse.SUPPRESS)  # the harness process
    ap.add_argument("--turns", type=int, default=6, help=argparse.SUPPRESS)
    ap.add_argument("--new", type=int, default=32, help=argparse.SUPPRESS)
    ap.add_argument("eids", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        print(json.dumps(asyncio.run(_client_episodes(args.client, args.eids, args.turns, args.new))))
        return
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
        rows = []
        for n in (1, 4) if args.quick else (1, 8, 32):
            tps_via, tps_plain = [], []
            for _ in range(max(1, rounds // 2)):
                seconds, tokens, lanes = concurrent_gateway(gw, url, n, turns, new)
                tps_via.append(tokens / seconds)
                tps_plain.append(tokens / concurrent_direct(engine.inner, lanes, new))
            rows.append((n, statistics.median(tps_plain), statistics.median(tps_via)))
    g, d = statistics.median(via), statistics.median(plain)
    table = (
        "# Gateway overhead per call\n\n"
        f"{platform.processor() or platform.machine()}, tiny model, transformers engine (1 torch thread), "
        f"{turns}-turn chat, {new} new tokens per call, median of {rounds} alternating rounds.\n\n"
        "| path | ms per call |\n|---|---|\n"
        f"| engine.generate directly | {d * 1000:.1f} |\n"
        f"| openai client → gateway → engine | {g * 1000:.1f} |\n\n"
        f"**ratio gateway / direct: {g / d:.2f}x**; overhead {1000 * (g - d):.1f} ms per call "
        "(HTTP on loopback, template rendering, splicing, recording).\n\n"
        f"Concurrent episodes through one gateway ({turns} turns each, {new} tokens a reply; median of "
        f"{max(1, rounds // 2)} alternating rounds), generated tokens per second:\n\n"
        "| episodes at once | engine.generate directly | through the gateway | gateway / direct |\n"
        "|---:|---:|---:|---:|\n"
        + "".join(f"| {n} | {d_:.0f} | {g_:.0f} | {g_ / d_:.2f}x |\n" for n, d_, g_ in rows)
    )
    print(table)
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(table)


if __name__ == "__main__":
    sys.exit(main())
