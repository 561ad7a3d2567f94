"""Reading bfcl-eval result files: what is wrong in one is named with its file and line, and
the rest is still scored; a file that is not a result file, or holds another category's
entries, is refused with what it is; a directory is searched as bfcl-eval's runner does;
a prompted reply's expression is never run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from bfcl_result_writer import write_result_file

from arborl.tasks.bfcl.data import load_category
from arborl.tasks.bfcl.result_files import MISSING, UNUSABLE, ResultFileError, read_result_files

SIMPLE = load_category("simple_python")


def _read(path, tasks=SIMPLE, **kw):
    return read_result_files(path, tasks, "bfcl-simple", **kw)


def test_a_result_file_read_as_bfcl_eval_wrote_it(tmp_path):
    path, kinds = write_result_file(tmp_path, "m", "simple_python", "fc", True)
    files = _read(path)
    assert set(files.entries) == set(kinds) and not files.problems and not files.unusable
    assert files.categories == {"simple_python"}
    assert (files.decoder, files.underscored) == ("fc", True)
    assert "decoder fc (auto" in files.how and "names mangled (auto" in files.how
    # the mangling is what makes the dotted gold right: read as unmangled, it is wrong
    dotted = next(t for t in SIMPLE if kinds[t.id] == "gold" and "." in next(iter(t.ground_truth[0])))
    assert files.score(dotted)[0].verdict.valid
    as_is = _read(path, underscore_to_dot=False)
    verdict = as_is.score(dotted)[0].verdict
    assert not verdict.valid and verdict.error_type == "simple_function_checker:wrong_func_name"
    prompting, _ = write_result_file(tmp_path / "p", "m", "simple_python", "prompting", False)
    assert (_read(prompting).decoder, _read(prompting).underscored) == ("prompting", False)
    hermes, _ = write_result_file(tmp_path / "h", "m", "simple_python", "hermes", False)
    assert _read(hermes).decoder == "hermes"
    # multi-turn: the form is the replies', whatever a result's turns are (here one with none)
    multi, _ = write_result_file(tmp_path / "mt", "m", "multi_turn_base", "prompting", False, 4)
    lines = multi.read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "result": []})
    multi.write_text("\n".join(lines) + "\n")
    assert (
        read_result_files(multi, load_category("multi_turn_base"), "bfcl-multi-turn-base").decoder
        == "prompting"
    )


def test_bad_lines_are_named_and_the_rest_is_scored(tmp_path):
    path, _ = write_result_file(tmp_path, "m", "simple_python", "fc", True, 8)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    lines = [json.dumps(r) for r in rows]
    lines[1] = lines[1][:20]  # cut short: not JSON
    lines[2] = json.dumps({"id": rows[2]["id"]})  # no result
    lines[3] = json.dumps(["not", "an", "object"])
    lines += [
        json.dumps(rows[4]),  # the same again: scored once
        json.dumps({**rows[5], "result": []}),  # a different result: not scored
        json.dumps({"id": "multiple_0", "result": []}),  # not this suite's
        "",
    ]
    path.write_text("\n".join(lines) + "\n")
    files = _read(path)
    problems = "\n".join(files.problems)
    assert f"{path}:2: not JSON" in problems
    assert f"{path}:3: no `result`" in problems
    assert f"{path}:4: not a result" in problems
    assert f"{path}:9: simple_python_4 again, the same result as {path}:5; scored once" in problems
    assert f"{path}:10: a different result for simple_python_5 than {path}:6" in problems
    assert f"{path}:11: 'multiple_0' is not an entry of bfcl-simple" in problems
    assert set(files.entries) == {"simple_python_0", "simple_python_4", "simple_python_6", "simple_python_7"}
    by_id = {t.id: t for t in SIMPLE}
    for entry_id, kind in [
        ("simple_python_1", MISSING),
        ("simple_python_2", UNUSABLE),
        ("simple_python_3", MISSING),
        ("simple_python_5", UNUSABLE),
    ]:
        scored, entry = files.score(by_id[entry_id])
        assert entry is None and scored.verdict.error_type == kind and not scored.verdict.valid
    assert files.score(by_id["simple_python_0"])[0].verdict.valid


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"accuracy": 0.5, "correct_count": 1, "total_count": 2}\n{"id": 1}\n', "a bfcl-eval score file"),
        ('{"instance_id": "a__b-1", "model_patch": ""}\n', "a SWE-bench predictions file"),
        ('[\n  {"id": "simple_python_0", "result": []}\n]\n', "one JSON document, not JSON lines"),
        ("", "it is empty"),
        ("hello\n", "line 1 is 'hello'"),
    ],
)
def test_a_file_that_is_not_a_result_file_is_refused(tmp_path, text, says):
    path = tmp_path / "BFCL_v4_simple_python_result.json"
    path.write_text(text)
    with pytest.raises(ResultFileError, match=rf"{path}: not a bfcl-eval result file: .*{says}"):
        _read(path)


def test_another_categorys_file_is_refused_naming_its_suite(tmp_path):
    path, _ = write_result_file(tmp_path, "m", "multiple", "fc", True, 3)
    with pytest.raises(
        ResultFileError,
        match=r"none of its 3 ids is an entry of bfcl-simple .*multiple \(suite=bfcl-multiple\)",
    ):
        _read(path)


def test_a_directory_gives_its_result_files_of_the_suites_categories(tmp_path):
    write_result_file(tmp_path, "m", "simple_python", "fc", True, 3)
    write_result_file(tmp_path, "m", "multiple", "fc", True, 3)
    files = _read(tmp_path)
    assert [p.name for p in files.paths] == ["BFCL_v4_simple_python_result.json"]
    assert len(files.entries) == 3
    with pytest.raises(
        ResultFileError, match=r"no bfcl-eval result file .* for irrelevance; it has multiple, simple_python"
    ):
        read_result_files(tmp_path, load_category("irrelevance"), "bfcl-irrelevance")


def test_a_prompted_replys_expression_is_not_run(tmp_path):
    marker = tmp_path / "ran"
    task = SIMPLE[0]
    name, param = task.entry["function"][0]["name"], next(iter(task.ground_truth[0].values()))
    code = f"open({str(marker)!r}, 'w').write('x') + 1"
    path = tmp_path / "BFCL_v4_simple_python_result.json"
    lines = [
        {"id": task.id, "result": f"[{name}({next(iter(param))}={code})]"},
        {"id": SIMPLE[1].id, "result": "[f(a=3*4 + 2**10 - 'x'.__len__())]"},
        {"id": SIMPLE[2].id, "result": "[f(a=3*4 + 2**10, b='a' + 'b')]"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    files = _read(path, tasks=SIMPLE[:3])
    for t in SIMPLE[:2]:
        verdict = files.score(t)[0].verdict
        assert verdict.error_type == "ast_decoder:decoder_failed" and "not evaluated" in verdict.error[0]
    assert not marker.exists()
    # constant arithmetic is evaluated as bfcl-eval's parser does
    assert files.score(SIMPLE[2])[0].decoded == [{"f": {"a": 1036, "b": "ab"}}]


def test_the_cli_refuses_a_score_file(tmp_path):
    path = tmp_path / "BFCL_v4_simple_python_score.json"
    path.write_text('{"accuracy": 1.0, "correct_count": 1, "total_count": 1}\n')
    out = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "eval", "suite=bfcl-simple", f"predictions={path}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "ResultFileError" in out.stdout and "a bfcl-eval score file" in out.stdout
