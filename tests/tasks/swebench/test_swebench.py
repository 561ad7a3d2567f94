"""The SWE-bench instance format: loaders (JSON, JSONL, a real `datasets` dataset on disk), the
pytest log parser and SWE-bench's grading rules, the CodeTask conversion, the image recipes."""

from __future__ import annotations

import json

import pytest

from arborl.tasks import CodeTask
from arborl.tasks.swebench import (
    InstanceLoadError,
    SWEEnvironment,
    SWEInstance,
    environment_for,
    environment_layer,
    grade,
    instance_layer,
    load_instances,
    parse_pytest_log,
    swe_parts,
    to_code_task,
)

TEST_PATCH = (
    "diff --git a/tests/test_a.py b/tests/test_a.py\n--- a/tests/test_a.py\n+++ b/tests/test_a.py\n"
    "@@ -1 +1,2 @@\n x = 1\n+y = 2\n"
    "diff --git a/tests/test_new.py b/tests/test_new.py\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/tests/test_new.py\n@@ -0,0 +1 @@\n+z = 3\n"
)


def row(**overrides):
    base = {
        "instance_id": "octo__widgets-17",
        "repo": "octo/widgets",
        "base_commit": "0123456789abcdef0123456789abcdef01234567",
        "problem_statement": "widgets break",
        "patch": "diff --git a/w.py b/w.py\n",
        "test_patch": TEST_PATCH,
        # as the datasets on the Hub store them: JSON-encoded strings
        "FAIL_TO_PASS": json.dumps(["tests/test_a.py::test_x"]),
        "PASS_TO_PASS": "[]",
        "environment_setup_commit": "fedcba9876543210fedcba9876543210fedcba98",
        "version": 3.1,  # a float in some datasets
        "created_at": "2023-01-01T00:00:00Z",
        "repo_language": "Python",  # an extra field, kept
    }
    return {**base, **overrides}


def test_instances_take_json_encoded_lists_and_keep_extra_fields():
    inst = SWEInstance.model_validate(row())
    assert inst.FAIL_TO_PASS == ("tests/test_a.py::test_x",) and inst.PASS_TO_PASS == ()
    assert inst.version == "3.1" and inst.model_extra == {"repo_language": "Python"}
    assert inst.test_files == ["tests/test_a.py", "tests/test_new.py"]
    assert SWEInstance.model_validate(row(FAIL_TO_PASS=["t::a", "t::b"])).FAIL_TO_PASS == ("t::a", "t::b")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"FAIL_TO_PASS": "[]"}, "FAIL_TO_PASS is empty"),
        ({"FAIL_TO_PASS": "not json"}, "not a JSON list"),
        ({"FAIL_TO_PASS": [1, 2]}, "list of test ids"),
        ({"base_commit": "main"}, "not a commit hash"),
        ({"test_patch": "just text"}, "not a git unified diff"),
        ({"problem_statement": ""}, "problem_statement"),
    ],
)
def test_bad_instances_are_refused_with_the_file_line_and_field(tmp_path, bad, message):
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(row()) + "\n\n" + json.dumps(row(instance_id="x-2", **bad)) + "\n")
    with pytest.raises(InstanceLoadError, match=rf"instances.jsonl:3: .*{message}"):
        load_instances(path)


def test_loader_errors_say_what_is_wrong(tmp_path):
    (tmp_path / "broken.jsonl").write_text('{"instance_id": \n')
    with pytest.raises(InstanceLoadError, match=r"broken.jsonl:1: invalid JSON"):
        load_instances(tmp_path / "broken.jsonl")
    (tmp_path / "dups.json").write_text(json.dumps([row(), row()]))
    with pytest.raises(InstanceLoadError, match="duplicate instance ids"):
        load_instances(tmp_path / "dups.json")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(InstanceLoadError, match="expected a JSON object"):
        load_instances(tmp_path / "list.json")
    with pytest.raises(InstanceLoadError, match="does not exist"):
        load_instances(tmp_path / "nope.jsonl")
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(InstanceLoadError, match=r"\.json or \.jsonl"):
        load_instances(tmp_path / "data.csv")


def test_json_jsonl_and_datasets_on_disk_load_the_same_instances(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [row(), row(instance_id="octo__widgets-18", FAIL_TO_PASS='["tests/test_a.py::test_y"]')]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "a.json").write_text(json.dumps(rows))
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    datasets.DatasetDict(
        {"test": datasets.Dataset.from_list(rows), "dev": datasets.Dataset.from_list(rows[:1])}
    ).save_to_disk(str(tmp_path / "dd"))
    expected = load_instances(tmp_path / "a.jsonl")
    assert [i.instance_id for i in expected] == ["octo__widgets-17", "octo__widgets-18"]
    assert load_instances(tmp_path / "a.json") == expected
    assert load_instances(tmp_path / "ds") == expected
    assert load_instances(tmp_path / "dd", split="test") == expected
    assert len(load_instances(tmp_path / "dd", split="dev")) == 1
    assert load_instances(datasets.load_from_disk(str(tmp_path / "ds"))) == expected
    with pytest.raises(InstanceLoadError, match="holds splits"):
        load_instances(tmp_path / "dd")
    with pytest.raises(InstanceLoadError, match="no split 'train'"):
        load_instances(tmp_path / "dd", split="train")


