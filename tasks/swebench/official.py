"""SWE-bench's own log parsers (the `swebench` package), for the repositories it has one for.

    read_statuses("django/django", "django", log)    # ({test: status}, "swebench:parse_log_django")
    read_statuses("me/tool", "pytest", log)          # ({test: status}, "pytest"): arborl's parser

The FAIL_TO_PASS / PASS_TO_PASS ids of SWE-bench's instances were written by its parser for
each repository (`MAP_REPO_TO_PARSER_PY`: django, sympy, astropy, requests, ...), several of
which rewrite ids (requests' parametrized paths, matplotlib's, seaborn's): reading their logs
with that same parser keeps the verdict the official one. For every other repository the log
is read by arborl's parsers (`log_parsers.py`, standard library only, also run inside the
sandboxes), which tests/tasks/test_swe_official.py checks against SWE-bench's on real logs.

`swebench` is optional: it is installed without its dependencies (`pip install --no-deps
swebench==5.0.2 unidiff==1.0.1`, as scripts/setup.sh does; its declared dependencies, docker
SDK to Modal, are for its own runner, not for parsing). Without it, arborl's parsers read every
log, and the grade says which parser read it.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import types
from functools import lru_cache
from pathlib import Path
from typing import Any

from .log_parsers import parse_log

log = logging.getLogger(__name__)
#: The prefix of a grade's `log_parser` when SWE-bench's parser read the log.
OFFICIAL = "swebench:"


def _load_harness_module(name: str) -> types.ModuleType:
    """`swebench.harness.<name>` without running `swebench/harness/__init__.py`, which imports
    its Docker and Modal runners (their packages are not installed with --no-deps)."""
    try:
        return importlib.import_module(f"swebench.harness.{name}")
    except ImportError:
        spec = importlib.util.find_spec("swebench")
        if spec is None or not spec.submodule_search_locations:
            raise
        if "swebench.harness" not in sys.modules or not hasattr(sys.modules["swebench.harness"], "__path__"):
            package = types.ModuleType("swebench.harness")
            package.__path__ = [str(Path(next(iter(spec.submodule_search_locations))) / "harness")]
            sys.modules["swebench.harness"] = package
        return importlib.import_module(f"swebench.harness.{name}")


@lru_cache(maxsize=1)
def official_harness() -> dict[str, Any] | None:
    """SWE-bench's `grading` and `log_parsers` modules and its `TestSpec`; None without swebench."""
    if importlib.util.find_spec("swebench") is None:
        return None
    try:
        parsers = _load_harness_module("log_parsers")
        python = _load_harness_module("log_parsers.python")
        grading = _load_harness_module("grading")
        test_spec = importlib.import_module("swebench.types").TestSpec
    except ImportError as e:
        log.warning("swebench is installed but its grader does not import (%s): arborl's parsers are used", e)
        return None
    repo_parsers = {}
    for repo, fn in python.MAP_REPO_TO_PARSER_PY.items():
        names = [n for n, f in parsers.PARSER_REGISTRY.items() if f is fn]
        if names:  # aliases share one function: the one named after the repository, if there is one
            own = [n for n in names if n.removeprefix("parse_log_") in repo.split("/")[1].replace("-", "_")]
            repo_parsers[repo] = (own or names)[0]
    return {
        "grading": grading,
        "parsers": parsers.PARSER_REGISTRY,
        "repos": repo_parsers,
        "TestSpec": test_spec,
    }


def official_parser(repo: str) -> str | None:
    """The name (in SWE-bench's `PARSER_REGISTRY`) of SWE-bench's parser for `repo`, if any."""
    harness = official_harness()
    return harness["repos"].get(repo) if harness else None


def parse_official(name: str, repo: str, text: str) -> dict[str, str]:
    """SWE-bench's parser `name` on a test log."""
    harness = official_harness()
    if harness is None:
        raise RuntimeError("swebench is not installed: pip install --no-deps swebench==5.0.2 unidiff==1.0.1")
    spec = harness["TestSpec"](
        instance_id="", image="", eval_script_list=[], repo=repo, version="", FAIL_TO_PASS=[], PASS_TO_PASS=[]
    )
    return dict(harness["parsers"][name](text, spec))


def read_statuses(repo: str, log_parser: str, text: str) -> tuple[dict[str, str], str]:
    """({test id: status}, which parser read them): SWE-bench's parser for a repository it has
    one for (when swebench is installed), else arborl's `log_parser`."""
    name = official_parser(repo)
    if name is not None:
        return parse_official(name, repo, text), OFFICIAL + name
    return parse_log(log_parser, text), log_parser
