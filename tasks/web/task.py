"""Web tasks: a WebTask model, the JSON loader, the `web-mini` suite's data and its scripted policies.

A web task names the self-hosted sites it runs against (`shop`, `admin`: each reachable in
the browser as `http://<site>.test/`), where the browser starts, what the agent is asked
to do, how success is checked, and a scripted solution:

    {
      "id": "shop-buy-mouse",
      "intent": "Buy two gray Wireless Mouse M2 ...",
      "sites": ["shop"],
      "start_url": "http://shop.test/",
      "evaluator": [{"type": "state", "site": "shop", "path": "orders",
                     "contains": {"items": [{"sku": "AC-100", "qty": 2}]}}],
      "solution": [{"action": "fill", "target": {"role": "textbox", "name": "Search"}, "text": "mouse"},
                   {"action": "click", "target": {"role": "button", "name": "Search"}}, ...]
    }

Checks (all must pass for reward 1.0): `url` (the final page's URL), `page` (the final
page's text), `answer` (the text of `answer(...)`), `state` (the site's own backend state,
read from its admin endpoint, e.g. the order that was placed). This module is plain data
plus the scripted policies; the env (`arborl.envs.web`) runs the checks.

The scripted (gold) policy reads the page the way a model does: from the accessibility
snapshot in the latest observation, it finds the element a step targets by role and name
and replies with that element's id (`click(e12)`), so it also checks that the observation
carries what a model needs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..task_types import Task

DATA_DIR = Path(__file__).resolve().parent / "data"
WEB_MINI_DIR = DATA_DIR / "web-mini"
SITE_DOMAIN = "test"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UrlCheck(_Model):
    """The final page's URL matches `value`."""

    type: Literal["url"] = "url"
    match: Literal["exact", "prefix", "contains", "regex"] = "exact"
    value: str


class PageCheck(_Model):
    """The final page's visible text contains (or does not contain) a string."""

    type: Literal["page"] = "page"
    contains: str | None = None
    not_contains: str | None = None

    @model_validator(mode="after")
    def _something(self) -> PageCheck:
        if self.contains is None and self.not_contains is None:
            raise ValueError("a page check needs `contains` or `not_contains`")
        return self


class AnswerCheck(_Model):
    """The agent's `answer(...)` text: `exact`/`contains` (case-insensitive), `number`, `regex`."""

    type: Literal["answer"] = "answer"
    match: Literal["exact", "contains", "number", "regex"] = "exact"
    value: str | float
    tolerance: float = Field(1e-6, ge=0, description="absolute tolerance of `number`")


class StateCheck(_Model):
    """A value in a site's backend state (its admin `/state` JSON), at a dotted `path`.

    `path` walks keys and list indices (`orders.-1.total`); a list step may also select by
    field, `users[username=bob].role`. Exactly one condition: `equals` (the value), `contains`
    (a list with an element matching the pattern: dicts match on the keys they name, lists
    on every element they list, strings case-insensitively), `absent` (some element matching
    `contains`-style pattern must not exist), or `count` (the list's length).
    """

    type: Literal["state"] = "state"
    site: str
    path: str = ""
    equals: Any = None
    contains: Any = None
    absent: Any = None
    count: int | None = None

    @model_validator(mode="after")
    def _one_condition(self) -> StateCheck:
        given = [k for k in ("equals", "contains", "absent", "count") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a state check needs exactly one of equals/contains/absent/count, got {given}")
        return self


WebCheck = Annotated[UrlCheck | PageCheck | AnswerCheck | StateCheck, Field(discriminator="type")]


class Target(_Model):
    """An element found by its accessible role and name (what the snapshot prints)."""

    role: str
    name: str
    exact: bool = Field(True, description="False: the name only has to contain `name`")
    nth: int = Field(0, description="which match, in page order")


class WebStep(_Model):
    """One step of a scripted solution."""

    action: Literal["click", "fill", "select", "hover", "press", "scroll", "goto", "go_back", "answer"]
    target: Target | None = None
    text: str | None = None
    option: str | None = None
    key: str | None = None
    direction: Literal["up", "down", "left", "right"] | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _arguments(self) -> WebStep:
        need = {
            "click": ("target",),
            "fill": ("target", "text"),
            "select": ("target", "option"),
            "hover": ("target",),
            "press": ("key",),
            "scroll": ("direction",),
            "goto": ("url",),
            "answer": ("text",),
        }.get(self.action, ())
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"step {self.action} needs {', '.join(missing)}")
        return self


class WebTask(Task):
    """A web task: sites, a start page, an instruction, checks and a scripted solution."""

    kind: Literal["web"] = "web"
    intent: str = Field(min_length=1, description="what the agent is asked to do")
    sites: tuple[str, ...] = Field(min_length=1, description="sites the task uses (reachable as <site>.test)")
    start_url: str = Field(description="where the browser starts, on one of the task's sites")
    evaluator: tuple[WebCheck, ...] = Field(min_length=1, description="checks; all must pass")
    solution: tuple[WebStep, ...] = Field((), description="a scripted solution (gold policy)")

    @model_validator(mode="after")
    def _sites_consistent(self) -> WebTask:
        hosts = {site_host(s) for s in self.sites}
        host = urlsplit(self.start_url).hostname
        if host not in hosts:
            raise ValueError(
                f"start_url {self.start_url!r} is not on one of the task's sites {sorted(hosts)}"
            )
        for check in self.evaluator:
            if isinstance(check, StateCheck) and check.site not in self.sites:
                raise ValueError(f"a state check reads site {check.site!r}, which the task does not list")
        return self

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(site_host(s) for s in self.sites)


