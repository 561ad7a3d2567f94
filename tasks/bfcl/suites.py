"""The BFCL suites (`arborl.tasks.suites` imports this module to register them): one per
offline category of BFCL v4, plus `bfcl-multi-turn` (its four multi-turn categories)."""

from __future__ import annotations

import functools

from ..suites import Suite, register_suite
from .data import AST_CATEGORIES, MULTI_TURN_CATEGORIES, RELEVANCE_CATEGORIES, BfclTask, load_categories

ENV_ID = "arborl/BFCL-v0"
GOLD = "arborl.tasks.bfcl.policies:gold_policy"
EMPTY = "arborl.tasks.bfcl.policies:empty_policy"
#: Replies an episode may take: multi-turn entries run up to 8 user turns, and bfcl-eval
#: force-quits a turn after 20 steps.
MULTI_TURN_MAX_TURNS = 200


#: BFCL's names before v4 split "simple" by language (v3: simple, java, javascript).
_SHORT = {"simple_python": "simple", "simple_java": "java", "simple_javascript": "javascript"}


def suite_name(category: str) -> str:
    return "bfcl-" + _SHORT.get(category, category).replace("_", "-")


def _loader(*categories: str) -> functools.partial[list[BfclTask]]:
    return functools.partial(load_categories, *categories)


for _category in AST_CATEGORIES + RELEVANCE_CATEGORIES + MULTI_TURN_CATEGORIES:
    _multi = _category in MULTI_TURN_CATEGORIES
    register_suite(
        Suite(
            suite_name(_category),
            ENV_ID,
            _loader(_category),
            description=f"BFCL v4 {_category}, scored by bfcl-eval's checker",
            gold=GOLD,
            empty=EMPTY,
            max_turns=MULTI_TURN_MAX_TURNS if _multi else 1,
            tags=("bfcl", "tool", "multi-turn") if _multi else ("bfcl", "tool"),
        )
    )
register_suite(
    Suite(
        "bfcl-multi-turn",
        ENV_ID,
        _loader(*MULTI_TURN_CATEGORIES),
        description="BFCL v4 multi-turn: base, miss_func, miss_param, long_context (800 entries)",
        gold=GOLD,
        empty=EMPTY,
        max_turns=MULTI_TURN_MAX_TURNS,
        tags=("bfcl", "tool", "multi-turn"),
    )
)