LOG = """\
tests/test_a.py ..F.                                                     [100%]
=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
PASSED tests/test_a.py::test_param[a b]
XFAIL tests/test_a.py::test_known - reason: flaky upstream
SKIPPED [1] tests/test_a.py:40: needs network
FAILED tests/test_a.py::test_two - AssertionError: assert 1 == 2 - with a dash
ERROR tests/test_b.py::test_setup - fixture 'db' not found
========================= 1 failed, 2 passed in 0.03s ==========================
"""


def test_pytest_log_parser_reads_the_rA_summary():
    statuses = parse_pytest_log(LOG)
    assert statuses["tests/test_a.py::test_one"] == "PASSED"
    assert statuses["tests/test_a.py::test_param[a b]"] == "PASSED"  # ids with spaces survive
    assert statuses["tests/test_a.py::test_two"] == "FAILED"
    assert statuses["tests/test_b.py::test_setup"] == "ERROR"
    assert statuses["tests/test_a.py::test_known"] == "XFAIL"
    assert "tests/test_a.py ..F." not in statuses


@pytest.mark.parametrize(
    ("f2p", "p2p", "status"),
    [
        (["a", "b"], ["c"], "FULL"),
        (["a", "x"], ["c"], "PARTIAL"),  # one FAIL_TO_PASS still fails
        (["a", "b"], ["c", "x"], "NO"),  # a PASS_TO_PASS broke
        (["a", "x"], ["x"], "NO"),
        (["x"], [], "NO"),
        (["missing"], [], "NO"),  # not in the log: failing
        (["a"], [], "FULL"),  # empty PASS_TO_PASS counts as all passing
    ],
)
def test_grade_follows_swe_bench(f2p, p2p, status):
    statuses = {"a": "PASSED", "b": "XFAIL", "c": "PASSED", "x": "FAILED"}
    report = grade(statuses, f2p, p2p)
    assert report["status"] == status
    assert sorted(report["FAIL_TO_PASS"]["success"] + report["FAIL_TO_PASS"]["failure"]) == sorted(f2p)


def test_conversion_to_a_code_task_in_both_forms():
    inst = SWEInstance.model_validate(row())
    env = SWEEnvironment(repo="octo/widgets", files={"site/dep.py": "X = 1\n"}, install=("echo hi",))
    portable = to_code_task(inst, env, repo_files={"w.py": "x = 1\n"}, metadata={"suite": "s"})
    assert isinstance(portable, CodeTask) and portable.id == inst.instance_id
    assert portable.repo_files == {"w.py": "x = 1\n", ".arborl-env/site/dep.py": "X = 1\n"}
    assert "echo hi" in portable.setup[-1] and set(portable.verifier_files) == {
        "harness.py",
        "log_parsers.py",
        "test.patch",
        "spec.json",
    }
    spec = json.loads(portable.verifier_files["spec.json"])
    assert spec["FAIL_TO_PASS"] == ["tests/test_a.py::test_x"]
    assert spec["model_patch"] == "/tmp/arborl-verify/model.patch" and portable.verifier_applies_patch
    laid_out = env.model_copy(update={"python_path": ()})  # its layout read: flat, nothing to add
    assert swe_parts(portable) == (inst, laid_out) and portable.metadata["suite"] == "s"
    imaged = to_code_task(inst, env, image="arborl/swe:abc")
    assert imaged.image == "arborl/swe:abc" and imaged.repo_files == {} and imaged.setup == ()
    assert swe_parts(CodeTask(id="t", problem_statement="p")) is None
    with pytest.raises(ValueError, match="exactly one"):
        to_code_task(inst, env)
    with pytest.raises(ValueError, match="reserved"):
        to_code_task(inst, env, repo_files={".arborl-env/x": ""})


def test_environment_lookup_prefers_repo_and_version():
    inst = SWEInstance.model_validate(row(version="2.0"))
    any_version = SWEEnvironment(repo="octo/widgets", test_cmd="pytest -rA any")
    exact = SWEEnvironment(repo="octo/widgets", version="2.0", test_cmd="pytest -rA exact")
    other = SWEEnvironment(repo="octo/other", version="2.0")
    assert environment_for(inst, [other, any_version, exact]) is exact
    assert environment_for(inst, [other, any_version]) is any_version
    assert environment_for(inst, [other]).repo == ""


def test_image_recipes_layer_the_environment_under_the_instance():
    inst = SWEInstance.model_validate(row())
    env = SWEEnvironment(
        repo="octo/widgets", version="3.1", files={"site/dep.py": "X = 1\n"}, install=("echo ok",)
    )
    env_layer = environment_layer(env, inst.repo, b"bundle-bytes")
    assert (
        env_layer.context["repo.bundle"] == b"bundle-bytes" and "echo ok" in env_layer.context["install.sh"]
    )
    assert "COPY env/" in env_layer.instructions and env_layer.context["env/site/dep.py"] == "X = 1\n"
    layer = instance_layer(inst, env)
    assert inst.base_commit in layer.instructions and "git gc -q --prune=now" in layer.instructions
    assert layer.context == {}  # thin: everything comes from the environment layer
    built = []
    from arborl.tasks.swebench import build_instance_image

    tag = build_instance_image(
        inst, env, b"b", lambda parent, lay: built.append((parent, lay.name)) or f"t{len(built)}", "base"
    )
    assert tag == "t2" and built == [
        ("base", "environment octo/widgets 3.1"),
        ("t1", f"instance {inst.instance_id}"),
    ]
