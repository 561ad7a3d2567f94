"""The swe-mini repositories: small Python packages, each with three real bugs.

A repository is source templates with markers (`@@bug-id:n@@` on a line of its own) that
the generator fills with the buggy or the fixed snippet; a bug's fix commit fills its
markers with the fixed snippets and appends its tests to a test file. The generator
(`..generate`) turns these into git histories, patches and instances.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Bug:
    """One issue: where the bug is, how it is fixed, and the tests the fix adds."""

    id: str
    title: str
    problem_statement: str
    #: (marker, buggy snippet, fixed snippet); each snippet is whole lines, indentation included.
    changes: tuple[tuple[str, str, str], ...]
    test_file: str
    tests: str
    #: An unrelated documentation line committed before this bug's base commit (history noise).
    docs_note: str = ""


@dataclass(frozen=True)
class Repo:
    name: str
    version: str
    summary: str
    files: dict[str, str]
    tests: dict[str, str]
    bugs: tuple[Bug, ...]
    environment: dict[str, Any] = field(default_factory=dict)


GITIGNORE = "__pycache__/\n*.pyc\n.pytest_cache/\n"
PYPROJECT = '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'


def all_repos() -> tuple[Repo, ...]:
    """Every swe-mini repository, in instance order."""
    from .intervals import INTERVALS
    from .shopcart import SHOPCART
    from .statkit import STATKIT
    from .strkit import STRKIT

    return (STRKIT, STATKIT, INTERVALS, SHOPCART)
