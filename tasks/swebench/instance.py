"""The SWE-bench instance format, and the environment an instance's repository needs.

Field names and meanings are SWE-bench's, so instances of the real datasets (SWE-bench,
SWE-bench Lite/Verified, SWE-Gym, ...) load as they are; extra fields are kept.
`FAIL_TO_PASS` / `PASS_TO_PASS` may be lists or JSON-encoded strings (the datasets on the
Hub store them as strings).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .harness import files_in_patch
from .log_parsers import PARSERS

_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")

#: Where an environment's files live in the sandbox (the environment image layer).
ENV_ROOT = "/opt/arborl-swe/env"
#: Where repository bundles live in the environment layer.
REPO_ROOT = "/opt/arborl-swe/repos"


class SWEInstance(BaseModel):
    """One task instance: a repository at a commit, an issue, and the tests that judge a fix."""

    model_config = ConfigDict(extra="allow", frozen=True)

    instance_id: str = Field(min_length=1, description="e.g. 'astropy__astropy-12907'")
    repo: str = Field(min_length=1, description="'owner/name'")
    base_commit: str = Field(description="the commit the agent starts from (hex)")
    problem_statement: str = Field(min_length=1, description="the issue text the agent is given")
    patch: str = Field("", description="the gold patch (unified diff of the non-test files)")
    test_patch: str = Field(min_length=1, description="unified diff adding/changing the tests")
    FAIL_TO_PASS: tuple[str, ...] = Field(description="tests that fail before the fix and pass after")
    PASS_TO_PASS: tuple[str, ...] = Field((), description="tests that pass before and after")
    environment_setup_commit: str | None = Field(None, description="commit the environment is built at")
    version: str = Field("", description="the repository version; selects the environment")
    hints_text: str = ""
    created_at: str = ""

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else []
            except json.JSONDecodeError as e:
                raise ValueError(f"not a JSON list of test ids: {value[:80]!r} ({e})") from e
        if not isinstance(value, list | tuple) or not all(isinstance(t, str) for t in value):
            raise ValueError("must be a list of test ids (strings), or a JSON string of one")
        return tuple(value)

    @field_validator("FAIL_TO_PASS")
    @classmethod
    def _some_failing_test(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("FAIL_TO_PASS is empty: an instance needs at least one test the fix makes pass")
        return value

    @field_validator("base_commit", "environment_setup_commit")
    @classmethod
    def _commit(cls, value: str | None) -> str | None:
        if value is not None and not _COMMIT.match(value):
            raise ValueError(f"not a commit hash: {value!r}")
        return value

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> str:
        return "" if value is None else str(value)  # the datasets store versions as floats at times

    @field_validator("test_patch")
    @classmethod
    def _is_diff(cls, value: str) -> str:
        if not files_in_patch(value):
            raise ValueError("test_patch is not a git unified diff (no 'diff --git a/... b/...' header)")
        return value

    @property
    def test_files(self) -> list[str]:
        """The files the test patch touches: what the evaluation runs."""
        return list(files_in_patch(self.test_patch))

    @property
    def repo_slug(self) -> str:
        """`owner__name`, SWE-bench's spelling of a repository in file names."""
        return self.repo.replace("/", "__")


class SWEEnvironment(BaseModel):
    """What a repository at one version needs to run its tests (SWE-bench's per-repo,
    per-version "specs"): one image layer per environment, shared by its instances."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str = Field("", description="'owner/name' ('' : the default for any repository)")
    version: str = Field("", description="'' : any version of the repository")
    files: dict[str, str] = Field(
        default_factory=dict, description=f"text files installed under {ENV_ROOT} (dependency sources)"
    )
    install: tuple[str, ...] = Field(
        (), description=f"shell commands run as root in {ENV_ROOT} once the files are there"
    )
    instance_install: tuple[str, ...] = Field(
        (), description="shell commands run as root in the repository after it is checked out"
    )
    test_cmd: str = Field(
        "python3 -m pytest -rA -p no:cacheprovider",
        description="evaluation command; the test patch's files are appended; must print -rA lines",
    )
    agent_test_cmd: str = Field(
        "python3 -m pytest -q -p no:cacheprovider", description="what the agent's run_tests tool runs"
    )
    test_timeout_s: float = Field(900.0, gt=0, description="time limit of one evaluation run")
    pip: tuple[str, ...] = Field(
        (),
        description="requirements (pip syntax, e.g. 'attrs==23.2.0'): fetched as wheels on the host from "
        "the package index when the environment layer is built, unpacked into the image; sandboxes stay "
        "offline. Instance images only",
    )
    log_parser: str = Field(
        "pytest",
        description="how the test log is read: a key of `log_parsers.PARSERS` (pytest, "
        "unittest, django, sympy)",
    )
    test_directives: Literal["paths", "django"] = Field(
        "paths", description="what test_cmd is given: the test patch's file paths, or Django module labels"
    )
    python_path: tuple[str, ...] | None = Field(
        None,
        description="directories of the repository put on PYTHONPATH for test_cmd and agent_test_cmd, "
        "as SWE-bench's `pip install -e .` makes a src-layout package importable (e.g. ['src']); None: "
        "read from the repository's layout when its files are known (`layout.package_dirs`: src/, "
        "pyproject.toml's and setup.cfg's package dirs); []: none",
    )

    @property
    def eval_test_cmd(self) -> str:
        """`test_cmd` as the evaluation runs it (with `python_path`)."""
        return _with_python_path(self.python_path, self.test_cmd)

    @property
    def run_tests_cmd(self) -> str:
        """`agent_test_cmd` as the agent's run_tests tool runs it (with `python_path`)."""
        return _with_python_path(self.python_path, self.agent_test_cmd)

    @field_validator("log_parser")
    @classmethod
    def _known_parser(cls, value: str) -> str:
        if value not in PARSERS:
            raise ValueError(f"unknown log parser {value!r}; one of {sorted(PARSERS)}")
        return value

    @field_validator("files")
    @classmethod
    def _relative(cls, files: dict[str, str]) -> dict[str, str]:
        for path in files:
            if path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"environment file paths must be relative: {path!r}")
        return files

    @field_validator("python_path")
    @classmethod
    def _repository_dirs(cls, dirs: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for d in dirs or ():
            if not d or d.startswith("/") or ".." in d.split("/") or ":" in d:
                raise ValueError(f"python_path entries are directories of the repository: {d!r}")
        return dirs


def _with_python_path(dirs: tuple[str, ...] | None, command: str) -> str:
    if not dirs:
        return command
    # absolute ($PWD is the repository): a test that changes directory still imports the package
    paths = ":".join(f"$PWD/{shlex.quote(d)}" for d in dirs)
    return f"PYTHONPATH={paths}${{PYTHONPATH:+:$PYTHONPATH}} {command}"


DEFAULT_ENVIRONMENT = SWEEnvironment()


def environment_for(
    instance: SWEInstance,
    environments: list[SWEEnvironment] | tuple[SWEEnvironment, ...] = (),
    registry: bool = True,
) -> SWEEnvironment:
    """The most specific environment: (repo, version), then (repo, any), in `environments`
    first, then in the registry of known repositories (`specs.ENVIRONMENTS`, when `registry`),
    then the default (pytest)."""
    from .environments import ENVIRONMENTS

    pools = (environments, ENVIRONMENTS) if registry else (environments,)
    for pool in pools:
        for repo, version in ((instance.repo, instance.version), (instance.repo, "")):
            for env in pool:
                if env.repo == repo and env.version == version:
                    return env
    return DEFAULT_ENVIRONMENT
