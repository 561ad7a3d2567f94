"""bfcl-eval result files written for the tests from BFCL's own data, and bfcl-eval's own
scoring of them.

A file holds one line per entry, `{"id", "result", ...}`, the result in the form a model's
handler stores it (`fc`: `[{name: "json arguments"}]`, or the text of a reply without calls;
`prompting`: the reply text `[math.gcd(a=12, b=18)]`; `hermes`: `<tool_call>` blocks), with
dotted function names mangled (`math_gcd`) when the model is one that cannot take dots.
Entries take turns at being answered right or wrong: the ground truth (from possible_answer),
a wrong value, a missing parameter, a wrong function, no call, and the ground truth with the
names in the other form (mangled where they should not be, or the reverse).

bfcl-eval's side is its own per-category scorer, `eval_runner.evaluate_task`, run on the file
as its `load_file` reads it, with the handler bfcl-eval uses for that form (OpenAI's, FC or
prompting; Qwen's FC handler for hermes) and a model-table entry that says whether the model
saw names mangled: what its CLI does for one model and category, minus finding the files.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

from bfcl_parity import _gold_turns, _wrong

from arborl.tasks.bfcl.data import BfclTask, load_category
from arborl.tasks.bfcl.official import bfcl
from arborl.tasks.bfcl.policies import gold_calls

Call = tuple[str, dict[str, Any]]
TEXT = "I cannot answer that with the functions I have."
SINGLE_KINDS = ("gold", "wrong_value", "missing_param", "wrong_function", "no_call", "other_names")
RELEVANCE_KINDS = ("no_call", "call", "empty_list")
MULTI_KINDS = ("gold", "wrong_value", "dropped_call", "no_call", "too_few_turns", "not_a_list")


def mangle(name: str) -> str:
    return re.sub(r"\.", "_", name)


def render(calls: list[Call] | None, form: str, underscored: bool) -> Any:
    """One reply as the handler stores it; None: a reply without calls."""
    if calls is None:
        return TEXT
    calls = [(mangle(n) if underscored else n, a) for n, a in calls]
    if form == "fc":
        return [{n: json.dumps(a)} for n, a in calls]
    if form == "hermes":
        return "\n".join(
            f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls
        )
    return "[" + ", ".join(f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})" for n, a in calls) + "]"


def _single(task: BfclTask, kind: str, form: str, underscored: bool) -> Any:
    if task.scoring == "relevance":
        first = task.entry["function"][0]["name"]
        if kind == "empty_list" and form == "fc":
            return []
        return render(None if kind == "no_call" else [(first, {})], form, underscored)
    gold = gold_calls(task)
    (name, args), rest = gold[0], gold[1:]
    key = next(iter(args), None)
    if kind == "wrong_value" and key is not None:
        return render([(name, {**args, key: _wrong(args[key])}), *rest], form, underscored)
    if kind == "missing_param" and key is not None:
        return render([(name, {k: v for k, v in args.items() if k != key}), *rest], form, underscored)
    if kind == "wrong_function":
        others = [f["name"] for f in task.entry["function"] if f["name"] != name]
        return render([(others[0] if others else "no_such_function", args), *rest], form, underscored)
    if kind == "no_call":
        return render(None, form, underscored)
    if kind == "other_names":
        return render(gold, form, not underscored)
    return render(gold, form, underscored)


def _multi(task: BfclTask, kind: str, form: str) -> Any:
    turns = _gold_turns(task)  # per turn, the steps of calls; [] where the turn has none
    if kind == "not_a_list":
        return "the model crashed"
    first = next(i for i, steps in enumerate(turns) if steps)
    if kind == "too_few_turns":
        turns = turns[:-1]
    elif kind == "no_call":
        turns = [[] for _ in turns]
    elif kind == "dropped_call":
        turns = copy.deepcopy(turns)
        calls = turns[first][0]
        turns[first] = [calls[:-1]] if len(calls) > 1 else []
    elif kind == "wrong_value":
        turns = copy.deepcopy(turns)
        name, args = turns[first][0][-1]
        key = next(iter(args), None)
        if key is not None:
            turns[first][0][-1] = (name, {**args, key: _wrong(args[key])})
    return [[*(render(step, form, False) for step in steps), "Done."] for steps in turns]


def write_result_file(
    root: Path, model: str, category: str, form: str, underscored: bool, limit: int | None = None
) -> tuple[Path, dict[str, str]]:
    """The file bfcl-eval's generate would write under `root/<model>/`, and each entry's kind."""
    tasks = load_category(category, limit)
    multi = tasks[0].scoring == "multi_turn"
    kinds = MULTI_KINDS if multi else RELEVANCE_KINDS if tasks[0].scoring == "relevance" else SINGLE_KINDS
    lines, kind_of = [], {}
    for i, task in enumerate(tasks):
        kind = kinds[i % len(kinds)]
        result = _multi(task, kind, form) if multi else _single(task, kind, form, underscored)
        lines.append({"id": task.id, "result": result, "inference_log": [], "input_token_count": 0})
        kind_of[task.id] = kind
    group = "multi_turn" if multi else "live" if category.startswith("live") else "non_live"
    path = root / model / group / f"BFCL_v4_{category}_result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path, kind_of


class _ModelConfig:
    def __init__(self, name: str, is_fc: bool, underscored: bool) -> None:
        self.model_name = self.display_name = name
        self.is_fc_model = is_fc
        self.underscore_to_dot = underscored


def official_scores(
    path: Path, model: str, category: str, form: str, underscored: bool, partial: bool, score_dir: Path
) -> tuple[dict[str, Any], dict[str, str]]:
    """bfcl-eval's score of the file: its header (accuracy, counts) and each entry it found
    invalid with its error kind."""
    bfcl()
    os.environ.setdefault("OPENAI_API_KEY", "unused: nothing is sent")
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler
    from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler
    from bfcl_eval.utils import load_file

    assert "_" not in model  # bfcl-eval looks models up with "_" read as "/"
    MODEL_CONFIG_MAPPING[model] = _ModelConfig(model, form != "prompting", underscored)
    cls = QwenFCHandler if form == "hermes" else OpenAICompletionsHandler
    handler = cls(model, 0, model, form != "prompting")
    results = load_file(path, sort_by_id=True)
    try:
        eval_runner.evaluate_task(
            category, path.parent, score_dir, results, model, handler, {}, allow_missing=partial
        )
    finally:  # multi-turn: bfcl-eval keeps each entry's backends in module globals by model
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

        for name in [g for g in vars(multi_turn_utils) if g.startswith(model.replace("-", "_"))]:
            delattr(multi_turn_utils, name)
    (score_file,) = score_dir.rglob(f"BFCL_v4_{category}_score.json")
    header, *failed = [json.loads(line) for line in score_file.read_text().splitlines()]
    kinds = {e["id"]: e.get("error_type") or e["error"]["error_type"] for e in failed}
    return header, kinds
