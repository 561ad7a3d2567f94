"""The user-env example of docs/envs.md (and the README), run exactly as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from arborl.envs import registered_ids

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.docker


def snippet(path: Path) -> str | None:
    m = re.search(
        r"<!-- user-env:start -->\n```python\n(.*?)```\n<!-- user-env:end -->", path.read_text(), re.DOTALL
    )
    return m.group(1) if m else None


def test_the_documented_user_env_works_as_written(env_backend):
    code = snippet(ROOT / "docs" / "envs.md")
    assert code is not None
    definition = code[: code.index("env = gymnasium.make")]
    assert len([line for line in definition.splitlines() if line.strip()]) <= 16, "keep the example short"
    exec(compile(code, "docs/envs.md", "exec"), {"__name__": "arborl_docs_example"})  # asserts inside
    assert "myorg/WordCount-v0" in registered_ids()


def test_the_readme_shows_the_same_example():
    readme = ROOT / "README.md"
    shown = snippet(readme) if readme.exists() else None
    if shown is None:
        pytest.skip("README.md has no user-env example block yet")
    assert shown == snippet(ROOT / "docs" / "envs.md")
