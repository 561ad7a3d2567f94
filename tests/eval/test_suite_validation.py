"""Every built-in suite is validated by `arborl eval` itself: its gold policy resolves 100 % of
the suite, its empty policy 0 %. Parametrized over the suites the benchmark folders register
(their loaders live under `arborl.tasks`), so a suite added there is covered without touching
this file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from arborl_require import unavailable

from arborl.tasks import list_suites

#: Suites whose envs need the arborl/gui image (a browser or a desktop in a container).
GUI_TAGS = {"web": "browser", "desktop": "gui"}
#: Suites too slow to run whole in CI, each with the test that samples it instead. swe-real's
#: 24 instances take 15-20 min gold + empty on two cores (measured whole in docs/eval.md).
SAMPLED_ELSEWHERE = {
    "swe-real": "tests/tasks/swebench/test_swe_real.py: one instance per repository, gold and empty, both forms",
    "bfcl-live-simple": "tests/tasks/bfcl/test_bfcl_suites.py: 2 of BFCL's possible answers no call satisfies",
    "bfcl-live-multiple": "tests/tasks/bfcl/test_bfcl_suites.py: 3 of BFCL's possible answers no call satisfies",
    "bfcl-java": "tests/tasks/bfcl/test_bfcl_suites.py: 3 of BFCL's possible answers its checker rejects",
}
#: The field's benchmarks (thousands of BFCL entries, TextWorld games generated on first use,
#: ScienceWorld's JVM): CI runs a sample of each in its own tests, `pytest -m full` the whole.
FIELD = (
    "arborl.tasks.bfcl.",
    "arborl.tasks.textworld.",
    "arborl.tasks.scienceworld.",
    "arborl.tasks.sokoban.",
)
#: Benchmarks with no scripted solution (run with a model), each with why.
MODEL_ONLY = {"web-miniwob-all": "MiniWoB++ tasks without a scripted solution here"}
#: Suites whose every task starts a browser, a desktop or a repository's sandbox (30-50 s gold +
#: empty each on two cores): CI runs CI_SAMPLE of their tasks spread over the suite, `pytest -m
#: full` the whole suite.
SAMPLED_IN_CI = {"web-mini", "web-miniwob", "swe-mini", "desktop-mini"}
CI_SAMPLE = 4


def spread_sample(ids: list[str], n: int) -> list[str]:
    """`n` of `ids`, evenly spread (the first, the last and between), in suite order."""
    if len(ids) <= n:
        return ids
    return [ids[round(i * (len(ids) - 1) / (n - 1))] for i in range(n)]


def _loader_module(suite) -> str:
    """Where a suite's loader lives: an entry-point string, or a function (or a partial of one)."""
    if isinstance(suite.loader, str):
        return suite.loader
    fn = getattr(suite.loader, "func", suite.loader)
    return f"{getattr(fn, '__module__', '')}:"


#: The suites arborl ships: registered by its benchmark folders, their loaders there.
BUILTIN_SUITES = [s for s in list_suites() if _loader_module(s).startswith("arborl.tasks.")]
SAMPLED_ELSEWHERE.update(
    (s.name, "tests/envs/scienceworld/test_scienceworld_eval_train.py: two task types, two variations")
    for s in BUILTIN_SUITES
    if s.name.startswith("scienceworld")
)


def arborl(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", *args], capture_output=True, text=True, timeout=timeout
    )


def _marks(suite) -> list[pytest.MarkDecorator]:
    marks = [getattr(pytest.mark, GUI_TAGS[t]) for t in suite.tags if t in GUI_TAGS]
    return [*marks, pytest.mark.full] if _loader_module(suite).startswith(FIELD) else marks


def _params():
    for s in BUILTIN_SUITES:
        if s.name in SAMPLED_ELSEWHERE or s.name in MODEL_ONLY:
            continue
        if s.name in SAMPLED_IN_CI:
            yield pytest.param(s, CI_SAMPLE, id=f"{s.name}-sample", marks=_marks(s))
            yield pytest.param(s, None, id=s.name, marks=[*_marks(s), pytest.mark.full])
        else:
            yield pytest.param(s, None, id=s.name, marks=_marks(s))


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize(("suite", "sample"), list(_params()))
def test_gold_resolves_everything_and_empty_nothing(suite, sample, docker_backend, tmp_path):
    from arborl.sandboxes.images import image_exists

    for tag, component in GUI_TAGS.items():
        if tag in suite.tags and not image_exists(docker_backend.client, "arborl/gui:latest"):
            unavailable(
                component, "no arborl/gui image: run `arborl sandbox build image=gui` (make test does)"
            )
    assert suite.gold is not None and suite.empty is not None, f"{suite.name} needs gold and empty policies"
    ids = [t.id for t in suite.tasks()]
    if sample is not None:
        ids = spread_sample(ids, sample)
    only = [f"tasks=[{','.join(ids)}]"] if sample is not None else []
    for agent, expected in (("gold", 1.0), ("empty", 0.0)):
        run = tmp_path / agent
        res = arborl(
            "eval",
            f"suite={suite.name}",
            f"agent={agent}",
            "sandbox=docker",
            f"run.dir={run}",
            "report=false",
            *only,
        )
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        summary = json.loads((run / "summary.json").read_text())
        failed = [
            f"{p.parent.parent.name}: {p.read_text()[:300]}" for p in run.glob("instances/*/*/error.txt")
        ]
        assert summary["resolved_rate"] == expected, (agent, summary, failed)
        assert summary["samples"] == len(ids) and summary["infra_errors"] == 0, summary
