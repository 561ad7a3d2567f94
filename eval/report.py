"""Evaluation reports: Markdown and a self-contained HTML page with matplotlib plots.

    arborl eval-report runs/eval/swe-mini-gold                       # -> that directory
    arborl eval-report runs/eval/tool-mini-model runs/eval/tool-mini-gold --out cmp

Tables: the headline of each run (resolved over every sample, errors counted as unresolved),
why samples are unresolved, by kind (failed, the benchmark's own kinds, agent crash, timeout,
harness, infrastructure, environment error), the benchmark's own tables (its hook's
`report_tables`, kept in summary.json), and every instance with why it is unresolved (the
grade's `why` and the longer text under it, else its error code; an error's first line).

Plots: resolved rate per suite and run (`success.png`), turns per episode (`turns.png`),
and with two or more runs, the first two compared instance by instance (`compare.png`:
solved by both / only one / neither, and wall time per instance).

Where episodes have pictures (a policy shown screenshots, an env that renders them), the HTML
page shows each as a strip: the pictures in turn order, each with the reply given on seeing
it (`report_strips`).
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .report_strips import STRIP_CSS, strip_sections
from .result_store import FINAL, InstanceResult, read_results
from .summary import count_phrase, grade_error, kind_labels, summarize

MAX_INSTANCE_ROWS = 300


class _Run:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.info, self.results = read_results(path)
        try:  # what the run wrote of its benchmark: its success rule, its own kinds and tables
            stored = json.loads((path / "summary.json").read_text())
        except (OSError, ValueError):
            stored = {}
        ks = self.info.get("config", {}).get("pass_k", [1])
        self.summary = summarize(self.results, ks, stored.get("unresolved_kinds"))
        self.label = path.name
        self.final = [r for r in self.results if r.status in FINAL]
        self.success_rule = str(stored.get("success_rule", ""))
        self.tables: list[dict[str, Any]] = list(stored.get("report_tables") or [])

    def by_instance(self) -> dict[str, list[InstanceResult]]:
        """Every result of each instance (an errored sample is an unsolved one)."""
        out: dict[str, list[InstanceResult]] = {}
        for r in self.results:
            out.setdefault(r.instance_id, []).append(r)
        return out


def _plots(runs: list[_Run], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    suites = sorted({r.info.get("suite", "?") for r in runs})
    fig, ax = plt.subplots(figsize=(max(5, 2.2 * len(suites) + 1.5), 3.6))
    width = 0.8 / max(1, len(runs))
    for i, run in enumerate(runs):
        xs = [suites.index(run.info.get("suite", "?")) + i * width - 0.4 + width / 2]
        rate = run.summary["resolved_rate"] * 100
        bars = ax.bar(xs, [rate], width, label=run.label)
        ax.bar_label(bars, [f"{rate:.0f}%"], fontsize=8)
    ax.set_xticks(range(len(suites)), suites)
    ax.set_ylabel("resolved / success (%)")
    ax.set_ylim(0, 110)
    ax.set_title("success per suite")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / "success.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.6))
    top = max([r.turns for run in runs for r in run.final] + [1])
    for run in runs:
        ax.hist(
            [r.turns for r in run.final],
            bins=range(0, top + 2),
            histtype="step",
            linewidth=2,
            label=run.label,
        )
    ax.set_xlabel("turns per episode")
    ax.set_ylabel("episodes")
    ax.set_title("turns")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / "turns.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    if len(runs) >= 2:
        a, b = runs[0].by_instance(), runs[1].by_instance()
        common = sorted(set(a) & set(b))
        solved_a = {i for i in common if any(r.success for r in a[i])}
        solved_b = {i for i in common if any(r.success for r in b[i])}
        counts = [
            len(solved_a & solved_b),
            len(solved_a - solved_b),
            len(solved_b - solved_a),
            len(set(common) - solved_a - solved_b),
        ]
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
        names = ["both", f"only {runs[0].label}", f"only {runs[1].label}", "neither"]
        bars = ax1.bar(names, counts, color=["tab:green", "tab:blue", "tab:orange", "tab:gray"])
        ax1.bar_label(bars, fontsize=8)
        ax1.set_title(f"solved instances ({len(common)} in common)")
        ax1.tick_params(axis="x", labelsize=8)
        wa = [sum(r.wall_s for r in a[i]) / len(a[i]) for i in common]
        wb = [sum(r.wall_s for r in b[i]) / len(b[i]) for i in common]
        ax2.scatter(wa, wb, s=12)
        hi = max(wa + wb + [1e-3])
        ax2.plot([0, hi], [0, hi], color="gray", linewidth=1)
        ax2.set_xlabel(f"{runs[0].label}: wall s per instance")
        ax2.set_ylabel(f"{runs[1].label}: wall s")
        ax2.set_title("wall time per instance")
        fig.tight_layout()
        paths.append(out / "compare.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _tables(runs: list[_Run]) -> list[tuple[str, list[str], list[list[str]]]]:
    head = [
        "run",
        "suite",
        "agent",
        "instances",
        "samples",
        "resolved",
        "pass@k",
        "turns",
        "tokens (prompt/resp.)",
        "tool error rate",
        "wall s p50 / p90",
        "unresolved",
        "success means",
    ]
    rows = []
    for run in runs:
        s = run.summary
        pk = ", ".join(f"@{k}: {v:.1%}" for k, v in s["pass_at_k"].items() if v is not None) or "–"
        approx = "" if s["tokens_exact"] else "≈"
        rows.append(
            [
                run.label,
                run.info.get("suite", "?"),
                run.info.get("agent", "?"),
                str(s["instances"]),
                str(s["samples"]),
                f"{s['resolved']}/{s['samples']} ({s['resolved_rate']:.1%})",
                pk,
                f"{s['turns_mean']:.2f}",
                f"{approx}{s['prompt_tokens_mean']:.0f} / {approx}{s['response_tokens_mean']:.0f}",
                f"{s['tool_error_rate']:.1%}",
                f"{s['wall_s_p50']:.2f} / {s['wall_s_p90']:.2f}",
                f"{s['unresolved']}: {count_phrase(s['unresolved_by_kind'], s['unresolved_kinds'])}"
                if s["unresolved"]
                else "0",
                run.success_rule or "–",
            ]
        )
    tables = [("Summary", head, rows)]
    labels = kind_labels(*(run.summary["unresolved_kinds"] for run in runs))
    kinds = [[run.label, *(str(run.summary["unresolved_by_kind"].get(k, 0)) for k in labels)] for run in runs]
    tables.append(("Unresolved, by kind", ["run", *(many for _, many in labels.values())], kinds))
    tables += _benchmark_tables(runs)
    for run in runs:
        rows = [
            [
                r.instance_id,
                str(r.sample),
                r.status,
                r.grade or _fmt(r.score),
                "yes" if r.success else "no",
                str(r.turns),
                f"{r.wall_s:.2f}",
                str(r.attempts),
                error_cell(r),
            ]
            for r in run.results[:MAX_INSTANCE_ROWS]
        ]
        tables.append(
            (
                f"Instances of {run.label}",
                [
                    "instance",
                    "sample",
                    "status",
                    "grade / score",
                    "success",
                    "turns",
                    "wall s",
                    "attempts",
                    "error",
                ],
                rows,
            )
        )
    return tables


def _benchmark_tables(runs: list[_Run]) -> list[tuple[str, list[str], list[list[str]]]]:
    """Each benchmark's own tables (its hook's `report_tables`, as the runs' summary.json keep
    them), a row per run that has one; tables of the same title and columns are one table."""
    merged: dict[tuple[str, tuple[str, ...]], list[list[str]]] = {}
    for run in runs:
        for table in run.tables:
            key = (str(table["title"]), tuple(str(c) for c in table["columns"]))
            merged.setdefault(key, []).append([run.label, *(_fmt(v) for v in table["row"])])
    return [(title, ["run", *columns], rows) for (title, columns), rows in merged.items()]


def error_cell(r: InstanceResult) -> str:
    """Why a sample is unresolved: what its grade says (`why`; else `grade: <error code>`) and
    its own error's first line; the grade's longer text follows on the next lines (the HTML
    page folds it out)."""
    why, more = r.details.get("why"), r.details.get("why_text")
    parts = []
    if why:
        parts.append(str(why))
    elif error := grade_error(r):
        parts.append(f"grade: {error}")
    if r.error:
        parts.append(r.error.split("\n")[0][:200])
    text = "; ".join(parts)
    return text + (f"\n{more}" if why and more else "")


def _markdown(tables: list[tuple[str, list[str], list[list[str]]]], images: list[Path]) -> str:
    out = ["# arborl evaluation report", ""]
    for title, head, rows in tables:
        out += [f"## {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
        out.append("")
    out += [f"![{p.stem}]({p.name})" for p in images]
    return "\n".join(out) + "\n"


def _md_cell(cell: str) -> str:
    """A table cell is one line: the first (the rest, a grade's longer why, is in the HTML page)."""
    return cell.split("\n")[0].replace("|", "\\|")


def _html_cell(cell: str) -> str:
    first, _, rest = cell.partition("\n")
    if not rest:
        return html.escape(first)
    return f"<details><summary>{html.escape(first)}</summary><pre>{html.escape(rest)}</pre></details>"


def _html(
    tables: list[tuple[str, list[str], list[list[str]]]], images: list[Path], strips: Sequence[str] = ()
) -> str:
    parts = [
        "<!doctype html><meta charset=utf-8><title>arborl evaluation report</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em}"
        f"td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}{STRIP_CSS}</style>",
        "<h1>arborl evaluation report</h1>",
    ]
    for p in images:
        data = base64.b64encode(p.read_bytes()).decode()
        parts.append(f"<p><img alt='{p.stem}' src='data:image/png;base64,{data}' style='max-width:100%'></p>")
    for title, head, rows in tables:
        parts.append(
            f"<h2>{html.escape(title)}</h2><table><tr>"
            + "".join(f"<th>{html.escape(h)}</th>" for h in head)
            + "</tr>"
        )
        parts += ["<tr>" + "".join(f"<td>{_html_cell(c)}</td>" for c in row) + "</tr>" for row in rows]
        parts.append("</table>")
    parts += strips
    return "\n".join(parts) + "\n"


def write_report(
    run_dirs: Sequence[str | Path], out: str | Path | None = None
) -> tuple[Path, Path, list[Path]]:
    """Write report.md, report.html and the PNGs; returns (markdown, html, images).

    Default `out`: the run directory for one run; `<parent>/compare-<a>-vs-<b>` for several.
    """
    runs = [_Run(Path(d)) for d in run_dirs]
    if not runs:
        raise ValueError("no run directories given")
    if out is None:
        out = (
            runs[0].path
            if len(runs) == 1
            else runs[0].path.parent / ("compare-" + "-vs-".join(r.label for r in runs[:2]))
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    images = _plots(runs, out)
    tables = _tables(runs)
    md = out / "report.md"
    md.write_text(_markdown(tables, images), encoding="utf-8")
    page = out / "report.html"
    page.write_text(_html(tables, images, strip_sections(runs)), encoding="utf-8")
    return md, page, images
