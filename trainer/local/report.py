"""Training reports: learning curves of one or more runs as PNG and a self-contained HTML page.

    arborl report runs/train                       # -> runs/train/report.png, report.html
    arborl report runs/async runs/sync --out cmp   # curves overlaid (a benchmark's comparison)

Panels: held-out success rate over wall time (warm start and RL evaluations) and over RL
steps, rollout reward per RL step, and the warm start's NLL (each where a run has it). Only
the continued lineage of a resumed run is drawn (events rolled back by a resume are left
out).

The headline is each phase's own held-out success, before and after it: the warm start
from the starting model to its last evaluation, and RL from where the warm start left it
(RL's step 0) to its last evaluation, what RL added.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .metrics_log import read_metrics


def _series(
    events: list[dict[str, Any]], phase: str, key: str, x: str = "step"
) -> tuple[list[float], list[float]]:
    pts = [(e[x], e[key]) for e in events if e.get("phase") == phase and e.get(key) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def _eval_curve(events: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """Held-out success against minutes since the run started (SFT then RL evaluations)."""
    evals = [e for e in events if str(e.get("phase", "")).startswith("eval-") and "success" in e]
    if not evals:
        return [], []
    t0 = min(e["time"] for e in events)
    seen: set[float] = set()
    xs, ys = [], []
    for e in sorted(evals, key=lambda e: e["time"]):
        minute = round((e["time"] - t0) / 60, 3)
        if minute not in seen:  # the SFT's last evaluation is also RL's step 0: draw it once
            seen.add(minute)
            xs.append(minute)
            ys.append(e["success"])
    return xs, ys


PHASES = (("warm start", "eval-sft"), ("RL", "eval-rl"))


def phase_success(events: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Held-out success before and after each phase that was evaluated, from its first and
    last evaluation by step: `{"warm start": (0.0, 0.36), "RL": (0.36, 0.86)}`."""
    out = {}
    for name, phase in PHASES:
        evals = sorted(
            (e for e in events if e.get("phase") == phase and "success" in e), key=lambda e: e["step"]
        )
        if evals:
            out[name] = (float(evals[0]["success"]), float(evals[-1]["success"]))
    return out


def headline_lines(events: list[dict[str, Any]], steps: dict[str, Any]) -> list[str]:
    """One line a phase, RL's last: "RL (43 steps): held-out success 33% → 80% (+47 points)".
    `steps`: the run's summary (`sft_steps`, `rl_steps`)."""
    counts = {"warm start": steps.get("sft_steps"), "RL": steps.get("rl_steps")}
    lines = []
    for name, (before, after) in phase_success(events).items():
        n = "" if counts[name] is None else f" ({counts[name]} step{'' if counts[name] == 1 else 's'})"
        change = round(100 * after) - round(100 * before)
        lines.append(f"{name}{n}: held-out success {before:.0%} → {after:.0%} ({change:+d} points)")
    return lines


def running_mean(values: Sequence[float], n: int) -> list[float]:
    """The mean of each value and the `n` - 1 before it (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - n] if i >= n else 0.0)
        out.append(total / min(i + 1, n))
    return out


def plot_runs(
    run_dirs: Sequence[str | Path], out_png: Path, labels: Sequence[str] | None = None, smooth: int = 1
) -> Path:
    """One panel per curve that any of the runs has: held-out success over minutes and over
    RL steps (runs compared at the same number of samples), rollout reward (a running mean
    over `smooth` steps when above 1), warm-start NLL."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(labels or [Path(d).name for d in run_dirs])
    panels: list[tuple[str, str, bool, list[tuple[str, list[float], list[float]]]]] = [
        ("held-out success (%)", "minutes", True, []),
        ("held-out success (%)", "RL step", True, []),
        ("rollout reward" + (f" (mean of {smooth} steps)" if smooth > 1 else ""), "RL step", False, []),
        ("warm start NLL", "SFT step", False, []),
    ]
    for run, label in zip(run_dirs, labels, strict=True):
        events = read_metrics(run)
        x, y = _eval_curve(events)
        panels[0][3].append((label, x, [v * 100 for v in y]))
        x, y = _series(events, "eval-rl", "success")
        panels[1][3].append((label, x, [v * 100 for v in y]))
        x, y = _series(events, "rl", "rollout/reward")
        panels[2][3].append((label, x, running_mean(y, smooth)))
        panels[3][3].append((label, *_series(events, "sft", "sft/nll")))
    # A panel no run has data for is left out (e.g. the NLL of runs without a warm start).
    panels = [p for i, p in enumerate(panels) if i == 0 or any(xs for _, xs, _ in p[3])]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (title, xlabel, markers, curves) in zip(axes[0], panels, strict=True):
        for label, xs, ys in curves:
            ax.plot(xs, ys, marker="o" if markers else None, label=label)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


def write_report(run_dirs: Sequence[str | Path], out: str | Path | None = None) -> tuple[Path, Path]:
    """Write ``report.png`` and ``report.html`` (into `out`, default the first run's directory)."""
    dirs = [Path(d) for d in run_dirs]
    for d in dirs:
        if not (d / "metrics.jsonl").exists():
            raise FileNotFoundError(f"{d} has no metrics.jsonl: not a training run directory")
    out_dir = Path(out) if out else dirs[0]
    png = plot_runs(dirs, out_dir / "report.png")
    rows = []
    for d in dirs:
        summary = json.loads((d / "summary.json").read_text()) if (d / "summary.json").exists() else {}
        events = read_metrics(d)
        phases = phase_success(events)
        cells = [
            f"{phases[name][0]:.0%} → {phases[name][1]:.0%}" if name in phases else "–" for name, _ in PHASES
        ]
        x, _ = _eval_curve(events)
        rows.append(
            f"<tr><td>{html.escape(d.name)}</td><td>{summary.get('sft_steps', '')}</td>"
            f"<td>{summary.get('rl_steps', '')}</td><td>{cells[0]}</td><td><b>{cells[1]}</b></td>"
            f"<td>{(x[-1] if x else 0):.1f}</td></tr>"
        )
    image = base64.b64encode(png.read_bytes()).decode()
    page = (
        "<!doctype html><meta charset=utf-8><title>arborl training report</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:4px 12px;text-align:right}</style>"
        "<h1>arborl training report</h1><table><tr><th>run</th><th>SFT steps</th><th>RL steps</th>"
        "<th>warm start: held-out success before → after</th><th>RL: held-out success before → after</th>"
        "<th>minutes</th></tr>"
        + "".join(rows)
        + f"</table><p><img src='data:image/png;base64,{image}' style='max-width:100%'></p>"
    )
    page_path = out_dir / "report.html"
    page_path.write_text(page, encoding="utf-8")
    return png, page_path


def curve_table(run_dir: str | Path) -> str:
    """The held-out success curve as a Markdown table (minutes, success) for docs."""
    x, y = _eval_curve(read_metrics(run_dir))
    buf = io.StringIO()
    buf.write("| minutes | held-out success |\n|---:|---:|\n")
    for m, s in zip(x, y, strict=True):
        buf.write(f"| {m:.1f} | {s:.0%} |\n")
    return buf.getvalue()
