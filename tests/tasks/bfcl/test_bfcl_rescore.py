"""`arborl eval suite=bfcl-<category> predictions=FILE` re-scores bfcl-eval result files as
they are: entry by entry, its verdicts and error kinds are those of bfcl-eval's own
per-category scorer on the same file (bfcl_result_writer.py says how the files are written
and scored), and so is each category's accuracy."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from bfcl_result_writer import official_scores, write_result_file
from rich.console import Console

from arborl.eval.config import EvalConfig
from arborl.eval.result_store import read_results
from arborl.eval.runner import run_eval
from arborl.tasks.bfcl.suites import suite_name

#: (category, the form replies are stored in, names mangled, the first N entries or all).
CASES = [
    ("simple_python", "fc", True, None),  # 167 of 400 call a dotted name: math_factorial
    ("multiple", "fc", True, None),
    ("parallel", "fc", True, None),
    ("parallel_multiple", "prompting", False, 60),  # dotted names, written as they are
    ("live_simple", "hermes", False, 30),
    ("irrelevance", "fc", True, 30),
    ("multi_turn_base", "fc", False, 12),
    ("multi_turn_miss_param", "prompting", False, 12),
]


def _arborl(tmp_path, path, category, limit, console=None, suite=None, tasks=None):
    cfg = EvalConfig(
        suite=suite or suite_name(category),
        predictions=str(path),
        limit=limit,
        tasks=tasks,
        concurrency=1,
        report=False,
        run={"dir": str(tmp_path / "run")},
    )
    outcome = asyncio.run(run_eval(cfg, console=console or Console(quiet=True)))
    _, results = read_results(outcome.run_dir)
    return outcome, {r.instance_id: r for r in results}


@pytest.mark.parametrize(("category", "form", "underscored", "limit"), CASES, ids=[c[0] for c in CASES])
def test_verdicts_and_accuracy_equal_bfcl_evals_scorer(tmp_path, category, form, underscored, limit):
    model = f"rescore-{category.replace('_', '-')}-{form}"
    path, kinds = write_result_file(tmp_path / "result", model, category, form, underscored, limit)
    header, invalid = official_scores(
        path, model, category, form, underscored, limit is not None, tmp_path / "score"
    )
    outcome, results = _arborl(tmp_path, path, category, limit)

    assert set(results) == set(kinds)
    ours = {i: r.details["verifier"]["error_type"] for i, r in results.items() if not r.success}
    assert ours == invalid, {i: (ours.get(i), invalid.get(i), kinds[i]) for i in set(ours) ^ set(invalid)}
    score = outcome.summary["bfcl"]["categories"][category]
    assert score["accuracy"] == pytest.approx(header["accuracy"])
    assert (score["correct_count"], score["total_count"]) == (header["correct_count"], header["total_count"])
    # the set holds both verdicts for each kind of reply that can go either way, or agreement proves little
    valid_kinds = Counter(kinds[i] for i, r in results.items() if r.success)
    assert valid_kinds and len(ours) > 0, valid_kinds
    dotted = _dotted(category) & set(results)
    if category in ("simple_python", "multiple", "parallel", "parallel_multiple"):
        # names in the form the model saw them are right, the other form wrong (bfcl-eval's
        # verdicts, above); the mangled simple_python gold alone is 67 entries, 23 dotted
        assert all(results[i].success for i in dotted if kinds[i] == "gold")
        assert not any(results[i].success for i in dotted if kinds[i] == "other_names")
        assert sum(kinds[i] == "gold" for i in dotted) >= 5


def _dotted(category):
    """Ids of the entries whose possible answer calls a dotted function name."""
    from arborl.tasks.bfcl.data import load_category

    tasks = load_category(category)
    return {t.id for t in tasks if t.scoring == "ast" and any("." in next(iter(c)) for c in t.ground_truth)}


def test_the_command_prints_accuracy_as_bfcl_eval_does(tmp_path):
    path, _ = write_result_file(tmp_path / "result", "printed", "multiple", "fc", True, 12)
    lines = path.read_text().splitlines()
    # a line lost (bad JSON) and an entry given twice with different results: named, the rest scored
    lines[3] = lines[3][:-5]
    lines.append(lines[0].replace('"result": [', '"result": [{"other": "{}"}, '))
    path.write_text("\n".join(lines) + "\n")
    console = Console(record=True, width=300)
    outcome, results = _arborl(tmp_path, path, "multiple", 12, console)
    text = console.export_text()
    accuracy = outcome.summary["bfcl"]["categories"]["multiple"]["accuracy"]
    assert "🔍 Running test: multiple" in text
    assert f"✅ Test completed: multiple. 🎯 Accuracy: {accuracy:.2%}" in text
    assert f"Overall Acc: {accuracy:.2%}" in text
    assert f"{path}:4: not JSON" in text and f"{path}:13: a different result for multiple_0" in text
    assert results["multiple_3"].details["verifier"]["error_type"] == "arborl:missing_result"
    assert results["multiple_0"].details["verifier"]["error_type"] == "arborl:unusable_result"
    assert len(results) == 12 and "no result for multiple_3" in results["multiple_3"].error
    score_file = outcome.run_dir / "score" / "BFCL_v4_multiple_score.json"
    header = json.loads(score_file.read_text().splitlines()[0])
    assert header["accuracy"] == accuracy and header["missing_count"] == 1
    instance = outcome.run_dir / "instances" / "multiple_1" / "sample-0"
    assert json.loads((instance / "infos.json").read_text())[0]["verifier"]["source"] == f"{path}:2"


def test_a_directory_of_result_files_and_the_overall_accuracy(tmp_path):
    """bfcl-multi-turn given a model's result folder holding two of its four categories: each
    scored, the overall the unweighted mean of the four with the absent ones at 0, as
    bfcl-eval's summary (`calculate_unweighted_accuracy`) computes it."""
    from bfcl_eval.eval_checker.eval_runner_helper import calculate_unweighted_accuracy

    root = tmp_path / "result"
    _, base = write_result_file(root, "m", "multi_turn_base", "fc", False, 6)
    _, miss = write_result_file(root, "m", "multi_turn_miss_func", "fc", False, 6)
    write_result_file(root, "m", "simple_python", "fc", True, 3)  # another suite's: not read
    outcome, results = _arborl(
        tmp_path, root / "m", None, None, suite="bfcl-multi-turn", tasks=[*base, *miss]
    )
    assert set(results) == {*base, *miss}
    scores = outcome.summary["bfcl"]["categories"]
    assert set(scores) == {"multi_turn_base", "multi_turn_miss_func"}
    rows = [
        {**scores[c], "display_accuracy": scores[c]["accuracy"]}
        if c in scores
        else {"accuracy": 0, "total_count": 200, "display_accuracy": "N/A"}
        for c in (
            "multi_turn_base",
            "multi_turn_miss_func",
            "multi_turn_miss_param",
            "multi_turn_long_context",
        )
    ]
    expected = calculate_unweighted_accuracy(rows, display_na_if_category_missing=False)["accuracy"]
    assert outcome.summary["bfcl"]["overall"]["accuracy"] == pytest.approx(expected)
