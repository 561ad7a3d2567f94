"""OSWorld's metrics that make sense without a VM: pure functions of what the getters returned.

Each takes `(result, expected, **options)` as in OSWorld (desktop_env/evaluators/metrics/) and
returns a score in [0, 1]. File metrics get host paths (a `vm_file` or `cache_file` getter)
and score 0 for a missing file (None). `fuzzy_match` uses difflib's ratio where OSWorld uses
rapidfuzz's: both are 1.0 for equal strings and close otherwise, not identical in between.

`METRIC_FUNCS` is every metric by the name a task's evaluator `func` gives: these, the
`os` domain's and `multi_apps`' from `os_metrics.py`, LibreOffice's (`compare_table`,
`compare_docx_files`) from `office_metrics.py` and `check_accessibility_tree` from
`a11y_metrics.py`.
"""

from __future__ import annotations

import csv
import difflib
import json
import operator
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from .a11y_metrics import A11Y_METRICS
from .office_metrics import OFFICE_METRICS
from .os_metrics import OS_METRICS

Metric = Callable[..., float]


def _read(path: Any) -> str | None:
    if not path:
        return None
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def exact_match(result: Any, rules: Mapping[str, Any]) -> float:
    return float(result == rules["expected"])


def match_in_list(result: Any, rules: Mapping[str, Any]) -> float:
    return float(result in rules["expected"])


def is_in_list(result: Any, rules: Mapping[str, Any]) -> float:
    return float(result is not None and rules["expected"] in result)


def check_include_exclude(result: Any, rules: Mapping[str, Any]) -> float:
    if result is None:
        return 0.0
    text = str(result)
    include, exclude = rules.get("include", []), rules.get("exclude", [])
    return float(all(s in text for s in include) and not any(s in text for s in exclude))


def fuzzy_match(result: Any, rules: Mapping[str, Any]) -> float:
    if result is None:
        return 0.0
    return difflib.SequenceMatcher(a=str(result), b=str(rules["expected"])).ratio()


def literal_match(result: Any, expected: Any, type: str = "str", ignore_case: bool = False) -> float:
    def norm(x: Any) -> str:
        return str(x).lower() if ignore_case else str(x)

    if type == "str":
        return float(norm(result) == norm(expected))
    if type == "list":
        if not isinstance(result, list | tuple) or not isinstance(expected, list | tuple):
            return 0.0
        return float([norm(x) for x in result] == [norm(x) for x in expected])
    raise ValueError(f"literal_match: unknown type {type!r} (str or list)")


def compare_text_file(
    result: Any, expected: Any, ignore_blanks: bool = False, ignore_case: bool = False
) -> float:
    actual, want = _read(result), _read(expected)
    if actual is None or want is None:
        return 0.0
    if ignore_blanks:  # every run of whitespace counts as one space; ends trimmed
        actual, want = (re.sub(r"\s+", " ", t).strip() for t in (actual, want))
    if ignore_case:
        actual, want = actual.lower(), want.lower()
    return float(actual == want)


def diff_text_file(result: Any, expected: Any) -> float:
    actual, want = _read(result), _read(expected)
    if actual is None or want is None:
        return 0.0
    return difflib.SequenceMatcher(a=actual.splitlines(), b=want.splitlines()).ratio()


def file_contains(result: Any, rules: Mapping[str, Any]) -> float:
    text = _read(result)
    return float(text is not None and all(s in text for s in rules["expected"]))


def check_list(result: Any, rules: Mapping[str, Any]) -> float:
    """Every `expect` regex matches some line; no `unexpect` regex matches any line."""
    text = _read(result)
    if text is None:
        return 0.0
    lines = text.splitlines()
    expect = [re.compile(p) for p in rules.get("expect", [])]
    unexpect = [re.compile(p) for p in rules.get("unexpect", [])]
    found = all(any(p.search(line) for line in lines) for p in expect)
    clean = not any(p.search(line) for p in unexpect for line in lines)
    return float(found and clean)


def _match_record(pattern: Mapping[str, Any], record: Mapping[str, Any]) -> bool:
    return all(k in record and record[k] == v for k, v in pattern.items())


def check_csv(result: Any, rules: Mapping[str, Any]) -> float:
    """Some row matches each `expect` record; no row matches an `unexpect` record."""
    text = _read(result)
    if text is None:
        return 0.0
    rows = list(csv.DictReader(text.splitlines()))
    found = all(any(_match_record(r, row) for row in rows) for r in rules.get("expect", []))
    clean = not any(_match_record(r, row) for r in rules.get("unexpect", []) for row in rows)
    return float(found and clean)


