"""Tree rollouts vs independent sampling, on the tiny model and a real env (the code env in
Docker sandboxes; bubblewrap where no engine runs).

1. Tokens generated per leaf trajectory at the same number of leaves (target: >= 50 % fewer
   with trees), and rollout throughput (leaf trajectories per minute) for both, measured in
   the same run.
2. Forking the env at a turn boundary: replaying the prefix's actions in a fresh env (what
   `Agent.fork` does) against copying the sandbox's files into a fresh env (download the
   workspace as tar, upload it), both starting from a fresh env's reset.

    python bench/bench_tree.py [--quick] [--tasks 4] [--leaves 8]

Writes bench/results/tree.md.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import platform
import statistics
import tarfile
import time
from pathlib import Path

import gymnasium

import arborl.envs  # noqa: F401 - registers arborl/Code-v0
from arborl.agents import Agent, AgentConfig
from arborl.agents.engines import HFEngineConfig, SamplingParams, make_engine
from arborl.agents.tiny import ensure_tiny_model
from arborl.agents.tree_rollout import TreeConfig, TreeRollout
from arborl.sandboxes import make_backend
from arborl.tasks import CodeTask

RESULTS = Path(__file__).with_name("results") / "tree.md"


def task(i: int) -> CodeTask:
    repo = {
        "calc.py": "def add(a, b):\n    return a - b\n",
        "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
        "notes.txt": f"task {i}\n" + "filler line\n" * 200,
    }
    return CodeTask(id=f"bench-{i}", problem_statement="Fix add() so the tests pass.", repo_files=repo)


async def independent(agent: Agent, make_env, tasks, leaves: int) -> tuple[int, int, float]:
    start = time.perf_counter()

    async def one(t):
        env = make_env()
        try:
            return await agent.run_episode(env, t)
        finally:
            await env.unwrapped.aclose()

    eps = await asyncio.gather(*(one(t) for t in tasks for _ in range(leaves)))
    tokens = sum(e.trajectory.num_response_tokens for e in eps)
    return tokens, len(eps), time.perf_counter() - start


async def trees(agent: Agent, make_env, tasks, cfg: TreeConfig) -> tuple[int, int, float, dict]:
    envs: list[gymnasium.Env] = []

    def factory():
        envs.append(make_env())
        return envs[-1]

    start = time.perf_counter()
    results = await asyncio.gather(*(TreeRollout(agent, factory, cfg).run(t) for t in tasks))
    wall = time.perf_counter() - start
    for env in envs:
        await env.unwrapped.aclose()
    forks = {k: sum(r.forks[k] for r in results) for k in ("turn", "token", "failed")}
    return sum(r.generated_tokens for r in results), sum(len(r.leaves) for r in results), wall, forks


async def fork_costs(agent: Agent, make_env, rounds: int) -> tuple[list[float], list[float]]:
    """Seconds to rebuild the env state after 3 turns: replay vs copying the workspace."""
    replay, copy = [], []
    src = make_env()
    state = await agent.start(src, task(0))
    for _ in range(3):
        if not state.done:
            await agent.step(state)
    snap = agent.snapshot(state)
    for _ in range(rounds):
        dst = make_env()
        t0 = time.perf_counter()
        forked = await agent.fork(snap, dst)
        replay.append(time.perf_counter() - t0)
        await agent.finish(forked)
        await dst.unwrapped.aclose()

        dst = make_env()
        t0 = time.perf_counter()
        await dst.unwrapped.areset(options={"task": task(0)})
        data = await src.unwrapped.sandbox.download("/workspace")
        files = {}
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for m in tar.getmembers():
                if m.isfile():
                    files[m.name.split("/", 1)[-1]] = tar.extractfile(m).read()
        await dst.unwrapped.sandbox.upload(files, "/workspace")
        copy.append(time.perf_counter() - t0)
        await dst.unwrapped.aclose()
    await src.unwrapped.aclose()
    return replay, copy


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--leaves", type=int, default=8)
    args = ap.parse_args()
    n_tasks = 2 if args.quick else args.tasks
    backend = make_backend({"type": "auto"})
    make_env = lambda: gymnasium.make("arborl/Code-v0", backend=backend)  # noqa: E731
    engine = make_engine(HFEngineConfig(model=str(ensure_tiny_model())))
    cfg = AgentConfig(max_turns=4, max_new_tokens=48, sampling=SamplingParams(temperature=1.0))
    agent = Agent(engine, __import__("transformers").AutoTokenizer.from_pretrained(ensure_tiny_model()), cfg)
    tasks = [task(i) for i in range(n_tasks)]
    tree_cfg = TreeConfig(leaves=args.leaves, roots=2, branches=2, branch_at="both")
    await independent(agent, make_env, tasks[:1], 1)  # warm-up: model, sandboxes
    rows = []
    for r in range(1 if args.quick else 2):
        order = ["independent", "tree"] if r % 2 == 0 else ["tree", "independent"]
        for kind in order:
            if kind == "independent":
                tok, n, wall = await independent(agent, make_env, tasks, args.leaves)
                rows.append((kind, tok, n, wall, {}))
            else:
                tok, n, wall, forks = await trees(agent, make_env, tasks, tree_cfg)
                rows.append((kind, tok, n, wall, forks))
            print(f"round {r} {kind}: {tok / n:.1f} tokens/leaf, {n / wall * 60:.0f} leaves/min", flush=True)
    replay, copy = await fork_costs(agent, make_env, 3 if args.quick else 8)

    def agg(kind: str, f) -> float:
        return statistics.median(f(x) for x in rows if x[0] == kind)

    ind_tok, tree_tok = agg("independent", lambda x: x[1] / x[2]), agg("tree", lambda x: x[1] / x[2])
    ind_rate, tree_rate = (
        agg("independent", lambda x: x[2] / x[3] * 60),
        agg("tree", lambda x: x[2] / x[3] * 60),
    )
    forks = [x[4] for x in rows if x[0] == "tree"][-1]
    text = f"""# Tree rollout benchmark

`python bench/bench_tree.py{" --quick" if args.quick else ""}` on {platform.node()} ({os.cpu_count()} cores), \
backend {backend.name}, {time.strftime("%Y-%m-%d %H:%M")}. Tiny model (untrained, temperature 1), \
`arborl/Code-v0` episodes of up to 4 turns × 48 tokens, {n_tasks} tasks × {args.leaves} leaves; \
trees: 2 roots, 2 branches per fork point, forks at turns and uncertain tokens \
(last tree run: {forks}). Medians over paired rounds.

| rollouts | tokens generated per leaf | leaf trajectories / min |
|---|---:|---:|
| independent | {ind_tok:.1f} | {ind_rate:.0f} |
| tree | {tree_tok:.1f} | {tree_rate:.0f} |
| **tree vs independent** | **{(1 - tree_tok / ind_tok) * 100:.0f} % fewer** | **{tree_rate / ind_rate:.2f}×** |

Forking the env after 3 turns (median of {len(replay)}, fresh env's reset included):

| method | seconds |
|---|---:|
| replay the prefix's actions (`Agent.fork`, used) | {statistics.median(replay):.3f} |
| copy the workspace (tar download + upload) | {statistics.median(copy):.3f} |
"""
    print(text)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(text)
    await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
