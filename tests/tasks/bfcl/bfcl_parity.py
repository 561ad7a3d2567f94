"""One set of model outputs scored two ways: by arborl (the reply text through
`arborl/BFCL-v0`: arborl's parser, arborl's grading) and by bfcl-eval's own runner functions
(`_evaluate_single_ast_entry`, `_evaluate_single_relevance_entry`,
`_evaluate_single_multi_turn_entry`, with an OpenAI-style FC handler decoding the same calls
as bfcl-eval stores them: `[{name: json_arguments}]`, or the reply text when it made none).

bfcl-eval's side gets what its evaluator gives its checker: the prompt entries loaded without
the language hint, and the language and return format `ast_file_runner` picks by category
(Java, JavaScript, Python).

The outputs: BFCL's ground truth, and perturbations of it (a wrong value, a missing
argument, an extra call, a wrong order, an unknown function, abstaining, a call where
abstaining was right; for Java and JavaScript, whose values are source strings, a value
given as a JSON non-string instead, and text after a value's source (bfcl-eval's converters
search the text, so some pass); in multi-turn a dropped call, a wrong value, turns in the wrong
order, an extra call, the next turn's calls a turn early (every result there, the
backend's state wrong), a call to a private method, abstaining throughout).
"""

from __future__ import annotations

import copy
import functools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gymnasium

import arborl.envs  # noqa: F401  (registers arborl/BFCL-v0)
from arborl.envs.episodes import run_episode
from arborl.envs.event_loop import get_env_loop
from arborl.tasks.bfcl.backends import Backends, parse_ground_truth_call
from arborl.tasks.bfcl.data import (
    AST_CATEGORIES,
    MULTI_TURN_CATEGORIES,
    RELEVANCE_CATEGORIES,
    BfclTask,
    load_category,
)
from arborl.tasks.bfcl.official import MODEL_NAME, bfcl
from arborl.tasks.bfcl.policies import ABSTAIN, TURN_DONE, gold_calls, tool_calls
from arborl.tasks.bfcl.source_values import to_source

Call = tuple[str, dict[str, Any]]


@dataclass
class Output:
    task: BfclTask
    kind: str
    calls: list[Call] | None = None  # single-turn; None: abstain
    turns: list[list[list[Call]]] | None = None  # multi-turn: per turn, the calls of each step