def compare_csv(result: Any, expected: Any, strict: bool = True, ignore_case: bool = False) -> float:
    actual, want = _read(result), _read(expected)
    if actual is None or want is None:
        return 0.0
    a, b = actual.splitlines(), want.splitlines()
    if not strict:
        a, b = [x.strip() for x in a], [x.strip() for x in b]
    if ignore_case:
        a, b = [x.lower() for x in a], [x.lower() for x in b]
    return float(a == b)


_OPS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le}
_OPS |= {"gt": operator.gt, "ge": operator.ge}


def match_value_to_rule(value: Any, rule: Mapping[str, Any]) -> bool:
    """OSWorld's rule matching: `re[.FLAG]`, comparisons, `approx:EPS`, `str_list_eq`."""
    method, ref = str(rule["method"]), rule.get("ref")
    if method.startswith("re"):
        flags = 0
        for name in method.split(".")[1:]:
            flags |= getattr(re, name.upper())
        return value is not None and re.search(str(ref), str(value), flags) is not None
    if method in _OPS:
        try:
            return bool(_OPS[method](value, ref))
        except TypeError:
            return False
    if method.startswith("approx"):
        eps = float(method.split(":")[1]) if ":" in method else 1e-6
        try:
            return abs(float(value) - float(ref)) <= eps
        except (TypeError, ValueError):
            return False
    if method == "str_list_eq":
        return isinstance(value, list) and [str(v) for v in value] == [str(r) for r in ref]
    raise ValueError(f"unknown rule method {method!r}")


def check_json(result: Any, rules: Mapping[str, Any], is_yaml: bool = False) -> float:
    text = _read(result)
    if text is None:
        return 0.0
    try:
        data = yaml.safe_load(text) if is_yaml else json.loads(text)
    except (ValueError, yaml.YAMLError):
        return 0.0

    def lookup(keys: list[Any]) -> tuple[bool, Any]:
        value = data
        for k in keys:
            try:
                value = value[k]
            except (KeyError, IndexError, TypeError):
                return False, None
        return True, value

    for rule in rules.get("expect", []):
        ok, value = lookup(rule["key"])
        if not ok or not match_value_to_rule(value, rule):
            return 0.0
    for rule in rules.get("unexpect", []):
        ok, value = lookup(rule["key"])
        if ok and match_value_to_rule(value, rule):
            return 0.0
    return 1.0


def check_direct_json_object(result: Any, rules: Mapping[str, Any]) -> float:
    """`result` (JSON text or a dict) holds every expected key with the expected value (or,
    with `expect_in_result`, contains the expected string / one of the expected items)."""
    if isinstance(result, str):
        try:
            result = json.loads(result.strip().replace("'", '"'))
        except ValueError:
            return 0.0
    if not isinstance(result, dict):
        return 0.0
    expected = rules["expected"]
    if not rules.get("expect_in_result", False):
        return float(all(result.get(k) == v for k, v in expected.items()))
    for key, want in expected.items():
        got = result.get(key)
        if isinstance(want, list):
            if not (isinstance(got, list) and any(w in got for w in want)):
                return 0.0
        elif isinstance(want, str):
            if not (isinstance(got, str) and want in got):
                return 0.0
        else:
            return 0.0
    return 1.0


def compare_answer(result: Any, rules: Mapping[str, Any]) -> float:
    return float(bool(result) and result == rules["expected"])


def compare_result_files(result: Any, expected: Any) -> float:
    """Two files' text equal, or their numbers equal to 1e-4 (or the expected number appears)."""
    actual, want = _read(result), _read(expected)
    if actual is None or want is None:
        return 0.0
    actual, want = actual.strip(), want.strip()
    try:
        target = float(want)
    except ValueError:
        return float(actual == want)
    if want in actual:
        return 1.0
    try:
        return float(abs(float(actual) - target) < 1e-4)
    except ValueError:
        return 0.0


METRIC_FUNCS: dict[str, Metric] = {
    f.__name__: f
    for f in (
        exact_match,
        match_in_list,
        is_in_list,
        check_include_exclude,
        fuzzy_match,
        literal_match,
        compare_text_file,
        diff_text_file,
        file_contains,
        check_list,
        check_csv,
        compare_csv,
        check_json,
        check_direct_json_object,
        compare_answer,
        compare_result_files,
    )
}
METRIC_FUNCS.update(OS_METRICS)
METRIC_FUNCS.update(OFFICE_METRICS)
METRIC_FUNCS.update(A11Y_METRICS)
