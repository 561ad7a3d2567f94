"""The `compare_table` rules the desktop env implements (`arborl.envs.desktop.office_metrics`),
checked at load time so that a task using another rule is refused before it runs.

OSWorld's rules (its desktop_env/evaluators/metrics/table.py) not listed here: `sparkline`,
`chart`, `style`, `freeze`, `zoom`, `data_validation`, `row_props`, `col_props`, `filter`,
`pivot_table`, and `check_cell` props other than `value` (cell styles). None of OSWorld's
`multi_apps` or `os` tasks uses them; its `libreoffice_calc` tasks do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: rule type -> (required keys, optional keys), besides "type".
TABLE_RULES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "sheet_name": (frozenset(), frozenset()),
    # OSWorld reads only `precision`; 3a93cae4's `ignore_case` is ignored there too
    "sheet_data": (frozenset({"sheet_idx0", "sheet_idx1"}), frozenset({"precision", "ignore_case"})),
    "sheet_print": (frozenset({"sheet_idx0", "sheet_idx1"}), frozenset({"ignore_case"})),
    "sheet_fuzzy": (frozenset({"sheet_idx0", "sheet_idx1", "rules"}), frozenset()),
    "check_cell": (frozenset({"sheet_idx", "coordinate", "props"}), frozenset()),
}
FUZZY_TYPES = ("exact_match", "includes", "included_by", "fuzzy_match")
FUZZY_KEYS = frozenset(
    {
        "range",
        "type",
        "threshold",
        "ignore_case",
        "ignore_chars",
        "trim_leadings",
        "trim_trailings",
        "normalization",
    }
)
#: OSWorld's sheet index: an int, or R/E (result/expected) + I<n> (position) / N<name>.
_SHEET_INDEX = re.compile(r"[RE](I\d+|N.*)", re.DOTALL)


def table_rules_problem(options: Mapping[str, Any], rule_methods: tuple[str, ...]) -> str | None:
    """What in compare_table's `options` the env cannot run (None: all of it can);
    `rule_methods` are the `method`s a check_cell value rule may use."""
    rules = options.get("rules")
    if not isinstance(rules, list):
        return f"compare_table needs `rules`, a list of rules; got {rules!r}"
    for r in rules:
        kind = r.get("type") if isinstance(r, Mapping) else None
        if kind not in TABLE_RULES:
            return f"compare_table rule type {kind!r} is not implemented; supported: {', '.join(TABLE_RULES)}"
        required, optional = TABLE_RULES[kind]
        keys = set(r) - {"type"}
        if required - keys or keys - required - optional:
            return (
                f"compare_table rule {kind!r} takes {sorted(required)} and optionally {sorted(optional)}; "
                f"got {sorted(keys)}"
            )
        for key in ("sheet_idx", "sheet_idx0", "sheet_idx1"):
            idx = r.get(key)
            if idx is not None and not isinstance(idx, int) and not _SHEET_INDEX.fullmatch(str(idx)):
                return f"compare_table: sheet index {idx!r} is not an int, RI<n>, RN<name>, EI<n> or EN<name>"
        if kind == "check_cell" and set(r["props"]) - {"value"}:
            return f"compare_table check_cell: cell properties {sorted(set(r['props']) - {'value'})} (styles) are not implemented"
        for rule in r["props"].values() if kind == "check_cell" else []:
            method = str(rule.get("method", "")) if isinstance(rule, Mapping) else ""
            if method.split(".")[0].split(":")[0] not in rule_methods:
                return f"compare_table check_cell: rule method {method!r}; supported: {rule_methods}"
        for sub in r.get("rules", []) if kind == "sheet_fuzzy" else []:
            if sub.get("type") not in FUZZY_TYPES or set(sub) - FUZZY_KEYS or "range" not in sub:
                return (
                    f"compare_table sheet_fuzzy rule {sub!r}: `range` and a type in {FUZZY_TYPES} are needed"
                )
    return None