# ---- the outputs ------------------------------------------------------------------------
def _wrong(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7
    if isinstance(value, str):
        return value + " (changed)"
    if isinstance(value, list):
        return [*value, value[0]] if value else ["extra"]
    return {"changed": True}


def _single_outputs(task: BfclTask) -> Iterator[Output]:
    if task.scoring == "relevance":
        first = task.entry["function"][0]["name"]
        yield Output(task, "abstain", None)
        yield Output(task, "call", [(first, {})])
        return
    gold = gold_calls(task)
    yield Output(task, "gold", gold)
    yield Output(task, "abstain", None)
    name, args = gold[0]
    if args:
        key = next(iter(args))
        wrong = _wrong(args[key]) if task.language == "PYTHON" else _wrong_source(task, name, key)
        yield Output(task, "wrong_value", [(name, {**args, key: wrong}), *gold[1:]])
        yield Output(task, "missing_arg", [(name, {k: v for k, v in args.items() if k != key}), *gold[1:]])
    yield Output(task, "extra_call", [*gold, gold[0]])
    yield Output(task, "unknown_function", [("no_such_function", args), *gold[1:]])
    if task.language != "PYTHON" and args:
        for kind, value in _language_perturbations(task, name, key, args[key]):
            yield Output(task, kind, [(name, {**args, key: value}), *gold[1:]])
    if len(gold) > 1:
        yield Output(task, "wrong_order", gold[::-1])


def _answer(task: BfclTask, name: str, key: str) -> Any:
    """The first allowed value of a parameter, as the possible answer holds it (converted)."""
    allowed = next(c[name][key] for c in task.ground_truth if name in c)
    return next(v for v in allowed if v != "")


def _wrong_source(task: BfclTask, name: str, key: str) -> str:
    """Java/JS: a changed value, written as source (bfcl-eval's converters search the text,
    so text appended to a collection's source would leave its value unchanged)."""
    doc = next(f for f in task.checker_function or [] if f["name"] == name)
    answer = _answer(task, name, key)
    return to_source(_wrong(answer), doc["parameters"]["properties"][key], task.language)


def _language_perturbations(task: BfclTask, name: str, key: str, source: str) -> Iterator[tuple[str, Any]]:
    """Java/JS: the answer's own (converted) value where a source string belongs (JSON `true`
    for "true"; a string answer as a one-element list), and the source with text after it."""
    answer = _answer(task, name, key)
    yield "non_string", [answer] if isinstance(answer, str) else answer
    yield "trailing_text", f"{source} (changed)"


def _gold_turns(task: BfclTask) -> list[list[list[Call]]]:
    backends = Backends(task.entry, long_context=False)
    return [
        [[parse_ground_truth_call(c, backends) for c in calls]] if calls else []
        for calls in task.ground_truth
    ]


def _multi_outputs(task: BfclTask) -> Iterator[Output]:
    gold = _gold_turns(task)
    yield Output(task, "gold", turns=gold)
    yield Output(task, "abstain", turns=[[] for _ in gold])
    first = next(i for i, steps in enumerate(gold) if steps)
    calls = gold[first][0]
    dropped = copy.deepcopy(gold)
    dropped[first] = [calls[:-1]] if len(calls) > 1 else []
    yield Output(task, "dropped_call", turns=dropped)
    name, args = calls[-1]
    if args:
        key = next(iter(args))
        wrong = copy.deepcopy(gold)
        wrong[first] = [[*calls[:-1], (name, {**args, key: _wrong(args[key])})]]
        yield Output(task, "wrong_value", turns=wrong)
    extra = copy.deepcopy(gold)
    extra[first] = [calls, [calls[-1]]]
    yield Output(task, "extra_call", turns=extra)
    reordered = copy.deepcopy(gold)
    reordered[first] = [calls[::-1]]
    yield Output(task, "wrong_order", turns=reordered)
    later = next((i for i, steps in enumerate(gold) if steps and i > first), None)
    if later is not None:
        # the next turn's calls run a turn early: every result is there, the state is ahead
        ahead = copy.deepcopy(gold)
        ahead[first] = [calls, *gold[later]]
        yield Output(task, "state_ahead", turns=ahead)
    private = copy.deepcopy(gold)
    private[first] = [[("_load_scenario", {"scenario": {}}), *calls]]
    yield Output(task, "private_method", turns=private)
    empty = [i for i, steps in enumerate(gold) if not steps]
    if empty:
        eager = copy.deepcopy(gold)
        eager[empty[0]] = [[calls[0]]]
        yield Output(task, "call_where_abstain", turns=eager)


def outputs(
    per_category: int | None,
    multi_turn: int | None = None,
    categories: tuple[str, ...] = AST_CATEGORIES + RELEVANCE_CATEGORIES + MULTI_TURN_CATEGORIES,
) -> list[Output]:
    """The outputs for the first `per_category` entries (all when None) of `categories` (the
    first `multi_turn` of the multi-turn ones, when given)."""
    out: list[Output] = []
    for category in [c for c in AST_CATEGORIES + RELEVANCE_CATEGORIES if c in categories]:
        for task in load_category(category, per_category):
            out += _single_outputs(task)
    for category in [c for c in MULTI_TURN_CATEGORIES if c in categories]:
        for task in load_category(category, multi_turn or per_category):
            out += _multi_outputs(task)
    return out


# ---- arborl's score ---------------------------------------------------------------------
def _reply_script(output: Output) -> list[str]:
    if output.turns is None:
        return [ABSTAIN if output.calls is None else tool_calls(output.calls)]
    return [r for steps in output.turns for r in [*(tool_calls(s) for s in steps), TURN_DONE]]


def arborl_score(env: gymnasium.Env, output: Output) -> bool:
    replies = iter(_reply_script(output))
    episode = get_env_loop().run(run_episode(env, lambda m, i: next(replies), output.task, max_turns=400))
    assert episode.error is None, episode.error
    return episode.infos[-1]["bfcl_valid"]


# ---- bfcl-eval's score ------------------------------------------------------------------
def _fc_result(calls: list[Call] | None, text: str) -> Any:
    """What bfcl-eval stores for an FC model's reply: its tool calls, or its text."""
    return text if not calls else [{n: json.dumps(a)} for n, a in calls]


def official_score(output: Output, serial: int) -> bool:
    bfcl()
    os.environ.setdefault("OPENAI_API_KEY", "unused: nothing is sent")
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler

    handler = OpenAICompletionsHandler(MODEL_NAME, 0, MODEL_NAME, True)
    task = output.task
    entry = copy.deepcopy(task.entry)
    if output.turns is not None:
        # a model name per output: bfcl-eval keeps backends in module globals by model and id
        model = f"{MODEL_NAME}_parity_{serial}"
        result = [[*(_fc_result(s, "") for s in steps), TURN_DONE] for steps in output.turns]
        try:
            verdict = eval_runner._evaluate_single_multi_turn_entry(
                handler, task.id, result, task.ground_truth, entry, model, task.category
            )
        finally:
            for name in [g for g in vars(multi_turn_utils) if g.startswith(model)]:
                delattr(multi_turn_utils, name)
        return bool(verdict["valid"])
    result = _fc_result(output.calls, ABSTAIN)
    if task.scoring == "relevance":
        verdict = eval_runner._evaluate_single_relevance_entry(
            handler, task.id, result, entry, MODEL_NAME, task.category
        )
    else:
        language, return_format = _language(task.category)
        verdict = eval_runner._evaluate_single_ast_entry(
            handler,
            task.id,
            result,
            task.ground_truth,
            copy.deepcopy(_checker_entries(task.category)[task.id]),
            MODEL_NAME,
            task.category,
            language,
            return_format,
        )
    return bool(verdict["valid"])


@functools.cache
def _checker_entries(category: str) -> dict[str, dict[str, Any]]:
    """The prompt entries as bfcl-eval's evaluator loads them for its checker (`evaluate_task`)."""
    from bfcl_eval.utils import load_dataset_entry

    entries = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
    return {e["id"]: e for e in entries}


def _language(category: str) -> tuple[Any, Any]:
    """The language and return format `ast_file_runner` picks for a category."""
    from bfcl_eval.constants.enums import Language, ReturnFormat
    from bfcl_eval.utils import is_java, is_js

    if is_java(category):
        return Language.JAVA, ReturnFormat.JAVA
    if is_js(category):
        return Language.JAVASCRIPT, ReturnFormat.JAVASCRIPT
    return Language.PYTHON, ReturnFormat.PYTHON


def compare(
    per_category: int | None, multi_turn: int | None = None, categories: tuple[str, ...] | None = None
) -> tuple[list[tuple[str, str, bool, bool]], dict[str, int]]:
    """Every output scored both ways: (id, kind, arborl, bfcl-eval), and counts by kind."""
    env = gymnasium.make("arborl/BFCL-v0")
    rows, kinds = [], {}
    chosen = (
        outputs(per_category, multi_turn)
        if categories is None
        else outputs(per_category, multi_turn, categories)
    )
    for serial, output in enumerate(chosen):
        rows.append((output.task.id, output.kind, arborl_score(env, output), official_score(output, serial)))
        kinds[output.kind] = kinds.get(output.kind, 0) + 1
    env.close()
    return rows, kinds
