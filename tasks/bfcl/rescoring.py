"""One bfcl-eval result scored as bfcl-eval's runner scores it, entry by entry.

The steps are its runner's (`eval_checker/eval_runner.py`); the decoding is its handlers'
(`decoding`); every verdict comes from its checkers, through arborl's grading (`grading`):

- AST categories (`_evaluate_single_ast_entry`): decode in the category's language (a failure
  is `ast_decoder:decoder_failed`), check the decoded shape (`is_function_calling_format_output`,
  else `ast_decoder:decoder_wrong_output_format`), then `ast_checker`, given the model name
  whose `underscore_to_dot` says whether the model saw `math.gcd` as `math_gcd`.
- relevance categories (`_evaluate_single_relevance_entry`): a call is there when the reply
  decodes (as Python) to something `is_empty_output` does not call empty.
- multi-turn (`_evaluate_single_multi_turn_entry`): the result must be a list
  (`multi_turn:inference_error`) of as many turns as the ground truth
  (`multi_turn:force_terminated`); each step is decoded to call strings, a step that fails to
  decode or decodes to nothing is skipped, and the turns go to arborl's multi-turn loop over
  bfcl-eval's `state_checker` and `response_checker` (`grading.score_multi_turn`).

Whether the model saw names mangled is detected from the calls (`underscored`) unless given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .data import BfclTask
from .decoding import Decoder, call_of, decode_ast, decode_execute
from .grading import Verdict, check_ast, score_multi_turn
from .official import MODEL_NAME, UNDERSCORED_MODEL_NAME, bfcl, bfcl_decoders


@dataclass
class Scored:
    """A result's verdict, with what bfcl-eval decoded from it (None when it could not)."""

    verdict: Verdict
    decoded: Any = field(default=None)


def score_result(task: BfclTask, result: Any, decoder: Decoder, underscored: bool = False) -> Scored:
    """The verdict on `result` (a result file's `result` field) for `task`."""
    if task.scoring == "multi_turn":
        return _score_multi_turn(task, result, decoder)
    lib = bfcl_decoders()
    if task.scoring == "relevance":
        try:
            decoded = decode_ast(result, decoder, "PYTHON")
            has_call, why = not lib.is_empty_output(decoded), ""
        except Exception as e:  # bfcl-eval: a reply that does not decode holds no call
            decoded, has_call, why = None, False, str(e)
        if "irrelevance" in task.category:
            ok, kind = not has_call, "irrelevance_error:decoder_success"
            message = "Valid syntax. Successfully decode AST when it should not."
        else:
            ok, kind = has_call, "relevance_error:decoder_failed"
            message = f"Invalid syntax. Failed to decode AST when it should have. {why}"
        return Scored(Verdict(True) if ok else Verdict(False, kind, [message]), decoded)
    try:
        decoded = decode_ast(result, decoder, task.language)
    except Exception as e:
        return Scored(
            Verdict(False, "ast_decoder:decoder_failed", [f"Invalid syntax. Failed to decode AST. {e}"])
        )
    if not lib.is_function_calling_format_output(decoded):
        message = "Did not output in the specified format. Note: the model_result is wrapped in a string to ensure json serializability."
        return Scored(Verdict(False, "ast_decoder:decoder_wrong_output_format", [message]), str(decoded))
    model = UNDERSCORED_MODEL_NAME if underscored else MODEL_NAME
    return Scored(check_ast(task, decoded, model), decoded)


def _score_multi_turn(task: BfclTask, result: Any, decoder: Decoder) -> Scored:
    if not isinstance(result, list):
        message = "Error during inference phase. Model did not output a list of model responses."
        return Scored(Verdict(False, "multi_turn:inference_error", [message]))
    if len(result) != len(task.ground_truth):
        message = (
            "Model was force-terminated during inference phase. The length of the model result "
            f"turns ({len(result)}) does not match the length of the ground truth turns "
            f"({len(task.ground_truth)})."
        )
        return Scored(Verdict(False, "multi_turn:force_terminated", [message]))
    is_empty = bfcl().is_empty_execute_response
    decoded: list[list[list[str]]] = []
    for turn in result:
        steps = []
        for step in turn if isinstance(turn, Iterable) else ():
            try:
                calls = decode_execute(step, decoder)
            except Exception:  # bfcl-eval skips a step it cannot decode (chat text)
                continue
            if not is_empty(calls):
                steps.append(calls)
        decoded.append(steps)
    turns = [[[call_of(c) for c in step] for step in steps] for steps in decoded]
    return Scored(score_multi_turn(task, turns), decoded)


def mangled_names(task: BfclTask) -> dict[str, str]:
    """The task's dotted function names as a model that cannot take dots saw them (bfcl-eval's
    `re.sub(r"\\.", "_", name)`), mapped to the names."""
    names = [f["name"] for f in task.entry.get("function") or []]
    return {re.sub(r"\.", "_", n): n for n in names if "." in n}


def underscored(tasks_and_results: Iterable[tuple[BfclTask, Any]], decoder: Decoder) -> tuple[bool, str]:
    """Whether the model saw dotted names mangled, from its calls on AST entries: how many
    call a dotted name as it is, and how many call its mangled form (the majority decides);
    and the evidence in words."""
    dotted = mangled = 0
    for task, result in tasks_and_results:
        if task.scoring != "ast":
            continue
        try:
            calls = decode_ast(result, decoder, task.language)
            names = [next(iter(c)) for c in calls if isinstance(c, dict) and c]
        except Exception:  # an undecodable reply says nothing about names
            continue
        known = {f["name"] for f in task.entry.get("function") or []}
        mangled_forms = mangled_names(task)
        dotted += sum(n in known and "." in n for n in names)
        mangled += sum(n not in known and n in mangled_forms for n in names)
    evidence = f"{mangled} call(s) name a dotted function with '_' for '.', {dotted} name one with its dots"
    return mangled > dotted, evidence
