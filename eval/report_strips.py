"""The report's picture strips: what the model saw and what it did, episode by episode.

An eval whose policy was shown pictures (a vision-language model on the desktop, web,
MiniWoB or picture-Sokoban suites) or whose env rendered screenshots leaves them under each
sample's ``screens/`` (`outputs.write_outputs`). The report shows each such episode as a
row of its pictures in turn order, each captioned with the reply the model gave on seeing
it, the last with the outcome: looking at a GUI agent's run is quicker than reading it.
The thumbnails are embedded (the page stays one file); `arborl view` has the full-size
pictures and every turn's text.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

from PIL import Image

from .outputs import instance_dir
from .result_store import InstanceResult

#: Episodes shown per run, pictures per episode and a thumbnail's longer side (pixels):
#: enough to see what a policy does without a page of tens of megabytes.
MAX_EPISODES = 24
MAX_PICTURES = 16
THUMB_PX = 192
CAPTION_CHARS = 160


def _thumbnail(png: Path) -> str | None:
    """The picture, scaled down to THUMB_PX at most (never up: small renders stay sharp), as a
    data URL; None when the file does not read as a picture (the report goes on without it)."""
    try:
        with Image.open(png) as img:
            img = img.convert("RGB")
            img.thumbnail((THUMB_PX, THUMB_PX), Image.Resampling.BOX)
            buf = io.BytesIO()
            img.save(buf, format="PNG")
    except (OSError, ValueError):
        return None
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _replies(out: Path) -> list[str]:
    try:
        messages = json.loads((out / "transcript.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [
        m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
        for m in messages
        if isinstance(m, dict) and m.get("role") == "assistant"
    ]


def _pictures(out: Path) -> list[tuple[int, Path]]:
    """(turn, file) of each turn's first picture (turn-NNN.png), in turn order."""
    found = []
    for png in (out / "screens").glob("turn-*.png"):
        parts = png.stem.split("-")
        if len(parts) == 2 and parts[1].isdigit():
            found.append((int(parts[1]), png))
    return sorted(found)


def _outcome(r: InstanceResult) -> str:
    if r.status != "done":
        return f"{r.status}: {(r.error or '').splitlines()[0][:120] if r.error else ''}".rstrip(": ")
    word = "solved" if r.success else "not solved"
    return f"{word} (score {r.score:g}{f', {r.grade}' if r.grade else ''})"


def _episode(run_dir: Path, r: InstanceResult) -> str | None:
    out = instance_dir(run_dir, r.instance_id, r.sample)
    pictures = _pictures(out)
    if not pictures:
        return None
    replies = _replies(out)
    shown = pictures[:MAX_PICTURES]
    figures = []
    for turn, png in shown:
        # turn k's picture is what the model saw before its reply k + 1
        if turn < len(replies):
            caption = replies[turn].strip()
            caption = caption if len(caption) <= CAPTION_CHARS else caption[: CAPTION_CHARS - 1] + "…"
            caption = f"{turn}: {caption}"
        else:
            caption = f"{turn}: end, {_outcome(r)}"
        src = _thumbnail(png)
        picture = f"<img alt='turn {turn}' src='{src}'>" if src else f"<p>({png.name} does not read)</p>"
        figures.append(f"<figure>{picture}<figcaption>{html.escape(caption)}</figcaption></figure>")
    more = len(pictures) - len(shown)
    if more:
        figures.append(f"<p>… {more} more (arborl view)</p>")
    head = f"{r.instance_id} · sample {r.sample} · {_outcome(r)} · {r.turns} turns"
    return f"<div class=strip-row><h3>{html.escape(head)}</h3><div class=strip>{''.join(figures)}</div></div>"


def strip_sections(runs: list[Any]) -> list[str]:
    """HTML sections (one per run with pictures): its episodes' picture strips. `runs` are the
    report's runs (a path and its results)."""
    sections = []
    for run in runs:
        rows: list[str] = []
        episodes = sorted(run.final, key=lambda r: (r.instance_id, r.sample))
        with_pictures = 0
        for r in episodes:
            if len(rows) >= MAX_EPISODES:  # only counted: thumbnails are made for those shown
                with_pictures += bool(_pictures(instance_dir(run.path, r.instance_id, r.sample)))
                continue
            row = _episode(run.path, r)
            if row is not None:
                with_pictures += 1
                rows.append(row)
        if not rows:
            continue
        note = (
            f"<p>{len(rows)} of {with_pictures} episodes with pictures shown; `arborl view {html.escape(str(run.path))}` "
            "shows them all</p>"
            if with_pictures > len(rows)
            else ""
        )
        sections.append(
            f"<h2>What the model saw and did: {html.escape(run.label)}</h2>"
            "<p>Each picture is what the model was shown at that turn, captioned with the reply it "
            f"gave on seeing it; the last one, the outcome.</p>{note}{''.join(rows)}"
        )
    return sections


STRIP_CSS = (
    ".strip{display:flex;gap:8px;overflow-x:auto;padding-bottom:6px}"
    ".strip figure{margin:0;flex:0 0 auto;width:200px}"
    ".strip img{max-width:192px;image-rendering:pixelated;border:1px solid #ccc}"
    ".strip figcaption{font-size:11px;font-family:monospace;white-space:pre-wrap;word-break:break-word}"
    ".strip-row h3{font-size:14px;margin:1em 0 .3em}"
)
