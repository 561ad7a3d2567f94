"""Desktop env benchmark: action + screenshot latency and reset time, against the naive approach.

Three ways to run the same desktop episodes (the default task: an xterm on Xvfb + openbox),
measured in one run, one episode at a time:

- **arborl**: `arborl/Desktop-v0`. A step is one round trip over the sandbox's channel (the
  actions, the screenshot, the window list in one script) plus one `read_file`; a reset is
  an in-place sandbox reset (processes killed, home and /tmp restored) and a fresh X server.
- **arborl, recreate**: the same env over a pool that never reuses a sandbox (`max_uses=1`):
  each reset waits for a new container. This is what the env falls back to when a sandbox
  is unhealthy (its display will not start).
- **naive**: a new container per episode (`docker run`), then `docker exec` per command:
  start X and the window manager, launch the app; per step one exec for the xdotool action,
  one for the screenshot (`import ... png:-` to stdout, decoded on the host), one for the
  window list. The baseline is given the same scripts and the same waits as the env.

Actions cycle through a click, a typed key and a key press; `settle_s` is 0 for all modes,
so the step numbers are the mechanism alone (the env waits `settle_s`, 0.15 s by default, for
apps to redraw). Writes bench/results/desktop.md, .json and .png.

    python bench/bench_desktop.py [--quick] [--episodes 8] [--steps 30]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
from PIL import Image
from tqdm import tqdm

import arborl.envs
from arborl.envs.desktop.screen import XDisplay, parse_windows
from arborl.envs.event_loop import get_env_loop
from arborl.sandboxes import DockerBackend, PoolConfig, SandboxPool

RESULTS = Path(__file__).with_name("results")
IMAGE = "arborl/gui:latest"
ACTIONS = [
    "pyautogui.click(512, 400)",
    "pyautogui.write('a')",
    "pyautogui.press('backspace')",
]
NAIVE_ACTIONS = [
    ["xdotool", "mousemove", "512", "400", "click", "1"],
    ["xdotool", "type", "--delay", "5", "--", "a"],
    ["xdotool", "key", "BackSpace"],
]


def pct(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1e3, q))


# ---- arborl --------------------------------------------------------------------------------
class EnvMode:
    """`arborl/Desktop-v0` driven through its async twin on the env event loop."""

    def __init__(self, env: Any) -> None:
        self.env, self.rt = env, get_env_loop()

    def episode(self, steps: int, out: dict[str, list[float]]) -> None:
        t = time.perf_counter()
        obs, info = self.rt.run(self.env.areset())
        out["reset"].append(time.perf_counter() - t)
        assert obs["screenshot"].any() and info["windows"], "the desktop did not come up"
        for i in range(steps):
            t = time.perf_counter()
            self.rt.run(self.env.astep(ACTIONS[i % len(ACTIONS)]))
            out["step"].append(time.perf_counter() - t)
        self.rt.run(self.env.astep("DONE"))

    def close(self) -> None:
        self.rt.run(self.env.aclose())


def make_modes(backend: DockerBackend) -> tuple[EnvMode, EnvMode, SandboxPool]:
    rt = get_env_loop()
    warm = EnvMode(gymnasium.make("arborl/Desktop-v0", backend=backend, settle_s=0.0, park_s=600.0))

    async def fresh_pool() -> SandboxPool:
        return await SandboxPool(backend, PoolConfig(max_size=2, max_uses=1)).start()

    # A pool that never reuses a sandbox: every reset waits for a new container.
    pool = rt.run(fresh_pool())
    recreate = EnvMode(gymnasium.make("arborl/Desktop-v0", pool=pool, settle_s=0.0, park_s=0.0))
    return warm, recreate, pool


def breakdown(backend: DockerBackend, n: int) -> dict[str, list[float]]:
    """Where an in-place reset goes: sandbox reset, X server + window manager, first capture."""
    from arborl.envs.desktop.env import DesktopEnv
    from arborl.envs.sandboxed import TimedSandbox

    rt = get_env_loop()
    display = XDisplay()

    async def run() -> dict[str, list[float]]:
        spec = DesktopEnv().sandbox_spec(DesktopEnv.default_task)
        raw = await backend.create(spec)
        sb = TimedSandbox(raw, DesktopEnv())
        out: dict[str, list[float]] = {"sandbox reset (kill + restore)": [], "X server + openbox": []}
        out["screenshot + window list"] = []
        try:
            for _ in range(n):
                t = time.perf_counter()
                await raw.reset()
                out["sandbox reset (kill + restore)"].append(time.perf_counter() - t)
                t = time.perf_counter()
                await display.start(sb)
                out["X server + openbox"].append(time.perf_counter() - t)
                t = time.perf_counter()
                await display.run(sb)
                out["screenshot + window list"].append(time.perf_counter() - t)
        finally:
            await raw.close()
        return out

    return rt.run(run())


# ---- naive ---------------------------------------------------------------------------------
class Naive:
    """A container per episode and a `docker exec` per command (the scripts the env uses)."""

    def __init__(self, backend: DockerBackend) -> None:
        self.client = backend.client
        self.display = XDisplay()
        self.container: Any = None

    def exec(self, cmd: list[str] | str, user: str = "agent") -> tuple[int, bytes]:
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else cmd
        res = self.client.api.exec_create(self.container.id, argv, user=user, environment=self.display.env)
        out = self.client.api.exec_start(res["Id"])
        return self.client.api.exec_inspect(res["Id"])["ExitCode"], out

    def _remove(self) -> None:
        import docker.errors

        if self.container is not None:
            with contextlib.suppress(docker.errors.NotFound):
                self.container.remove(force=True)
            self.container = None

    def reset(self) -> np.ndarray:
        self._remove()
        # `sleep 3600` + auto_remove: a container the bench leaves behind (killed) goes away.
        self.container = self.client.containers.run(
            IMAGE, ["sleep", "3600"], detach=True, init=True, network_mode="none", auto_remove=True,
            tmpfs={"/tmp": "size=256m,mode=1777"}, labels={"arborl.bench": "desktop"},
        )  # fmt: skip
        assert self.exec(self.display._server_script(), user="root")[0] == 0
        assert self.exec(self.display._wm_script())[0] == 0
        self.exec("cd ~; setsid xterm >/dev/null 2>&1 </dev/null &")
        for _ in range(100):
            if parse_windows(self.windows()):
                break
            time.sleep(0.1)
        return self.screenshot()

    def windows(self) -> str:
        return self.exec(XDisplay._LIST_WINDOWS)[1].decode()

    def screenshot(self) -> np.ndarray:
        code, png = self.exec(["import", "-window", "root", "png:-"])
        assert code == 0, png[-300:]
        return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))

    def step(self, i: int) -> np.ndarray:
        self.exec(NAIVE_ACTIONS[i % len(NAIVE_ACTIONS)])
        image = self.screenshot()
        parse_windows(self.windows())
        return image

    def close(self) -> None:
        self._remove()

    def episode(self, steps: int, out: dict[str, list[float]]) -> None:
        t = time.perf_counter()
        assert self.reset().any()
        out["reset"].append(time.perf_counter() - t)
        for i in range(steps):
            t = time.perf_counter()
            self.step(i)
            out["step"].append(time.perf_counter() - t)


# ---- report --------------------------------------------------------------------------------
def plot(summary: dict[str, dict[str, float]], path: Path) -> None:
    """Bars of p50 and p99 per mode, for steps and for resets (from the JSON summary)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in summary if "step_50_ms" in summary[n]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key, title in zip(axes, ("step", "reset"), ("action + screenshot", "reset"), strict=True):
        x = np.arange(len(names))
        ax.bar(x - 0.2, [summary[n][f"{key}_50_ms"] for n in names], 0.4, label="p50")
        ax.bar(x + 0.2, [summary[n][f"{key}_99_ms"] for n in names], 0.4, label="p99")
        ax.set_xticks(x, names, fontsize=8)
        ax.set_ylabel("ms")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="3 episodes of 10 steps (a smoke run)")
    args = ap.parse_args()
    episodes, steps = (3, 10) if args.quick else (args.episodes, args.steps)
    backend = DockerBackend()
    assert arborl.envs  # registers arborl/Desktop-v0
    load_before = os.getloadavg()[0]
    warm, recreate, pool = make_modes(backend)
    naive = Naive(backend)
    modes: dict[str, Any] = {"arborl": warm, "arborl, recreate": recreate, "naive": naive}
    results: dict[str, dict[str, list[float]]] = {name: {"reset": [], "step": []} for name in modes}
    try:
        for mode in modes.values():  # first container of each mode, outside the timings
            mode.episode(1, {"reset": [], "step": []})
        # Interleaved, so that every mode sees the same load on the shared machine.
        for _ in tqdm(range(episodes), desc="episodes (arborl, recreate, naive)"):
            for name, mode in modes.items():
                mode.episode(steps, results[name])
        parts = breakdown(backend, episodes)
    finally:
        warm.close()
        recreate.close()
        get_env_loop().run(pool.close())
        naive.close()
    load_after = os.getloadavg()[0]

    base = results["naive"]
    lines = [
        "# Desktop env benchmark",
        "",
        f"`python bench/bench_desktop.py{' --quick' if args.quick else ''}` on {platform.node()} "
        f"({os.cpu_count()} cores, Docker, image {IMAGE}), {time.strftime('%Y-%m-%d')}; "
        f"1-min load average {load_before:.1f} before, {load_after:.1f} after (others share the machine). "
        f"{episodes} episodes of {steps} steps per mode, one at a time, the modes interleaved episode "
        "by episode. Ratios are naive time / mode time (higher is better), measured in this run.",
        "",
        "| mode | step p50 ms | step p99 ms | step speed-up (p50) | reset p50 ms | reset p99 ms | reset speed-up (p50) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        s_ratio = pct(base["step"], 50) / pct(r["step"], 50)
        r_ratio = pct(base["reset"], 50) / pct(r["reset"], 50)
        lines.append(
            f"| {name} | {pct(r['step'], 50):.0f} | {pct(r['step'], 99):.0f} | {s_ratio:.1f}x | "
            f"{pct(r['reset'], 50):.0f} | {pct(r['reset'], 99):.0f} | {r_ratio:.1f}x |"
        )
    lines += [
        "",
        "A step is one action (click, type, key) and its observation: the screenshot as a",
        "[768, 1024, 3] array and the window list. A reset ends with the first observation of an",
        "xterm on a fresh X server. `arborl, recreate` is the fallback for an unhealthy sandbox.",
        "",
        "Where an in-place reset goes (p50 / p99 ms; launching the xterm and waiting for its window is",
        "the rest):",
        "",
        "| part | p50 ms | p99 ms |",
        "|---|---:|---:|",
        *(f"| {k} | {pct(v, 50):.0f} | {pct(v, 99):.0f} |" for k, v in parts.items()),
        "",
        "![step and reset latency](desktop.png)",
    ]
    RESULTS.mkdir(exist_ok=True)
    text = "\n".join(lines) + "\n"
    (RESULTS / "desktop.md").write_text(text)
    summary = {
        name: {f"{k}_{q}_ms": pct(r[k], q) for k in ("step", "reset") for q in (50, 99)}
        | {"n_steps": len(r["step"])}
        for name, r in results.items()
    }
    summary["reset breakdown"] = {k: {"p50_ms": pct(v, 50), "p99_ms": pct(v, 99)} for k, v in parts.items()}
    (RESULTS / "desktop.json").write_text(json.dumps(summary, indent=2))
    plot(summary, RESULTS / "desktop.png")
    print(text)


if __name__ == "__main__":
    main()
