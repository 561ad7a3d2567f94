"""SWE-bench grading in real containers: FULL / PARTIAL / NO, patch-apply failures, empty
patches; instance images; the model patch read from the episode's repository."""

from __future__ import annotations

import difflib
import json
import subprocess

import gymnasium
import pytest

import arborl.envs  # noqa: F401
from arborl.envs import arelease, areset, astep
from arborl.envs.code.swe_grading import grade_swe
from arborl.sandboxes import PoolConfig, SandboxPool
from arborl.tasks import CodeTask, get_suite
from arborl.tasks.swebench import mini as swe_mini
from arborl.tasks.swebench import swe_parts, to_code_task

pytestmark = pytest.mark.docker


def edit_patch(task, edits: dict[str, list[tuple[str, str]]]) -> str:
    """A git-style unified diff applying (old, new) replacements to files of the task's base commit."""
    inst, _ = swe_parts(task)
    files = swe_mini.files_at(swe_mini.clone_of(swe_mini.bundle_for(inst.repo)), inst.base_commit)
    out = []
    for path, changes in edits.items():
        before = files[path]
        after = before
        for old, new in changes:
            assert old in after, (path, old)
            after = after.replace(old, new, 1)
        diff = difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}")
        out.append(f"diff --git a/{path} b/{path}\n" + "".join(diff))
    return "".join(out)


@pytest.fixture(scope="session")
def swe_tasks():
    return {t.id: t for t in get_suite("swe-mini").tasks()}


@pytest.fixture(scope="session")
def swe_image_tasks(docker_backend, swe_tasks, workers_lock):
    """The same tasks on their instance images (built once, by one xdist worker while the
    other waits; cached by content hash after)."""
    from arborl.envs.code.instance_images import instance_image

    out = {}
    with workers_lock("swe-mini-instance-images"):
        for task_id in ("arborl-mini__strkit-1", "arborl-mini__shopcart-1"):
            task = swe_tasks[task_id]
            inst, env = swe_parts(task)
            out[task_id] = to_code_task(inst, env, image=instance_image(task, docker_backend.client))
    return out


STRKIT = "arborl-mini__strkit-1"
# strkit-1: slugify must collapse runs of separators (test 1) and strip them at the ends (test 2)
COLLAPSE = ('_NON_ALNUM = re.compile(r"[^a-z0-9]")', '_NON_ALNUM = re.compile(r"[^a-z0-9]+")')
STRIP = ("    return slug\n", "    return slug.strip(sep)\n")
BREAK_WRAP = (
    "lines.append(line)\n            line = word",
    "lines.append(line.upper())\n            line = word",
)


@pytest.mark.parametrize("form", ["portable", "image"])
async def test_grades_follow_swe_bench(docker_backend, swe_tasks, swe_image_tasks, form):
    task = swe_tasks[STRKIT] if form == "portable" else swe_image_tasks[STRKIT]
    inst, _ = swe_parts(task)
    spec = gymnasium.make("arborl/Code-v0").unwrapped.sandbox_spec(task)
    cases = {
        "gold": inst.patch,
        "partial": edit_patch(task, {"strkit/text.py": [COLLAPSE]}),
        "breaks_p2p": edit_patch(task, {"strkit/text.py": [COLLAPSE, STRIP, BREAK_WRAP]}),
        "garbage": "diff --git a/strkit/text.py b/strkit/text.py\n--- a/strkit/text.py\n+++ b/strkit/text.py\n"
        "@@ -1,2 +1,2 @@\n-this line is not there\n+nor this one\n",
    }
    async with SandboxPool(docker_backend, PoolConfig(max_size=2)) as pool:
        grades = {name: await grade_swe(pool, spec, task, patch) for name, patch in cases.items()}
        empty = await grade_swe(pool, spec, task, "")
    assert grades["gold"].status == "FULL" and grades["gold"].resolved
    assert sorted(grades["gold"].FAIL_TO_PASS["success"]) == sorted(inst.FAIL_TO_PASS)
    partial = grades["partial"]
    assert partial.status == "PARTIAL" and not partial.resolved
    assert partial.FAIL_TO_PASS == {
        "success": ["tests/test_text.py::test_slugify_collapses_punctuation"],
        "failure": ["tests/test_text.py::test_slugify_strips_edges"],
    }
    broken = grades["breaks_p2p"]
    assert broken.status == "NO" and broken.PASS_TO_PASS["failure"] == ["tests/test_text.py::test_wrap_words"]
    assert not broken.FAIL_TO_PASS["failure"]  # every FAIL_TO_PASS passes, yet a PASS_TO_PASS broke
    garbage = grades["garbage"]
    assert garbage.status == "NO" and garbage.error == "patch_apply_failed" and garbage.patch_applied is False
    assert empty.status == "NO" and empty.empty_patch


