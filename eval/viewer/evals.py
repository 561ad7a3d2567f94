"""An evaluation run directory (`arborl eval ... run.dir=...`) as the viewer's episodes.

    <run>/results.sqlite                              one row per (instance, sample) (`store`)
    <run>/instances/<id>/sample-<k>/transcript.json   the chat (`outputs`), and beside it
        infos.json, rewards.json, screens/turn-NNN.png, trajectory.parquet, patch.diff,
        grade.json, test.log(.gz), error.txt

The transcript is the chat as the agent saw it: the messages before the first reply are the
prompt; each assistant message starts a turn, and the messages up to the next one are what
came back. Turn k's env info, reward and screenshot are `infos[k]`, `rewards[k - 1]` and
`screens/turn-k.png` (turn 0's screenshot goes with the prompt). Runs from before rewards.json
take per-turn rewards from trajectory.parquet (model agents) when it is there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..outputs import instance_dir, read_output
from ..result_store import InstanceResult, read_results
from .model import EpisodeView, Message, PageData, ToolCall, TurnView, clip

#: Env info keys left out of a turn's info: large and the same every turn (the tool list).
_INFO_SKIP = ("tools",)
MAX_INFO = 4000


def is_eval_dir(path: Path) -> bool:
    return (path / "results.sqlite").is_file()


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def outcome(r: InstanceResult) -> str:
    if r.status == "done":
        return "success" if r.success else "failure"
    return r.status


def _rewards(out: Path) -> list[float] | None:
    rewards = _json(out / "rewards.json")
    if isinstance(rewards, list):
        return [float(x) for x in rewards]
    if (out / "trajectory.parquet").is_file():
        from arborl.agents.trajectory import read_trajectories

        trajs = read_trajectories(out / "trajectory.parquet")
        return [t.reward for t in trajs[0].turns] if trajs else None
    return None


def _content_text(content: Any) -> str:
    """A message's text; a list of parts (a policy shown pictures) reads as its text parts, each
    picture as a line naming its file (the turn's screenshot shows it)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return json.dumps(content, default=str)
    lines = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            lines.append(str(part.get("text", "")))
        elif isinstance(part, dict) and part.get("type") == "image":
            lines.append(
                f"[picture {part.get('file', '')} {part.get('width', '?')}×{part.get('height', '?')}]"
            )
        else:
            lines.append(json.dumps(part, default=str))
    return "\n".join(lines)


def _turns(
    messages: list[dict[str, Any]],
    infos: list[dict[str, Any]],
    rewards: list[float] | None,
    shots: dict[int, str],
) -> tuple[list[Message], list[TurnView]]:
    prompt: list[Message] = []
    turns: list[TurnView] = []
    for m in messages:
        msg = Message(str(m.get("role", "?")), _content_text(m.get("content")))
        if msg.role == "assistant":
            turns.append(TurnView(index=len(turns) + 1, reply=msg))
        elif turns:
            turns[-1].observation.append(msg)
        else:
            prompt.append(msg)
    total = sum(rewards) if rewards else 0.0
    for turn in turns:
        k = turn.index
        info = infos[k] if k < len(infos) and isinstance(infos[k], dict) else {}
        if rewards is not None and k - 1 < len(rewards):
            turn.reward, turn.ret = rewards[k - 1], total
            total -= rewards[k - 1]
        turn.tool_calls = [
            ToolCall(str(c.get("name")), c.get("ok"), c.get("error")) for c in info.get("tool_calls") or []
        ]
        turn.tags = [f"parse error: {e}" for e in info.get("parse_errors") or []]
        if info.get("format_error"):
            turn.tags.append("format error")
        if info.get("truncated_by"):
            turn.tags.append(f"truncated by {info['truncated_by']}")
        turn.screenshot = shots.get(k)
        if info:
            shown = {key: v for key, v in info.items() if key not in _INFO_SKIP}
            turn.info = clip(json.dumps(shown, indent=1, default=str), MAX_INFO)
    return prompt, turns


def _episode(i: int, r: InstanceResult, run_dir: Path, suite: str, page: PageData) -> EpisodeView:
    out = instance_dir(run_dir, r.instance_id, r.sample)
    rel = out.relative_to(run_dir).as_posix()
    shots: dict[int, str] = {}
    for png in sorted((out / "screens").glob("turn-*.png")):
        parts = png.stem.split("-")  # turn-NNN (a turn's first picture) or turn-NNN-J
        if len(parts) == 2 and parts[1].isdigit():
            shots[int(parts[1])] = f"{rel}/screens/{png.name}"
    page.files.update(shots.values())
    messages = _json(out / "transcript.json") or []
    infos = _json(out / "infos.json") or []
    prompt, turns = _turns(messages, infos, _rewards(out), shots)
    facts = [
        ("instance", r.instance_id),
        ("sample", str(r.sample)),
        ("status", r.status),
        ("score", f"{r.score:g}"),
        ("grade", r.grade or "-"),
        ("turns", str(r.turns)),
        (
            "tokens",
            f"{r.prompt_tokens} prompt + {r.response_tokens} response"
            + ("" if r.tokens_exact else " (approx.)"),
        ),
        ("tool calls", f"{r.tool_calls} ({r.tool_errors} failed)"),
        ("wall", f"{r.wall_s:.2f} s"),
        ("attempts", str(r.attempts)),
    ]
    grade = _json(out / "grade.json")
    if grade is None:  # envs that grade themselves: their verifier's verdict and the answer
        grade = {
            k: r.details[k]
            for k in ("verifier", "answer", "reward", "truncated_by")
            if r.details.get(k) is not None
        }
    log = read_output(out, "test.log")
    log_file = next((f"{rel}/{n}" for n in ("test.log", "test.log.gz") if (out / n).is_file()), None)
    if log_file:
        page.files.add(log_file)
    error = r.error or _text(out / "error.txt")
    patch = _text(out / "patch.diff")
    return EpisodeView(
        id=i,
        task=r.instance_id,
        suite=suite,
        outcome=outcome(r),
        reward=float(r.details.get("reward", r.score)),
        turns=turns,
        prompt=prompt,
        prompt_screenshot=shots.get(0),
        label=f"sample {r.sample}",
        facts=facts,
        grade=json.dumps(grade, indent=1, default=str) if grade else None,
        log=clip(log) if log else None,
        log_path=log_file,
        error=clip(error) if error else None,
        patch=clip(patch) if patch else None,
    )


def load_eval(run_dir: Path) -> PageData:
    """The page of an evaluation run directory."""
    from ..summary import summarize

    info, results = read_results(run_dir)
    suite = str(info.get("suite", "?"))
    page = PageData(
        kind="eval",
        title=f"eval {suite} · {info.get('agent', '?')}",
        source=str(run_dir),
        episodes=[],
    )
    page.episodes = [_episode(i, r, run_dir, suite, page) for i, r in enumerate(results)]
    headline = summarize(results, info.get("config", {}).get("pass_k", [1]))["headline"] if results else "-"
    page.facts = [("suite", suite), ("agent", str(info.get("agent", "?"))), ("result", headline)]
    return page
