"""BFCL's scoring, by bfcl-eval's own checker functions.

A model's output reaches grading as parsed calls (arborl's tool-call parsers read the
reply; a reply the parser could not read counts as a failed decode, as a decoding exception
does in bfcl-eval's runner):

- AST categories: `ast_checker(functions, [{name: args}, ...], ground_truth, language,
  category, model)`, as `_evaluate_single_ast_entry` calls it; no calls, or a failed decode,
  is invalid. Java and JavaScript go in with `Language.JAVA` / `Language.JAVASCRIPT` and the
  docs bfcl-eval's evaluator loads for its checker (`BfclTask.checker_function`: the
  original Java/JS types, by which the checker converts the model's source-string values).
- relevance categories: valid when the reply holds no call (irrelevance) or some call
  (live_relevance), as `_evaluate_single_relevance_entry` decides.
- multi-turn: the loop of bfcl-eval's `multi_turn_checker`, re-executing the model's calls
  and the ground truth on fresh backends per turn and comparing them with bfcl-eval's
  `state_checker` and `response_checker` (its runner calls nothing else for multi-turn).
  The loop (about thirty lines) is written here because bfcl-eval's executes calls by
  `eval` and keeps backends in module globals (see `backends`); everything that decides
  validity is bfcl-eval's. `tests/tasks/bfcl/test_bfcl_parity.py` checks it item by item
  against bfcl-eval's runner.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .backends import Backends, parse_ground_truth_call
from .data import BfclTask
from .official import MODEL_NAME, bfcl

#: One step of a turn: the calls parsed from one reply, or None when it held none.
Calls = list[tuple[str, dict[str, Any]]]


@dataclass
class Verdict:
    valid: bool
    error_type: str = ""
    error: Any = field(default=None)

    @property
    def reward(self) -> float:
        return 1.0 if self.valid else 0.0


def score_single(task: BfclTask, calls: Calls | None) -> Verdict:
    """A single-turn reply: `calls` as parsed, None when it could not be decoded."""
    if task.scoring == "relevance":
        has_call = bool(calls)
        valid = not has_call if "irrelevance" in task.category else has_call
        return Verdict(valid, "" if valid else "relevance")
    if not calls:
        return Verdict(False, "ast_decoder:decoder_failed", "no function call could be read")
    return check_ast(task, [{name: dict(args)} for name, args in calls])


def check_ast(task: BfclTask, decoded: list[dict[str, Any]], model_name: str = MODEL_NAME) -> Verdict:
    """bfcl-eval's `ast_checker` on decoded calls (`[{name: {param: value}}, ...]`).
    `model_name`: `official.UNDERSCORED_MODEL_NAME` when the model saw dotted names mangled."""
    lib = bfcl()
    if task.language != "PYTHON" and task.checker_function is None:
        raise ValueError(
            f"BFCL {task.id}: a {task.language} task needs its typed docs (checker_function); "
            "load it with arborl.tasks.bfcl.data.load_category"
        )
    functions = task.entry["function"] if task.checker_function is None else task.checker_function
    result = lib.ast_checker(
        functions, decoded, task.ground_truth, lib.Language[task.language], task.category, model_name
    )
    return Verdict(bool(result["valid"]), result.get("error_type", ""), result.get("error"))


def score_multi_turn(task: BfclTask, turns: Sequence[Sequence[Calls]]) -> Verdict:
    """A multi-turn run: per user turn, the calls of each step that held calls."""
    truth: list[list[str]] = task.ground_truth
    if len(turns) != len(truth):
        return Verdict(False, "multi_turn:force_terminated", f"{len(turns)} turns run of {len(truth)}")
    lib = bfcl()
    long_context = "long_context" in task.category
    model = Backends(task.entry, long_context=long_context)
    # bfcl-eval keeps one set of ground-truth instances across the turns of an entry
    gold = Backends(task.entry, long_context=long_context)
    all_model_results: list[str] = []
    for index, (steps, gt_calls) in enumerate(zip(turns, truth, strict=True)):
        for step in steps:
            all_model_results += model.run(step)
        gt_results = gold.run([parse_ground_truth_call(c, gold) for c in gt_calls])
        if not gt_calls:
            continue
        if not steps or lib.is_empty_execute_response(list(steps)):
            return Verdict(False, "multi_turn:empty_turn_model_response", index)
        for check in (
            lib.state_checker(model.instances, gold.instances),
            lib.response_checker(all_model_results, gt_results, index),
        ):
            if not check["valid"]:
                return Verdict(False, check["error_type"], check.get("error_message"))
    return Verdict(True)
