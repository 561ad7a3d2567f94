"""MiniWoB++ tasks (Farama's `miniwob` package) as arborl tasks: the `web-miniwob` suites.

    from arborl.tasks import get_suite
    suite = get_suite("web-miniwob")           # the tasks with a scripted solution, 2 seeds each
    env = gymnasium.make(suite.env_id)         # arborl/MiniWoB-v0 (arborl/Web-v0's machinery)

A MiniWoB task is one HTML page of the installed package (`miniwob/html/miniwob/NAME.html`)
whose JavaScript draws a random problem from a seed, shows the instruction in `#query` and
decides the reward itself (`core.endEpisode`). The task here is just the page's name and the
seed; the env serves the package's files to the browser (no network) and reads the reward
the page's own script set. The instruction is only known once the page has run, so the
policies below read it from the first observation (`Task: ...`).

Two suites: `web-miniwob`, the tasks that have a scripted solution here (gold resolves every
one, empty none), and `web-miniwob-all`, every task of the package that arborl's action
language can express (no gold policy; see docs/web.md for those that cannot run and why).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ..task_types import Task

#: Hostname the browser loads the package's files from (served by the env, never a network).
MINIWOB_HOST = "miniwob.test"

#: Tasks that need what arborl's action language has no word for: pointer coordinates on a
#: canvas or SVG, drag and drop, text selection with the mouse, or the system clipboard.
#: They load and score (the page's own reward), but no agent can solve them with
#: click/fill/select/hover/press/scroll; `web-miniwob-all` leaves them out.
NEEDS_POINTER: dict[str, str] = {
    **{n: "drag and drop" for n in (
        "drag-box", "drag-circle", "drag-cube", "drag-items", "drag-items-grid", "drag-shapes",
        "drag-shapes-2", "drag-single-shape", "drag-sort-numbers", "resize-textarea",
    )},
    **{n: "drawing or clicking at coordinates on a canvas/SVG" for n in (
        "bisect-angle", "chase-circle", "circle-center", "draw-circle", "draw-line",
        "find-midpoint", "right-angle", "click-pie", "click-pie-nodelay", "grid-coordinate",
        "use-colorwheel", "use-colorwheel-2",
    )},
    **{n: "a slider handle dragged by the mouse" for n in ("use-slider", "use-slider-2")},
    **{n: "text selected with the mouse" for n in ("highlight-text", "highlight-text-2")},
    **{n: "the system clipboard (copy and paste keys)" for n in ("copy-paste", "copy-paste-2")},
}  # fmt: skip


class MiniWoBTask(Task):
    """One MiniWoB++ page and the seed its problem is drawn from."""

    kind: Literal["miniwob"] = "miniwob"
    name: str = Field(pattern=r"^[a-z0-9-]+$", description="the page: miniwob/html/miniwob/NAME.html")
    seed: int = Field(0, description="Math.seedrandom seed: the same seed draws the same problem")
    time_limit_s: float = Field(
        600.0, gt=0, description="MiniWoB's own episode timer (it ends the episode with reward -1)"
    )

    @property
    def sites(self) -> tuple[str, ...]:
        return ()  # no site server: the env serves the package's files itself

    @property
    def start_url(self) -> str:
        return f"http://{MINIWOB_HOST}/miniwob/{self.name}.html"

    @property
    def intent(self) -> str:
        return f"the MiniWoB++ task {self.name} (its instruction is on the page)"


class MiniWoBMissing(RuntimeError):
    """The `miniwob` package is not installed."""


def html_dir() -> Path:
    """The installed package's `html/` folder (found without importing it: its import
    registers Gymnasium envs and pulls in Selenium)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise MiniWoBMissing("MiniWoB++ is not installed: pip install -c constraints.txt -e '.[ecosystem]'")
    return Path(next(iter(spec.submodule_search_locations))) / "html"


def task_names() -> list[str]:
    """Every MiniWoB++ task page the package ships."""
    return sorted(p.stem for p in (html_dir() / "miniwob").glob("*.html"))


# ---- scripted solutions ------------------------------------------------------------------------
# Each reads the instruction and the accessibility tree the agent sees and returns the next
# action, or None once it has nothing more to do.
_NODE = re.compile(r'- (?P<role>[a-z]+)(?: "(?P<name>(?:[^"\\]|\\.)*)")?[^\n]*?\[ref=(?P<ref>e\d+)\]')


def _nodes(page: str) -> list[tuple[str, str, str]]:
    out = []
    for m in _NODE.finditer(page):
        name = m.group("name") or ""
        with contextlib.suppress(ValueError):
            name = json.loads(f'"{name}"')
        out.append((m.group("role"), name, m.group("ref")))
    return out


