"""Harbor task folders read as tasks, without Docker: task.toml, the folder's files, the
Dockerfile's mapping onto the offline base, and bad input, each named with its task and file."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from arborl.tasks.harbor import TaskConfig, TaskConfigError, load_task, load_tasks, map_dockerfile
from arborl.tasks.stream import task_stream
from arborl.tasks.user_suites import detect_kind, suite_from_path

EXAMPLES = Path(__file__).parents[2] / "data" / "harbor"

# A Terminal-Bench 2 task.toml as its tasks are written (Harbor's 1.0 schema, deprecated sizes).
TB2 = """
version = "1.0"

[metadata]
author_name = "someone"
author_email = "someone@example.com"
difficulty = "medium"
category = "software-engineering"
tags = ["build", "c"]
expert_time_estimate_min = 30.0
junior_time_estimate_min = 120.0

[verifier]
timeout_sec = 900.0

[agent]
timeout_sec = 1800.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory = "2G"
storage = "10G"
"""
# Harbor's newer schema: [task] package section, env tables, network and resources.
HARBOR_1_1 = """
schema_version = "1.1"

[task]
name = "acme/fix-build"
description = "Fix the build"
authors = [{ name = "A. Author", email = "a@example.com" }]
keywords = ["c"]

[metadata]
anything = { nested = true }

[verifier]
timeout_sec = 120.0
env = { MODE = "strict" }

[agent]
timeout_sec = 600.0

[environment]
build_timeout_sec = 900.0
cpus = 2
memory_mb = 4096
storage_mb = 10240
gpus = 0
allow_internet = true
workdir = "/srv/app"

