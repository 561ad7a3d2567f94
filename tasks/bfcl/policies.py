"""Scripted policies for validating the BFCL suites, from BFCL's own ground truth.

- `gold_policy`: single-turn, one reply holding, for each ground-truth call, the first
  allowed value of every parameter (a parameter whose allowed values hold `""`, BFCL's
  "may be omitted", is left out); abstains on irrelevance, and calls a function
  on live_relevance. Multi-turn, per user turn, one reply with that turn's ground-truth
  calls, then a plain reply once their results are back (which ends the turn).
- `empty_policy`: the policy that does nothing useful. It abstains everywhere except on the
  irrelevance categories, where abstaining is the right answer; there it calls the first
  function with no arguments without reading the question (the trivial policy of an
  irrelevance set is "always call").

Java and JavaScript values are written as the source strings a model gives there
(`source_values`).

Replies are in the hermes format (`<tool_call>{"name": ..., "arguments": ...}</tool_call>`),
the env's default parser.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .backends import Backends, parse_ground_truth_call
from .data import BfclTask
from .grading import score_single
from .source_values import to_source

Policy = Callable[[list[dict[str, Any]], dict[str, Any]], str]
ABSTAIN = "I cannot do that with the functions I have."
TURN_DONE = "Done."


def tool_calls(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """A reply holding `calls` in the hermes format."""
    return "\n".join(
        f"<tool_call>\n{json.dumps({'name': n, 'arguments': a}, ensure_ascii=False)}\n</tool_call>"
        for n, a in calls
    )


def _first(allowed: Any, omit_optional: bool) -> Any:
    """An allowed value (the first that is not `""`), nested dicts resolved the same way."""
    values = [v for v in allowed if v != ""] if isinstance(allowed, list) else [allowed]
    return _concrete(values[0], omit_optional)


def _concrete(value: Any, omit_optional: bool) -> Any:
    if isinstance(value, dict):
        return {k: _first(v, omit_optional) for k, v in value.items() if not _omitted(v, omit_optional)}
    if isinstance(value, list):
        return [_concrete(v, omit_optional) for v in value]
    return value


def _omitted(allowed: Any, omit_optional: bool) -> bool:
    """Left out: no allowed value but `""` (BFCL's "may be left out"), or, with
    `omit_optional`, whenever `""` is allowed."""
    if not isinstance(allowed, list):
        return False
    return not [v for v in allowed if v != ""] or (omit_optional and "" in allowed)


def gold_calls(task: BfclTask) -> list[tuple[str, dict[str, Any]]]:
    """A single-turn task's ground truth as concrete calls: optional parameters given their
    first allowed value, or, where bfcl-eval's checker refuses that (a parameter the
    function doc does not declare), left out."""
    first: list[tuple[str, dict[str, Any]]] = []
    for omit in (False, True):
        calls = []
        for call in task.ground_truth:
            ((name, params),) = call.items()
            args = {k: _first(v, omit) for k, v in params.items() if not _omitted(v, omit)}
            calls.append((name, _as_source(task, name, args)))
        if score_single(task, calls).valid:
            return calls
        first = first or calls
    return first


def _as_source(task: BfclTask, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Java/JS: each value as the source string bfcl-eval's checker converts back to it."""
    if task.checker_function is None:
        return args
    (doc,) = [f for f in task.checker_function if f["name"] == name]
    props = doc["parameters"]["properties"]
    return {k: to_source(v, props[k], task.language) if k in props else v for k, v in args.items()}


def gold_policy(task: BfclTask) -> Policy:
    if task.scoring == "multi_turn":
        return _multi_turn_gold(task)
    if task.scoring == "relevance":
        reply = (
            ABSTAIN
            if "irrelevance" in task.category
            else tool_calls([(task.entry["function"][0]["name"], {})])
        )
    else:
        reply = tool_calls(gold_calls(task))
    return lambda messages, info: reply


def _multi_turn_gold(task: BfclTask) -> Policy:
    backends = Backends(task.entry, long_context=False)  # for the methods' signatures only
    turns = [[parse_ground_truth_call(c, backends) for c in calls] for calls in task.ground_truth]

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        calls = turns[int(info["bfcl_turn"])]
        if not calls or (messages and messages[-1].get("role") == "tool"):
            return TURN_DONE
        return tool_calls(calls)

    return policy


def empty_policy(task: BfclTask) -> Policy:
    if task.scoring == "relevance" and "irrelevance" in task.category:
        reply = tool_calls([(task.entry["function"][0]["name"], {})])
    else:
        reply = ABSTAIN
    return lambda messages, info: reply