def _find(page: str, role: str, name: str | None = None, nth: int = 0) -> str | None:
    hits = [ref for r, n, ref in _nodes(page) if r == role and (name is None or n.lower() == name.lower())]
    return hits[nth] if len(hits) > nth else None


def _quoted(intent: str) -> list[str]:
    return re.findall(r'"([^"]*)"', intent)


def _click(role: str, name: str | None = None) -> Callable[[str, str, int], str | None]:
    def step(intent: str, page: str, turn: int) -> str | None:
        ref = _find(page, role, name)
        return f"click({ref})" if turn == 0 and ref else None

    return step


def _click_quoted_button(intent: str, page: str, turn: int) -> str | None:
    ref = _find(page, "button", _quoted(intent)[0]) if turn == 0 else None
    return f"click({ref})" if ref else None


def _click_test_2(intent: str, page: str, turn: int) -> str | None:
    m = re.search(r"button (\w+)", intent)
    ref = _find(page, "button", m.group(1)) if m and turn == 0 else None
    return f"click({ref})" if ref else None


def _fill_then_submit(values: Callable[[str], list[str]]) -> Callable[[str, str, int], str | None]:
    """Fill the page's text boxes in order with `values(intent)`, then click its button."""

    def step(intent: str, page: str, turn: int) -> str | None:
        texts = values(intent)
        if turn < len(texts):
            ref = _find(page, "textbox", nth=turn)
            return f"fill({ref}, {json.dumps(texts[turn])})" if ref else None
        if turn == len(texts):
            ref = _find(page, "button")
            return f"click({ref})" if ref else None
        return None

    return step


def _checkboxes(intent: str, page: str, turn: int) -> str | None:
    m = re.match(r"Select (.*) and click Submit", intent)
    words = [] if m is None or m.group(1) == "nothing" else re.split(r", and |, | and ", m.group(1))
    if turn < len(words):
        ref = _find(page, "checkbox", words[turn])
        return f"click({ref})" if ref else None
    ref = _find(page, "button", "Submit") if turn == len(words) else None
    return f"click({ref})" if ref else None


def _choose_list(intent: str, page: str, turn: int) -> str | None:
    m = re.match(r"Select (.*) from the list and click Submit", intent)
    if m is None or turn > 1:
        return None
    ref = _find(page, "combobox") if turn == 0 else _find(page, "button", "Submit")
    if ref is None:
        return None
    return f"select({ref}, {json.dumps(m.group(1))})" if turn == 0 else f"click({ref})"


SOLUTIONS: dict[str, Callable[[str, str, int], str | None]] = {
    "click-test": _click("button", "Click Me!"),
    "click-test-2": _click_test_2,
    "click-button": _click_quoted_button,
    "click-dialog": _click("button", "Close"),
    "click-checkboxes": _checkboxes,
    "choose-list": _choose_list,
    "focus-text": _click("textbox"),
    "enter-text": _fill_then_submit(lambda i: _quoted(i)[:1]),
    "enter-password": _fill_then_submit(lambda i: _quoted(i)[:1] * 2),
    "login-user": _fill_then_submit(lambda i: _quoted(i)[:2]),
}
SEEDS = (0, 1)


def _intent(messages: list[dict[str, Any]]) -> str:
    first = next((m["content"] for m in messages if m.get("role") == "user"), "")
    m = re.search(r"^Task: (.*)$", first, re.MULTILINE)
    return m.group(1) if m else ""


def gold_policy(task: MiniWoBTask) -> Any:
    """The scripted solution of `task` as a policy `(messages, info) -> reply`."""
    solve = SOLUTIONS.get(task.name)
    if solve is None:
        raise ValueError(f"MiniWoB task {task.name} has no scripted solution (scripted: {sorted(SOLUTIONS)})")

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        page = next((m["content"] for m in reversed(messages) if m.get("role") != "assistant"), "")
        action = solve(_intent(messages), page, turn)
        return action if action is not None else 'answer("done")'

    return policy


def empty_policy(task: MiniWoBTask) -> Any:
    """Gives up at once (no MiniWoB page rewards doing nothing)."""
    return lambda messages, info: 'answer("")'


def load_web_miniwob() -> list[MiniWoBTask]:
    """`web-miniwob`: the tasks with a scripted solution, each at seeds 0 and 1."""
    names = set(task_names())
    return [
        MiniWoBTask(id=f"miniwob/{n}-s{s}", name=n, seed=s, metadata={"suite": "web-miniwob"})
        for n in sorted(SOLUTIONS)
        if n in names
        for s in SEEDS
    ]


def load_web_miniwob_all() -> list[MiniWoBTask]:
    """`web-miniwob-all`: every task arborl's action language can express, seed 0."""
    return [
        MiniWoBTask(id=f"miniwob/{n}", name=n, metadata={"suite": "web-miniwob-all"})
        for n in task_names()
        if n not in NEEDS_POINTER
    ]
