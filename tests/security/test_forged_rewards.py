"""The agent forges its own reward, the way a policy under RL would find to, and gets 0.

Each attack is what an agent could do with its tools (commands as its own user in its own
sandbox) in `arborl/Code-v0`, without fixing the bug, and then `submit`. Every one of them
scored 1.0 on the code before the verifier moved out of the agent's reach (issue 31): the
verifier then ran the harness in the agent's sandbox as the agent, from its working tree,
with its Python user site, beside its processes. Each runs on both sandbox backends.
"""

from __future__ import annotations

import gymnasium
import pytest

import arborl.envs  # noqa: F401 - registers arborl/Code-v0
from arborl.envs import arelease, areset, astep
from arborl.envs.parsers import get_parser
from arborl.sandboxes import PoolConfig, SandboxPool
from arborl.tasks import CodeTask, get_suite
from arborl.tasks.swebench import swe_parts

P = get_parser("hermes")
BUG = CodeTask(
    id="forge-calc",
    problem_statement="`add(2, 3)` returns -1: make it return the sum.",
    repo_files={
        "calc.py": "def add(a, b):\n    return a - b\n",
        "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    },
    hidden_files={
        "test_hidden.py": "from calc import add\n\n\ndef test_more():\n    assert add(-1, 1) == 0\n"
    },
)
FIX = "sed -i 's/a - b/a + b/' calc.py"

# A root conftest.py whose report hook turns every failure into a pass.
CONFTEST = r"""cat > conftest.py <<'EOF'
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
EOF"""
SITE = "$(python3 -c 'import site; print(site.getusersitepackages())')"
# Runs at every Python start in the agent's home: the harness exits 0 before testing anything.
PTH = f"mkdir -p {SITE} && echo 'import os; os._exit(0)' > {SITE}/zz-forge.pth"
USERCUSTOMIZE = f"mkdir -p {SITE} && echo 'import os; os._exit(0)' > {SITE}/usercustomize.py"
# A stdlib module the verifier imports, planted where it would be looked up first.
SHADOW_CWD = "echo 'import os; os._exit(0)' > json.py"
SHADOW_VERIFIER_DIR = (
    "mkdir -p /tmp/arborl-verify && echo 'import os; os._exit(0)' > /tmp/arborl-verify/json.py"
)
# A process left behind that keeps rewriting the tests into passing ones.
REWRITER = (
    "nohup sh -c 'while true; do for f in test_*.py; do "
    'printf "def test_ok():\\n    pass\\n" > "$f"; done; sleep 0.01; done\' >/dev/null 2>&1 &'
)
# A pytest stand-in at the repository's root: `python3 -m pytest` imports it first.
FAKE_PYTEST = "printf 'print(\"2 passed\")\\nraise SystemExit(0)\\n' > pytest.py"
# The code under test ends the test process with success as soon as it is imported.
EXIT_ON_IMPORT = "sed -i '1i import os; print(\"2 passed in 0.01s\"); os._exit(0)' calc.py"


def call(name: str, **args) -> str:
    return P.format_call(name, args)


@pytest.fixture(params=["docker", "bwrap"])
async def pool(request):
    backend = request.getfixturevalue(f"{request.param}_backend")
    async with SandboxPool(backend, PoolConfig(max_size=2)) as p:
        yield p


async def episode(pool, task, *commands: str) -> tuple[float, dict]:
    """Run the agent's commands, then submit; returns (reward, the submit step's info)."""
    env = gymnasium.make("arborl/Code-v0", pool=pool)
    try:
        await areset(env, options={"task": task})
        for cmd in commands:
            _, _, terminated, _, info = await astep(env, call("bash", command=cmd))
            assert not terminated, info
        _, reward, terminated, _, info = await astep(env, call("submit"))
        assert terminated
        return reward, info
    finally:
        await arelease(env)
        env.close()


async def test_the_honest_fix_still_scores(pool):
    reward, info = await episode(pool, BUG, FIX)
    assert reward == 1.0, info["verifier"]


@pytest.mark.parametrize(
    "attack",
    [CONFTEST, PTH, USERCUSTOMIZE, SHADOW_CWD, SHADOW_VERIFIER_DIR, REWRITER, FAKE_PYTEST, EXIT_ON_IMPORT],
    ids=[
        "conftest",
        "pth",
        "usercustomize",
        "shadow-cwd",
        "shadow-verifier-dir",
        "rewriter",
        "fake-pytest",
        "exit-on-import",
    ],
)
async def test_forgeries_score_zero(pool, attack):
    reward, info = await episode(pool, BUG, attack)
    assert reward == 0.0, info["verifier"]


async def test_a_conftest_beside_a_real_fix_is_refused_with_its_reason(pool):
    reward, info = await episode(pool, BUG, FIX, CONFTEST)
    assert reward == 0.0 and any("conftest.py" in r for r in info["verifier"]["rejected"])


async def test_a_fix_written_through_a_shared_map_is_not_inherited_by_the_next_episode(pool):
    mmap_fix = (
        'python3 -c \'import mmap,os;m=mmap.mmap(os.open("calc.py",os.O_RDWR),0);'
        'm[:]=m[:].replace(b"a - b",b"a + b")\''
    )
    env = gymnasium.make("arborl/Code-v0", pool=pool, park_s=30.0)  # the next reset reuses it in place
    try:
        for _ in range(2):  # twice: the first reset after a snapshot copies everything anyway
            await areset(env, options={"task": BUG})
            await astep(env, call("bash", command=mmap_fix))
            await astep(env, call("submit"))
        await areset(env, options={"task": BUG})
        obs, *_ = await astep(env, call("bash", command="cat calc.py"))
        assert "a - b" in obs[0]["content"], obs
        _, reward, *_ = await astep(env, call("submit"))
        assert reward == 0.0
    finally:
        await arelease(env)
        env.close()


# ---- SWE-bench tasks: the env's reward and the evaluation's grade ------------------------------


@pytest.fixture(scope="module")
def strkit():
    return next(t for t in get_suite("swe-mini").tasks() if t.id == "arborl-mini__strkit-1")


@pytest.mark.parametrize("attack", [CONFTEST, PTH, REWRITER], ids=["conftest", "pth", "rewriter"])
async def test_swe_task_forgeries_score_zero(pool, strkit, attack):
    attack = attack.replace("test_*.py", "tests/test_*.py")
    reward, info = await episode(pool, strkit, attack)
    assert reward == 0.0, info["verifier"]


async def test_swe_gold_still_resolves(pool, strkit):
    from arborl.tasks.swebench import apply_command

    inst, _ = swe_parts(strkit)
    reward, info = await episode(pool, strkit, apply_command(inst.patch))
    assert reward == 1.0, info["verifier"]


async def test_evaluation_grades_a_patch_with_a_conftest_as_unresolved(pool, strkit):
    from arborl.envs.code.swe_grading import grade_swe

    inst, _ = swe_parts(strkit)
    forged = (
        "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
        "@@ -0,0 +1,6 @@\n+import pytest\n+\n+@pytest.hookimpl(hookwrapper=True)\n"
        "+def pytest_runtest_makereport(item, call):\n+    outcome = yield\n"
        '+    outcome.get_result().outcome = "passed"\n'
    )
    spec = gymnasium.make("arborl/Code-v0").unwrapped.sandbox_spec(strkit)
    grade = await grade_swe(pool, spec, strkit, forged)
    assert grade.status == "NO" and not grade.resolved
    assert grade.error is not None and grade.error.startswith("test_infrastructure_changed")
    gold = await grade_swe(pool, spec, strkit, inst.patch)
    assert gold.resolved


def _overwrite_in_place(path: str, text: str) -> str:
    """Python the agent runs: `text`, padded with a comment to the file's size, stored through a
    shared map, so the file changes without its size, ctime or mtime moving (on tmpfs a store
    to a page first mapped for reading stamps nothing)."""
    return (
        "python3 - <<'EOF'\n"
        "import mmap, os\n"
        f"fd = os.open({path!r}, os.O_RDWR)\n"
        "size = os.fstat(fd).st_size\n"
        f"data = {text!r}.encode()\n"
        "assert len(data) < size, (len(data), size)\n"
        "data += b'#' * (size - len(data) - 1) + b'\\n'\n"
        "m = mmap.mmap(fd, 0)\n"
        "m[:]\n"  # fault the pages in for reading first: the later store then moves no time
        "m[:] = data\n"
        "EOF"
    )


async def test_a_poisoned_git_config_does_not_run_in_the_grader(pool, strkit):
    """The agent rewrites .git's existing files through shared maps, so that the grader's
    `git checkout base -- tests/...` runs a clean filter (git hashes the test file, which the
    agent touched so that its stat data no longer matches the index) which writes a conftest.py
    making every test pass; a README-only patch graded on the same sandbox must stay unresolved."""
    from arborl.envs.code.swe_grading import grade_swe

    spec = gymnasium.make("arborl/Code-v0").unwrapped.sandbox_spec(strkit)
    config = '[filter "x"]\n\tclean=sh .git/description\n[core]\n\tattributesfile=.git/info/exclude\n'
    script = "cat;echo 'def pytest_runtest_call(item):item.runtest=int'>conftest.py\n"
    poison = "\n".join(
        [
            "set -e",
            _overwrite_in_place(".git/config", config),
            _overwrite_in_place(".git/description", script),
            _overwrite_in_place(".git/info/exclude", "* filter=x\n"),
            "touch tests/test_text.py",
        ]
    )
    readme = "diff --git a/NOTES.md b/NOTES.md\nnew file mode 100644\n--- /dev/null\n+++ b/NOTES.md\n@@ -0,0 +1 @@\n+notes\n"
    for _ in range(2):  # the first reset after a snapshot copies everything anyway
        async with pool.acquire(spec) as sb:
            res = await sb.exec(poison, timeout=30)
            assert res.ok, res.output
    grade = await grade_swe(pool, spec, strkit, readme)
    assert grade.status == "NO" and not grade.resolved, grade.log[-2000:]
