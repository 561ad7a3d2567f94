"""BFCL's own data files as arborl tasks: one `BfclTask` per entry of a category.

Entries come from bfcl-eval's loaders (`load_dataset_entry`, `load_ground_truth_entry`),
so a task holds exactly what bfcl-eval's runner gives a model: the question turns, the
function docs (for multi-turn, the involved classes' docs with the held-out ones moved to
`missed_function`, and the language hint added to descriptions), and the ground truth
(`possible_answer/`: per-call allowed values, or per-turn call lists for multi-turn).
Irrelevance categories have no ground truth file: abstaining is the answer.

Java and JavaScript entries also keep the docs bfcl-eval's evaluator gives its checker
(`checker_function`: loaded without the language hint, so with their Java/JS types), since
the model's docs have every type turned into "string" and the checker converts the model's
source-string values by the original type.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import Field

from ..task_types import Task
from .official import bfcl_utils

#: Categories that run offline, with their kind of scoring.
AST_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "simple_java",
    "simple_javascript",
)
#: The AST categories whose checker language is not Python (bfcl-eval's `Language` names).
LANGUAGES = {"simple_java": "JAVA", "simple_javascript": "JAVASCRIPT"}
RELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance")
MULTI_TURN_CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
#: Categories that need a network or a judge (web_search: live search engine; memory: its
#: prerequisite conversations and vector store; format_sensitivity: prompting-format variants).
NOT_OFFLINE = ("web_search", "memory", "format_sensitivity")

Kind = Literal["ast", "relevance", "multi_turn"]


class BfclTask(Task):
    """One BFCL entry: its prompt entry as bfcl-eval loads it and its ground truth."""

    kind: Literal["bfcl"] = "bfcl"
    category: str = Field(description="BFCL's test category, e.g. simple_python, multi_turn_base")
    entry: dict[str, Any] = Field(
        description="bfcl-eval's prompt entry (question, function, initial_config, ...)"
    )
    ground_truth: list[Any] = Field(
        default_factory=list, description="possible_answer's ground_truth ([] for irrelevance)"
    )
    checker_function: list[dict[str, Any]] | None = Field(
        default=None,
        description="Java/JS: the function docs bfcl-eval's checker reads (no language hint, "
        "original types); None: the checker reads entry['function']",
    )

    @property
    def language(self) -> str:
        """bfcl-eval's `Language` name the checker scores this task's values in."""
        return LANGUAGES.get(self.category, "PYTHON")

    @property
    def scoring(self) -> Kind:
        return category_kind(self.category)

    @property
    def turns(self) -> list[list[dict[str, Any]]]:
        """The user turns (multi-turn); a held-out-function turn is empty in the data."""
        return list(self.entry["question"])


def category_kind(category: str) -> Kind:
    if category in AST_CATEGORIES:
        return "ast"
    if category in RELEVANCE_CATEGORIES:
        return "relevance"
    if category in MULTI_TURN_CATEGORIES:
        return "multi_turn"
    raise ValueError(
        f"BFCL category {category!r} is not offline-scorable here; known: "
        f"{', '.join(AST_CATEGORIES + RELEVANCE_CATEGORIES + MULTI_TURN_CATEGORIES)}"
    )


@functools.cache
def _load(category: str) -> tuple[BfclTask, ...]:
    kind = category_kind(category)
    utils = bfcl_utils()
    entries = utils.load_dataset_entry(category)
    answers = [] if kind == "relevance" else utils.load_ground_truth_entry(category)
    if answers and len(answers) != len(entries):
        raise ValueError(f"BFCL {category}: {len(entries)} entries but {len(answers)} possible answers")
    raw = _checker_docs(category)
    tasks = []
    for i, entry in enumerate(entries):
        # possible_answer is aligned with the prompts by index (bfcl-eval's runner says so)
        truth = answers[i]["ground_truth"] if answers else []
        tasks.append(
            BfclTask(
                id=entry["id"],
                category=category,
                entry=entry,
                ground_truth=truth,
                checker_function=raw[entry["id"]] if raw else None,
                metadata={"suite": category},
            )
        )
    return tuple(tasks)


def _checker_docs(category: str) -> dict[str, list[dict[str, Any]]]:
    """Java/JS: the docs by entry id, as bfcl-eval's evaluator loads them for its checker."""
    if category not in LANGUAGES:
        return {}
    entries = bfcl_utils().load_dataset_entry(
        category, include_prereq=False, include_language_specific_hint=False
    )
    return {e["id"]: e["function"] for e in entries}


def load_category(category: str, limit: int | None = None) -> list[BfclTask]:
    """The tasks of one BFCL category (the first `limit` if given)."""
    tasks = list(_load(category))
    return tasks[:limit] if limit is not None else tasks


def load_categories(*categories: str) -> list[BfclTask]:
    return [t for c in categories for t in load_category(c)]