def site_host(site: str) -> str:
    """The hostname a site has in the browser."""
    return f"{site}.{SITE_DOMAIN}"


# ---- loading -------------------------------------------------------------------------------
def load_web_task(path: str | Path) -> WebTask:
    """One task from a JSON file; errors name the file."""
    try:
        return WebTask.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
    except (ValueError, OSError) as e:
        raise ValueError(f"{path}: not a web task: {e}") from e


def load_web_tasks(directory: str | Path) -> list[WebTask]:
    """Every `*.json` task in a directory, in file-name order."""
    files = sorted(Path(directory).glob("*.json"))
    if not files:
        raise ValueError(f"no web task JSON files in {directory}")
    return [load_web_task(f) for f in files]


def load_web_mini() -> list[WebTask]:
    """The `web-mini` suite: shop, admin and cross-site tasks on the self-hosted sites."""
    return load_web_tasks(WEB_MINI_DIR)


# ---- reading the page as the observation shows it ----------------------------------------------
# A snapshot line: `- role "name" [ref=e12] ...`, YAML-quoted as `- 'role "name" ...'` when the
# name holds YAML syntax (`#`, `: `), with the quote doubled inside.
# An unnamed element may show its text inline: `- generic [ref=e5]: Categories`.
_NODE = re.compile(
    r"""^\s*- '?(?P<role>[a-z]+)(?: "(?P<name>(?:[^"\\]|\\.)*)")?(?P<attrs>(?: \[[^\]]*\])*)"""
    r"""(?::[ ]+(?P<text>[^\n]+)|'?:?)$""",
    re.MULTILINE,
)
_REF = re.compile(r"\[ref=([a-z0-9]+)\]")


def _unquote(raw: str | None, yaml_quoted: bool) -> str:
    if raw is None:
        return ""
    if yaml_quoted:
        raw = raw.replace("''", "'")
    try:
        return str(json.loads(f'"{raw}"')).lower()
    except ValueError:
        return raw.lower()


def find_element(page_text: str, target: Target | Mapping[str, Any]) -> str | None:
    """The id (`e12`) of the element an accessibility snapshot shows with `target`'s role and
    name, or None. Names compare case-insensitively (exactly, or by containment)."""
    t = target if isinstance(target, Target) else Target.model_validate(dict(target))
    want = t.name.lower()
    hits = []
    for m in _NODE.finditer(page_text):
        ref = _REF.search(m.group("attrs") or "")
        if ref is None or m.group("role") != t.role:
            continue
        name = _unquote(m.group("name"), yaml_quoted=m.group(0).lstrip().startswith("- '"))
        if m.group("name") is None and m.group("text"):
            name = m.group("text").strip().strip("\"'").lower()
        if name == want or (not t.exact and want in name):
            hits.append(ref.group(1))
    return hits[t.nth] if len(hits) > t.nth else None


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def step_to_action(step: WebStep, page_text: str) -> str:
    """The action text for a scripted step, given the current page's observation."""
    ref = None
    if step.target is not None:
        ref = find_element(page_text, step.target)
        if ref is None:
            return f"answer({_quote(f'gold policy: no {step.target.role} named {step.target.name!r} on the page')})"
    if step.action in ("click", "hover"):
        return f"{step.action}({ref})"
    if step.action == "fill":
        return f"fill({ref}, {_quote(step.text or '')})"
    if step.action == "select":
        return f"select({ref}, {_quote(step.option or '')})"
    if step.action == "press":
        return f"press({ref}, {_quote(step.key or '')})" if ref else f"press({_quote(step.key or '')})"
    if step.action == "scroll":
        return f"scroll({step.direction})"
    if step.action == "goto":
        return f"goto({_quote(step.url or '')})"
    if step.action == "go_back":
        return "go_back()"
    return f"answer({_quote(step.text or '')})"


def scripted_policy(steps: tuple[WebStep, ...] | list[WebStep]) -> Any:
    """A policy `(messages, info) -> reply` that plays `steps` in order (one per turn),
    resolving targets against the latest observation; after the last, it answers ""."""
    steps = tuple(steps)

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        page = next((m["content"] for m in reversed(messages) if m.get("role") != "assistant"), "")
        if turn >= len(steps):
            return 'answer("")'
        return step_to_action(steps[turn], page)

    return policy


def gold_policy(task: WebTask) -> Any:
    """The task's scripted solution as a policy (suite validation: every task resolves)."""
    if not task.solution:
        raise ValueError(f"task {task.id} has no scripted solution")
    return scripted_policy(task.solution)


def empty_policy(task: WebTask) -> Any:
    """Gives up at once: `answer("")` (suite validation: no task resolves)."""
    return lambda messages, info: 'answer("")'
