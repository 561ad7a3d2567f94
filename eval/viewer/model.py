"""What the viewer's page shows, as plain data: episodes, their turns, and the run around them.

The loaders (`runs.py` for training runs, `evals.py` for evaluation runs) fill these; `page.py`
writes them as JSON into the page, whose script builds the DOM from it with text nodes only
(so nothing an agent wrote is ever parsed as HTML).

`PageData.pack` splits the episodes into the list's index (a few fields each) and chunks of
details; in a chunk every text is held once in a table (`Strings`) that the details refer to
by index: a group's trajectories share their prompt, an eval's instances their system prompt,
so thousands of episodes cost their own replies, not copies.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: Longest text a page embeds per field (a test log, a patch): head and tail are kept around a
#: marker, and the page links the whole file.
MAX_TEXT = 64 * 1024


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """`text`, or its head and tail around a marker that says how much was left out."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n\n[... {len(text) - 2 * half} characters left out ...]\n\n{text[-half:]}"


class Strings:
    """A table of distinct texts; `add` returns a text's index in it."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._index: dict[str, int] = {}

    def add(self, text: str) -> int:
        if text not in self._index:
            self._index[text] = len(self.texts)
            self.texts.append(text)
        return self._index[text]


@dataclass
class Message:
    """One piece of the conversation: a chat message, or a span of the token sequence."""

    role: str  # system | user | assistant | tool | prompt | observation
    text: str


@dataclass
class ToolCall:
    name: str
    ok: bool | None = None
    error: str | None = None


@dataclass
class TurnView:
    """One model turn: the reply, what came back, and what it was worth."""

    index: int  # 1-based
    reply: Message
    observation: list[Message] = field(default_factory=list)
    reward: float | None = None
    #: Undiscounted return-to-go from this turn: its reward and every later one.
    ret: float | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    #: Facts about the turn (finish reason, policy version, a failed tool-call format, ...).
    tags: list[str] = field(default_factory=list)
    screenshot: str | None = None  # path relative to the run directory
    info: str | None = None  # the env's step info as JSON


@dataclass
class EpisodeView:
    """One episode (an eval sample, or a training trajectory) and everything shown about it."""

    id: int
    task: str
    suite: str
    outcome: str  # success | failure | error | timeout | agent_crash | infra_error | env_error
    reward: float
    turns: list[TurnView]
    prompt: list[Message] = field(default_factory=list)
    prompt_screenshot: str | None = None
    step: str | None = None  # training runs: the policy version that generated it ("demo": warm start)
    label: str = ""  # sample #k, group g
    facts: list[tuple[str, str]] = field(default_factory=list)
    grade: str | None = None  # the grade (JSON)
    log: str | None = None  # the grader's log (clipped)
    log_path: str | None = None  # the whole log, relative to the run directory
    error: str | None = None
    patch: str | None = None


@dataclass
class PageData:
    """Everything the page shows."""

    kind: str  # run | eval
    title: str
    source: str
    episodes: list[EpisodeView]
    notes: list[str] = field(default_factory=list)
    facts: list[tuple[str, str]] = field(default_factory=list)
    #: Training runs: one row per RL step from metrics.jsonl (columns: `step_columns`).
    step_rows: list[list[Any]] = field(default_factory=list)
    step_columns: list[str] = field(default_factory=list)
    #: Paths (relative to the run directory) the page links: what `--serve` may send.
    files: set[str] = field(default_factory=set)

    def pack(self, chunk_size: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(the page's header and episode index, the detail chunks of `chunk_size` episodes)."""
        index = [
            {
                "id": e.id,
                "task": e.task,
                "suite": e.suite,
                "outcome": e.outcome,
                "reward": e.reward,
                "step": e.step,
                "label": e.label,
                "turns": len(e.turns),
            }
            for e in self.episodes
        ]
        head = {
            "kind": self.kind,
            "title": self.title,
            "source": self.source,
            "notes": self.notes,
            "facts": self.facts,
            "step_columns": self.step_columns,
            "step_rows": self.step_rows,
            "episodes": index,
            "chunk_size": chunk_size,
        }
        chunks = []
        for start in range(0, len(self.episodes), chunk_size):
            strings = Strings()
            details = [_packed(asdict(e), strings) for e in self.episodes[start : start + chunk_size]]
            chunks.append({"strings": strings.texts, "episodes": details})
        return head, chunks


#: Fields of an episode's details that hold text (replaced by their index in the chunk's table).
_TEXT_FIELDS = ("grade", "log", "error", "patch")


def _packed(episode: dict[str, Any], strings: Strings) -> dict[str, Any]:
    def message(m: dict[str, Any]) -> dict[str, Any]:
        return {**m, "text": strings.add(m["text"])}

    def turn(t: dict[str, Any]) -> dict[str, Any]:
        return {
            **t,
            "reply": message(t["reply"]),
            "observation": [message(m) for m in t["observation"]],
            "info": None if t["info"] is None else strings.add(t["info"]),
        }

    out = {
        k: v for k, v in episode.items() if k not in ("task", "suite", "outcome", "reward", "step", "label")
    }
    out["prompt"] = [message(m) for m in episode["prompt"]]
    out["turns"] = [turn(t) for t in episode["turns"]]
    for key in _TEXT_FIELDS:
        out[key] = None if episode[key] is None else strings.add(episode[key])
    return out