[solution.env]
DEBUG = "1"
"""


def test_real_harbor_task_tomls_load():
    tb2 = TaskConfig.from_toml(TB2)
    assert (
        tb2.schema_version == "1.0" and tb2.verifier.timeout_sec == 900.0 and tb2.agent.timeout_sec == 1800.0
    )
    assert tb2.environment.memory_mb == 2048 and tb2.environment.storage_mb == 10240
    assert tb2.metadata["expert_time_estimate_min"] == 30.0  # [metadata] is the author's own
    new = TaskConfig.from_toml(HARBOR_1_1)
    assert new.task is not None and new.task.name == "acme/fix-build" and new.task.authors[0].email
    assert new.verifier.env == {"MODE": "strict"} and new.solution.env == {"DEBUG": "1"}
    assert new.environment.workdir == "/srv/app" and new.network_note()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[verifier]\ntimout_sec = 10\n", "[verifier] timout_sec: unknown key"),
        ("[verifier]\ntimeout_sec = 'ten'\n", "[verifier] timeout_sec: Input should be a valid number"),
        ("[agent]\ntimeout_sec = -5\n", "[agent] timeout_sec: Input should be greater than 0"),
        ("[environment]\nmemory = 'lots'\n", "'lots' is not a size"),
        ("[enviroment]\ncpus = 1\n", "enviroment: unknown key"),
        ("name = 'x'\n", "name: unknown key"),
        ("[environment]\ngpus = 1\n", "gpus = 1: arborl's sandboxes have no GPU"),
        ("[verifier]\nenvironment_mode = 'separate'\n", "environment_mode = 'separate'"),
        ("version = '1.0'\nschema_version = '1.1'\n", "not both"),
        ("[verifier\n", "not valid TOML"),
    ],
)
def test_a_bad_task_toml_says_which_key_and_why(text, said):
    with pytest.raises(TaskConfigError) as e:
        TaskConfig.from_toml(text)
    assert said in str(e.value)


def test_the_example_tasks_load_with_their_settings():
    tasks = {t.id: t for t in load_tasks(EXAMPLES)}
    assert sorted(tasks) == ["build-c", "edit-config", "git-branch", "static-site-service", "word-freq"]
    assert all(t.usable and t.has_solution and t.instruction for t in tasks.values())
    assert (
        tasks["word-freq"].family == "python" and tasks["build-c"].family == "debian"
    )  # ubuntu -> debian base
    assert tasks["git-branch"].workdir == "/app/repo" and tasks["edit-config"].workdir == "/app"
    assert tasks["word-freq"].verifier_env == {"WORD_FREQ_TOP": "3"} and tasks["word-freq"].memory_mb == 1024
    assert tasks["build-c"].agent_timeout_s == 600.0 and tasks["build-c"].build_timeout_s == 900.0


def _copy(tmp_path: Path, name: str = "edit-config", as_name: str | None = None) -> Path:
    dest = tmp_path / (as_name or name)
    shutil.copytree(EXAMPLES / name, dest)
    return dest


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def test_one_broken_task_never_stops_the_others_and_each_error_names_task_and_file(tmp_path):
    _copy(tmp_path, "edit-config", "good")
    (_copy(tmp_path, "edit-config", "no-instruction") / "instruction.md").unlink()
    (_copy(tmp_path, "edit-config", "no-test") / "tests" / "test.sh").unlink()
    (_copy(tmp_path, "edit-config", "no-dockerfile") / "environment" / "Dockerfile").unlink()
    (_copy(tmp_path, "edit-config", "no-toml") / "task.toml").unlink()
    _write(
        _copy(tmp_path, "edit-config", "bad-key") / "task.toml", "[verifier]\ntimeout_sec = 60\nretries = 2\n"
    )
    _write(_copy(tmp_path, "edit-config", "bad-type") / "task.toml", "[agent]\ntimeout_sec = 'soon'\n")
    (_copy(tmp_path, "edit-config", "empty-instruction") / "instruction.md").write_text("  \n")
    linked = _copy(tmp_path, "edit-config", "linked-test")
    (linked / "tests" / "helper.py").symlink_to("/etc/passwd")
    tasks = {t.id: t for t in load_tasks(tmp_path)}
    assert tasks["good"].usable
    expected = {
        "no-instruction": "task no-instruction: instruction.md: missing",
        "no-test": "task no-test: tests/test.sh: missing",
        "no-dockerfile": "task no-dockerfile: environment/Dockerfile: missing",
        "no-toml": "task no-toml: task.toml: missing",
        "bad-key": "task bad-key: task.toml: [verifier] retries: unknown key",
        "bad-type": "task bad-type: task.toml: [agent] timeout_sec: Input should be a valid number",
        "empty-instruction": "task empty-instruction: instruction.md: empty",
        "linked-test": "task linked-test: tests/helper.py: a symbolic link",
    }
    for tid, said in expected.items():
        assert not tasks[tid].usable and tasks[tid].error.startswith(said), (tid, tasks[tid].error)
    # training leaves the broken ones out; evaluation gets them all, to report each
    stream = task_stream(f"suite:{tmp_path}", size=10, seed=0)
    assert {stream(i).id for i in range(10)} == {"good"}
    assert len(suite_from_path(str(tmp_path)).tasks()) == 9


@pytest.mark.parametrize(
    ("dockerfile", "said"),
    [
        ("FROM node:20\nRUN npm i\n", "environment/Dockerfile:1: FROM node:20: no image can be pulled here"),
        (
            "FROM python:3.12 AS build\nRUN true\nFROM debian:bookworm\nCOPY --from=build /x /x\n",
            "environment/Dockerfile:3: a multi-stage build",
        ),
        ("FROM ubuntu:24.04\nADD https://example.com/x.tgz /x\n", "environment/Dockerfile:2: ADD of a URL"),
        ("FROM debian:bookworm\nWORKDIR /etc\n", "the working directory /etc is a system directory"),
        ("RUN true\nFROM debian\n", "environment/Dockerfile:1: RUN before FROM"),
    ],
)
def test_what_cannot_be_built_offline_is_refused_at_load_with_its_line(tmp_path, dockerfile, said):
    folder = _copy(tmp_path)
    (folder / "environment" / "Dockerfile").write_text(dockerfile)
    task = load_task(folder)
    assert not task.error and task.image_error.startswith("task edit-config: ") and said in task.image_error
    assert not task.usable


def test_dockerfile_mapping_keeps_the_tasks_own_steps():
    plan = map_dockerfile(
        "ARG PY=3.13\nFROM --platform=linux/amd64 python:${PY}-slim-bookworm\n# deps\n"
        "RUN apt-get update && \\\n    apt-get install -y curl\nENV APP=/srv/app\nWORKDIR $APP\nWORKDIR sub\n"
        'COPY . .\nCMD ["python", "main.py"]\nENTRYPOINT ["/bin/sh"]\n'
    )
    assert not plan.problems and plan.family == "python" and plan.base == "python:3.13-slim-bookworm"
    assert plan.workdir == "/srv/app/sub"
    assert [s.line for s in plan.steps] == [4, 6, 7, 8, 9]  # CMD/ENTRYPOINT dropped, lines kept
    assert plan.steps[0].text.startswith("RUN apt-get update && \\")
    tb = map_dockerfile("FROM ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624\nWORKDIR /app\n")
    assert tb.family == "debian" and not tb.problems


def test_suite_path_detects_a_harbor_folder_and_a_single_task():
    assert detect_kind(EXAMPLES) == "harbor"
    assert detect_kind(EXAMPLES / "git-branch") == "harbor"
    suite = suite_from_path(str(EXAMPLES / "git-branch"))
    assert suite.env_id == "arborl/Harbor-v0" and [t.id for t in suite.tasks()] == ["git-branch"]
    assert suite.gold is not None and suite.empty is not None


def test_verifier_env_templates_come_from_the_host(tmp_path, monkeypatch):
    folder = _copy(tmp_path)
    toml = (folder / "task.toml").read_text()
    (folder / "task.toml").write_text(
        toml.replace(
            "[verifier]", '[verifier]\nenv = { TOKEN = "${ARBORL_T_TOKEN}", LEVEL = "${ARBORL_T_LVL:-3}" }'
        )
    )
    monkeypatch.setenv("ARBORL_T_TOKEN", "abc")
    assert load_task(folder).verifier_env == {"TOKEN": "abc", "LEVEL": "3"}
    monkeypatch.delenv("ARBORL_T_TOKEN")
    assert "needs the host's environment variable ARBORL_T_TOKEN" in load_task(folder).error


def test_a_prebuilt_image_is_its_family_base_or_refused(tmp_path):
    folder = _copy(tmp_path)
    (folder / "environment" / "Dockerfile").unlink()
    toml = (folder / "task.toml").read_text()
    (folder / "task.toml").write_text(
        toml.replace("[environment]", '[environment]\ndocker_image = "python:3.12-slim"')
    )
    task = load_task(folder)
    assert task.usable and task.family == "python" and task.workdir == "/app"
    (folder / "task.toml").write_text(
        toml.replace("[environment]", '[environment]\ndocker_image = "ghcr.io/acme/custom:1"')
    )
    assert "docker_image = 'ghcr.io/acme/custom:1' cannot be pulled here" in load_task(folder).image_error
