"""Run a web task's checks against what the episode left: the final URL, the final page's
text, the agent's answer, and the sites' own backend state (pure functions, no browser)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from arborl.tasks.web import AnswerCheck, PageCheck, StateCheck, UrlCheck

_MISSING = object()
_SELECT = re.compile(r"^(?P<key>[^\[\]]*)\[(?P<field>[^=\]]+)=(?P<value>[^\]]*)\]$")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def resolve_path(data: Any, path: str) -> Any:
    """The value at a dotted path: keys, list indices (`-1`), selections (`users[username=bob]`).
    Returns `_MISSING` (never raises) when the path leads nowhere."""
    cur = data
    for part in [p for p in path.split(".") if p] if path else []:
        m = _SELECT.match(part)
        key, sel = (m.group("key"), (m.group("field"), m.group("value"))) if m else (part, None)
        if key:
            if isinstance(cur, Mapping):
                cur = cur.get(key, _MISSING)
            elif isinstance(cur, list) and re.fullmatch(r"-?\d+", key):
                i = int(key)
                cur = cur[i] if -len(cur) <= i < len(cur) else _MISSING
            else:
                return _MISSING
            if cur is _MISSING:
                return _MISSING
        if sel is not None:
            if not isinstance(cur, list):
                return _MISSING
            field, value = sel
            cur = next((x for x in cur if isinstance(x, Mapping) and str(x.get(field)) == value), _MISSING)
            if cur is _MISSING:
                return _MISSING
    return cur


def matches(pattern: Any, value: Any) -> bool:
    """Subset match: dicts on the keys the pattern names, lists when every pattern element
    matches some element, strings case-insensitively (trimmed), numbers within 1e-6."""
    if isinstance(pattern, Mapping):
        return isinstance(value, Mapping) and all(
            k in value and matches(v, value[k]) for k, v in pattern.items()
        )
    if isinstance(pattern, list):
        return isinstance(value, list) and all(any(matches(p, v) for v in value) for p in pattern)
    if isinstance(pattern, bool) or isinstance(value, bool):
        return pattern is value
    if isinstance(pattern, int | float) and isinstance(value, int | float):
        return math.isclose(pattern, value, abs_tol=1e-6)
    if isinstance(pattern, str) and isinstance(value, str):
        return pattern.strip().lower() == value.strip().lower()
    return bool(pattern == value)


def _first_number(text: str) -> float | None:
    m = _NUMBER.search(text.replace("$", ""))
    return float(m.group().replace(",", "")) if m else None


def check_url(check: UrlCheck, url: str) -> bool:
    if check.match == "exact":
        return url.rstrip("/") == check.value.rstrip("/")
    if check.match == "prefix":
        return url.startswith(check.value)
    if check.match == "contains":
        return check.value in url
    return re.search(check.value, url) is not None


def check_page(check: PageCheck, text: str) -> bool:
    low = text.lower()
    ok = check.contains is None or check.contains.lower() in low
    return ok and (check.not_contains is None or check.not_contains.lower() not in low)


def check_answer(check: AnswerCheck, answer: str | None) -> bool:
    if answer is None or not answer.strip():
        return False
    got, want = answer.strip(), str(check.value).strip()
    if check.match == "exact":
        return got.lower().strip(" .") == want.lower()
    if check.match == "contains":
        return want.lower() in got.lower()
    if check.match == "regex":
        return re.search(want, got, re.IGNORECASE) is not None
    number = _first_number(got)
    return number is not None and abs(number - float(check.value)) <= check.tolerance


def check_state(check: StateCheck, state: Any) -> bool:
    value = resolve_path(state, check.path)
    if value is _MISSING:
        return check.absent is not None  # nothing there, so nothing matching it either
    if check.equals is not None:
        return matches(check.equals, value)
    if check.count is not None:
        return isinstance(value, list) and len(value) == check.count
    if not isinstance(value, list):
        value = [value]
    if check.contains is not None:
        return any(matches(check.contains, v) for v in value)
    return not any(matches(check.absent, v) for v in value)


def run_checks(
    checks: Sequence[Any],
    *,
    url: str,
    page_text: str,
    answer: str | None,
    states: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """Each check with `passed`; a state check whose site state could not be read fails."""
    out = []
    for check in checks:
        if isinstance(check, UrlCheck):
            passed = check_url(check, url)
        elif isinstance(check, PageCheck):
            passed = check_page(check, page_text)
        elif isinstance(check, AnswerCheck):
            passed = check_answer(check, answer)
        elif isinstance(check, StateCheck):
            state = states.get(check.site)
            passed = state is not None and check_state(check, state)
        else:  # pragma: no cover - the WebTask model admits no other type
            passed = False
        out.append({**check.model_dump(exclude_none=True), "passed": bool(passed)})
    return out