async def test_a_dependency_installed_by_the_environment_is_there(docker_backend, swe_tasks, swe_image_tasks):
    """shopcart imports moneyfmt, which only its environment layer (or setup) installs."""
    for task in (swe_tasks["arborl-mini__shopcart-1"], swe_image_tasks["arborl-mini__shopcart-1"]):
        inst, _ = swe_parts(task)
        spec = gymnasium.make("arborl/Code-v0").unwrapped.sandbox_spec(task)
        async with SandboxPool(docker_backend, PoolConfig(max_size=1)) as pool:
            grade = await grade_swe(pool, spec, task, inst.patch)
        assert grade.status == "FULL", grade.log


async def test_instance_images_hold_only_the_history_up_to_the_base_commit(docker_backend, swe_image_tasks):
    task = swe_image_tasks["arborl-mini__shopcart-1"]
    inst, _ = swe_parts(task)
    clone = swe_mini.clone_of(swe_mini.bundle_for(inst.repo))
    later = subprocess.run(
        ["git", "-C", str(clone), "rev-list", "--ancestry-path", f"{inst.base_commit}..HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert later  # the bundle holds the fix and more
    spec = gymnasium.make("arborl/Code-v0").unwrapped.sandbox_spec(task)
    async with SandboxPool(docker_backend, PoolConfig(max_size=1)) as pool, pool.acquire(spec) as sb:
        head = await sb.exec("git rev-parse HEAD; git rev-list --all | wc -l; git status --porcelain | wc -l")
        leaked = [c for c in later if (await sb.exec(["git", "cat-file", "-e", c])).exit_code == 0]
        layers = docker_backend.client.images.get(task.image).history()
    sha, commits, dirty = head.stdout.split()
    assert sha == inst.base_commit and int(dirty) == 0 and int(commits) >= 1
    assert leaked == []  # no later commit (the fix) can be read from .git
    env_tag = [t for layer in layers for t in (layer.get("Tags") or []) if t != task.image]
    assert env_tag, "the instance image sits on an environment layer of its own"


async def test_the_model_patch_is_the_episodes_diff_new_files_included(docker_backend):
    task = CodeTask(
        id="patch-capture",
        problem_statement="p",
        repo_files={"calc.py": "def add(a, b):\n    return a - b\n"},  # no .gitignore
    )

    def call(name, **args):
        return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"

    async with SandboxPool(docker_backend, PoolConfig(max_size=1)) as pool:
        env = gymnasium.make("arborl/Code-v0", pool=pool)
        await areset(env, options={"task": task})
        await astep(
            env,
            call(
                "bash",
                command="sed -i 's/a - b/a + b/' calc.py && echo 'X = 1' > extra.py && "
                "python3 -c 'import calc, extra' && git add extra.py && "
                "git -c user.name=a -c user.email=a@b commit -qm wip",
            ),
        )
        await astep(
            env,
            call(
                "bash",
                command="echo 'more' > notes.txt && mkdir -p __pycache__ sub/__pycache__ && "
                "touch __pycache__/calc.cpython-311.pyc sub/__pycache__/x.pyc",
            ),
        )
        status = (await env.unwrapped.sandbox.exec("git status --porcelain")).stdout
        direct, error = await env.unwrapped.capture_patch()
        assert (
            await env.unwrapped.sandbox.exec("git status --porcelain")
        ).stdout == status  # index untouched
        _, _, terminated, _, info = await astep(env, call("submit"))
        await arelease(env)
    patch = info["model_patch"]
    assert error is None and patch == direct and terminated
    assert (
        "+    return a + b" in patch and "b/extra.py" in patch and "b/notes.txt" in patch
    )  # committed or not
    assert ".pyc" not in patch and "__pycache__" not in patch and ".arborl" not in patch
