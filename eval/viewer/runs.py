"""A training run directory (`arborl train run.dir=...`) as the viewer's episodes.

    <run>/trajectories/group-000042.parquet   one group per file (arborl.agents.trajectory, v1-v6)
    <run>/sft/demos.parquet                   the warm start's demonstrations, when it had any
    <run>/metrics.jsonl                       one event per step (phase rl / sft / eval-*)
    <run>/checkpoints/<latest>/model/         the tokenizer the ids are decoded with

A trajectory stores token ids, not text: with a checkpoint's tokenizer the prompt, each reply
and each observation are decoded with their special tokens, i.e. the chat exactly as the model
saw it. Without one, the page shows what the records keep as text (each turn's
`anchor_observation`) and the token counts.

The trainer does not store advantages: a trajectory holds step rewards (`Turn.reward`) and the
episode's (`outcome_reward`, their sum); the advantages are computed per batch and discarded.
The page shows the rewards and the undiscounted return-to-go of each turn, and per step the
batch's mean |advantage| where metrics.jsonl logged it (`batch/advantage_abs_mean`).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from arborl.agents.engines.weights import latest_checkpoint
from arborl.agents.trajectory import Trajectory, Turn, read_trajectories

from .model import EpisodeView, Message, PageData, TurnView

log = logging.getLogger(__name__)
_GROUP = re.compile(r"^group-(\d+)\.parquet$")
#: metrics.jsonl keys shown per RL step, and their column names.
STEP_COLUMNS = {
    "rollout/reward": "reward",
    "rollout/success": "success",
    "rollout/turns": "turns",
    "batch/advantage_abs_mean": "mean |advantage|",
    "staleness/mean": "staleness",
}
ADVANTAGE_NOTE = (
    "Advantages are not stored by the trainer (a trajectory keeps step rewards and the episode's "
    "reward; advantages are computed per batch and discarded): each turn shows its reward and its "
    "return-to-go (the sum of its and later rewards); the step table shows each batch's mean "
    "|advantage| where metrics.jsonl logged it."
)


def is_run_dir(path: Path) -> bool:
    return (path / "trajectories").is_dir() or (path / "sft" / "demos.parquet").is_file()


def _tokenizer(run_dir: Path) -> tuple[Any, Path | None]:
    """The tokenizer of the run's latest checkpoint (any complete one if `latest` is gone)."""
    checkpoints = run_dir / "checkpoints"
    candidates = [latest_checkpoint(checkpoints), *sorted(checkpoints.glob("step-*"), reverse=True)]
    for ckpt in candidates:
        if ckpt is not None and (ckpt / "model" / "tokenizer_config.json").is_file():
            from transformers import AutoTokenizer

            try:
                return AutoTokenizer.from_pretrained(ckpt / "model"), ckpt / "model"
            except Exception as e:  # a damaged checkpoint: fall back to the stored text
                log.warning("cannot load the tokenizer of %s: %s", ckpt, e)
    return None, None


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's events (a torn last line, from a killed run, is skipped)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _step_table(events: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    heldout = {e["step"]: e.get("success") for e in events if e.get("phase") == "eval-rl"}
    rl = [e for e in events if e.get("phase") == "rl"]
    keys = [k for k in STEP_COLUMNS if any(k in e for e in rl)]
    columns = ["step", *(STEP_COLUMNS[k] for k in keys), "held-out success"]
    rows = [[e["step"], *(e.get(k) for k in keys), heldout.get(e["step"])] for e in rl]
    return columns, rows


def _outcome(t: Trajectory) -> str:
    if t.truncation == "env_error":
        return "error"
    success = t.metrics.get("success")
    return "success" if (success if success is not None else t.outcome_reward > 0) else "failure"


def _versions(turns: list[Turn]) -> str | None:
    """The policy versions that sampled `turns`' tokens: "v3", or "v3-4" across an update."""
    versions = sorted({v for turn in turns for v in turn.policy_versions if v >= 0})
    if not versions:
        return None
    return f"v{versions[0]}" if len(versions) == 1 else f"v{versions[0]}-{versions[-1]}"


def _suite(task_id: str) -> str:
    return task_id.rsplit("/", 1)[0] if "/" in task_id else "train tasks"


