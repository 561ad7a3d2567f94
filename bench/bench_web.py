"""Web env benchmark: step latency and episodes per minute, against a new browser per episode.

The modes run the same scripted (gold) episodes of the `web-mini` suite, cycling through
its tasks, taking turns episode by episode in the same run (the machine is shared and
noisy: only the ratios are meaningful, and turn-taking exposes every mode to the same load):

- arborl: one warm web stack per env (browser + sites started once); an episode is a
  site-state reset and a new browser context.
- naive: a new browser per episode (the stack's browser process is restarted before each
  reset; the sites stay up and are reset the same way).
- fresh-stack (Docker only, every third turn): network, site containers and browser
  container all new per episode, what starting the whole environment per episode costs.

Also reported: startup cost of a stack (first reset), reset p50/p95, step latency p50/p95
by action kind, and the framework's own overhead per step. Writes bench/results/web.md,
web.json and web.png.

    python bench/bench_web.py [--quick] [--backend docker|local|both] [--episodes 23]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

import arborl.envs
from arborl.envs.event_loop import get_env_loop
from arborl.envs.web import WebEnv, close_stack_pools
from arborl.sandboxes import BwrapBackend, DockerBackend, SandboxUnavailable
from arborl.tasks import get_suite

RESULTS = Path(__file__).with_name("results")


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1e3, q)) if xs else float("nan")


class Mode:
    """One way of running episodes, with its own env and its own timings."""

    def __init__(self, backend: Any, name: str) -> None:
        self.backend, self.name = backend, name
        self.env = WebEnv(backend=backend)
        self.durations: list[float] = []
        self.resets: list[float] = []
        self.steps: dict[str, list[float]] = {}
        self.overheads: list[float] = []
        self.rewards: list[float] = []

    async def episode(self, i: int, task: Any, policy: Any) -> None:
        """Episode `i`; episode 0 is the cold start (stack start-up), reported apart."""
        t = time.perf_counter()
        if i and self.name == "naive":
            await self.env.stack.restart_browser()  # a new browser for this episode
        if i and self.name == "fresh-stack":  # network, site containers, browser: all new
            stack = self.env.stack
            await self.env.aclose()
            await stack.close()
            self.env = WebEnv(backend=self.backend)
        obs, info = await self.env.areset(options={"task": task})
        self.resets.append(time.perf_counter() - t)
        messages = list(obs)
        while True:
            reply = policy(messages, info)
            messages.append({"role": "assistant", "content": reply})
            obs, reward, terminated, truncated, info = await self.env.astep(reply)
            messages.extend(obs)
            if i:
                self.steps.setdefault(reply.split("(", 1)[0], []).append(info["timing"]["step_s"])
                self.overheads.append(info["timing"]["overhead_s"])
            if terminated or truncated:
                self.rewards.append(reward)
                break
        self.durations.append(time.perf_counter() - t)

    def summary(self) -> dict[str, Any]:
        every = [x for v in self.steps.values() for x in v]
        n = len(self.durations)
        return {
            "mode": self.name,
            "episodes": n,
            "warm_episodes_per_min": 60 * (n - 1) / sum(self.durations[1:]),
            "first_episode_s": self.durations[0],
            "first_reset_s": self.resets[0],
            "reset_ms": [pct(self.resets[1:], 50), pct(self.resets[1:], 95)],
            "steps_ms": {k: [pct(v, 50), pct(v, 95), len(v)] for k, v in sorted(self.steps.items())},
            "all_steps_ms": [pct(every, 50), pct(every, 95)],
            "overhead_ms": [pct(self.overheads, 50), pct(self.overheads, 95)],
            "solved": sum(r == 1.0 for r in self.rewards) / len(self.rewards),
        }


async def run_backend(backend: Any, episodes: int, quick: bool) -> list[dict[str, Any]]:
    """The modes take turns episode by episode, so load from others on the machine hits
    them alike; a fresh stack per episode (Docker only) runs every third turn."""
    suite = get_suite("web-mini")
    tasks = suite.tasks()
    names = ["arborl", "naive"] + (["fresh-stack"] if backend.name == "docker" else [])
    modes = [Mode(backend, n) for n in names]
    for i in tqdm(range(episodes), desc=backend.name):
        task = tasks[i % len(tasks)]
        for mode in modes:
            if mode.name == "fresh-stack" and i % 3 and i != 1:
                continue
            await mode.episode(len(mode.durations), task, suite.gold_policy(task))
    out = [m.summary() for m in modes]
    for m in modes:
        await m.env.aclose()
    await close_stack_pools()
    return out


def backends(which: str) -> list[Any]:
    made = []
    if which in ("docker", "both"):
        try:
            made.append(DockerBackend())
        except SandboxUnavailable as e:
            print(f"skipping docker: {e}")
    if which in ("bwrap", "both"):
        try:
            made.append(BwrapBackend())
        except SandboxUnavailable as e:
            print(f"skipping bwrap: {e}")
    return made


def plot(results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    names, epm, resets = [], [], []
    for backend, rows in results.items():
        for r in rows:
            names.append(f"{backend}\n{r['mode']}")
            epm.append(r["warm_episodes_per_min"])
            resets.append(r["reset_ms"][0])
    colors = ["tab:green" if "arborl" in n else "tab:gray" for n in names]
    axes[0].bar(names, epm, color=colors)
    axes[0].set_title("gold web-mini episodes per minute (higher is better)")
    axes[1].bar(names, resets, color=colors)
    axes[1].set_yscale("log")
    axes[1].set_title("reset p50, ms (log; lower is better)")
    for ax in axes:
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def report(
    results: dict[str, list[dict[str, Any]]], args: argparse.Namespace, load: tuple[float, float]
) -> str:
    lines = [
        "# Web env benchmark",
        "",
        f"`python bench/bench_web.py{' --quick' if args.quick else ''}` on {platform.node()} "
        f"({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}; 1-min load average {load[0]:.1f} before, "
        f"{load[1]:.1f} after (others share the machine). Gold episodes of `web-mini`, cycling "
        "through its 11 tasks, one env, one episode at a time.",
        "",
        "## Episodes per minute: warm stack vs a new browser per episode",
        "",
        "| backend | mode | episodes | episodes/min | ratio vs arborl | reset p50 / p95 ms | first reset s | solved |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for backend, rows in results.items():
        base = rows[0]["warm_episodes_per_min"]
        for r in rows:
            lines.append(
                f"| {backend} | {r['mode']} | {r['episodes']} | {r['warm_episodes_per_min']:.1f} | "
                f"{r['warm_episodes_per_min'] / base:.2f}x | {r['reset_ms'][0]:.0f} / {r['reset_ms'][1]:.0f} | "
                f"{r['first_reset_s']:.2f} | {r['solved']:.0%} |"
            )
    lines += [
        "",
        "## Step latency by action (p50 / p95 ms, browser work included)",
        "",
        "| backend | mode | all steps | click | fill | select | goto | answer | framework overhead |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for backend, rows in results.items():
        for r in rows:
            cell = [
                f"{r['steps_ms'][k][0]:.0f} / {r['steps_ms'][k][1]:.0f}" if k in r["steps_ms"] else "-"
                for k in ("click", "fill", "select", "goto", "answer")
            ]
            lines.append(
                f"| {backend} | {r['mode']} | {r['all_steps_ms'][0]:.0f} / {r['all_steps_ms'][1]:.0f} | "
                + " | ".join(cell)
                + f" | {r['overhead_ms'][0]:.2f} / {r['overhead_ms'][1]:.2f} |"
            )
    lines += ["", "![episodes per minute and reset cost](web.png)", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--backend", default="both", choices=["docker", "bwrap", "both"])
    ap.add_argument("--episodes", type=int, default=0, help="episodes per mode (default 23, quick 12)")
    args = ap.parse_args()
    episodes = args.episodes or (12 if args.quick else 23)
    load0 = os.getloadavg()[0]
    results = {}
    for backend in backends(args.backend):
        results[backend.name] = get_env_loop().run(run_backend(backend, episodes, args.quick))
    load1 = os.getloadavg()[0]
    RESULTS.mkdir(exist_ok=True)
    text = report(results, args, (load0, load1))
    (RESULTS / "web.md").write_text(text)
    (RESULTS / "web.json").write_text(json.dumps(results, indent=2))
    plot(results, RESULTS / "web.png")
    print(text)


if __name__ == "__main__":
    assert arborl.envs  # registers the env ids
    main()