def _episode(i: int, t: Trajectory, texts: list[str] | None, label: str, step: str | None) -> EpisodeView:
    """`texts`: the decoded prompt, then each turn's response and observation (None: no tokenizer)."""
    turns, ret = [], sum(turn.reward for turn in t.turns)
    for k, turn in enumerate(t.turns):
        if texts is not None:
            reply, obs = texts[1 + 2 * k], texts[2 + 2 * k]
        else:
            reply = f"({len(turn.response_ids)} tokens: no tokenizer saved with this run)"
            obs = t.turns[k + 1].anchor_observation if k + 1 < len(t.turns) else ""
        tags = [f"{len(turn.response_ids)} tokens"]
        if turn.finish_reason != "stop":
            tags.append(f"finish: {turn.finish_reason}")
        if turn.tool_call_ok is not None:
            tags.append("tool call ok" if turn.tool_call_ok else "tool call failed")
        version = _versions([turn])
        if version:
            tags.append(f"policy {version}")
        if turn.step_label is not None:
            tags.append(f"step label {turn.step_label:+g}")
        turns.append(
            TurnView(
                index=k + 1,
                reply=Message("assistant", reply),
                observation=[Message("observation", obs)] if obs else [],
                reward=turn.reward,
                ret=ret,
                tags=tags,
            )
        )
        ret -= turn.reward
    prompt = texts[0] if texts is not None else (t.turns[0].anchor_observation if t.turns else "")
    facts = [
        ("task", t.task_id),
        ("group", t.group_id),
        ("trajectory", t.traj_id),
        ("outcome reward", f"{t.outcome_reward:g}"),
        ("terminated", str(t.terminated)),
        ("truncation", t.truncation or "-"),
        ("prompt tokens", str(len(t.prompt_ids))),
        ("tokens", str(len(t))),
    ]
    if t.episode_id:
        facts.append(("episode (segments)", t.episode_id))
    facts += [(k, f"{v:g}") for k, v in sorted(t.metrics.items()) if k not in ("success",)]
    return EpisodeView(
        id=i,
        task=t.task_id,
        suite=_suite(t.task_id),
        outcome=_outcome(t),
        reward=t.outcome_reward,
        turns=turns,
        prompt=[Message("prompt", prompt)] if prompt else [],
        step=step,
        label=label,
        facts=facts,
    )


def _decoded(tokenizer: Any, trajs: list[Trajectory]) -> list[list[str]] | None:
    if tokenizer is None:
        return None
    pieces = [
        [t.prompt_ids, *(ids for turn in t.turns for ids in (turn.response_ids, turn.observation_ids))]
        for t in trajs
    ]
    flat = tokenizer.batch_decode([p for ps in pieces for p in ps], skip_special_tokens=False)
    out, pos = [], 0
    for ps in pieces:
        out.append(flat[pos : pos + len(ps)])
        pos += len(ps)
    return out


def load_run(run_dir: Path) -> PageData:
    """The page of a training run directory."""
    tokenizer, model_dir = _tokenizer(run_dir)
    files: list[tuple[str, Path]] = []
    demos = run_dir / "sft" / "demos.parquet"
    if demos.is_file():
        files.append(("demo", demos))
    store = run_dir / "trajectories"
    groups = sorted(
        (int(m.group(1)), p)
        for p in (store.iterdir() if store.is_dir() else [])
        if (m := _GROUP.match(p.name))
    )
    files += [(f"group {index}", p) for index, p in groups]
    episodes: list[EpisodeView] = []
    for label, path in files:
        trajs = read_trajectories(path)
        texts = _decoded(tokenizer, trajs)
        for j, t in enumerate(trajs):
            step = "demo" if label == "demo" else _versions(t.turns)
            episodes.append(_episode(len(episodes), t, texts[j] if texts else None, f"{label} #{j}", step))
    columns, rows = _step_table(read_metrics(run_dir))
    notes = [ADVANTAGE_NOTE]
    if model_dir is None:
        notes.append(
            "No checkpoint with a tokenizer in this run: replies are shown as token counts, observations "
            "as the text the records keep."
        )
    return PageData(
        kind="run",
        title=f"training run {run_dir.name}",
        source=str(run_dir),
        episodes=episodes,
        notes=notes,
        facts=[
            ("episodes", str(len(episodes))),
            ("groups stored", str(len(groups))),
            ("tokenizer", str(model_dir) if model_dir else "none (no checkpoint)"),
        ],
        step_rows=rows,
        step_columns=columns,
    )
