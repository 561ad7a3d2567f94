"""Task types the environments consume: plain, validated data (pydantic), no behaviour.

A task is what `env.reset(options={"task": ...})` receives, as a model or as a dict that
validates into one. This module imports nothing else of arborl (imports go envs → tasks).

    CodeTask   SWE-style: a repository in an image, a problem statement, a verifier command.
    ToolTask   function calling: a question, tools declared as JSON schema, an answer to match.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: The sandbox image every built-in task uses unless it names another (kept as a string:
#: `tasks` may not import `sandboxes`).
BASE_IMAGE = "arborl/base:latest"
#: Where a code task's verifier files go when it is scored: a directory of root's that the
#: agent's commands may read but not write, under /tmp so the next reset removes it.
VERIFIER_DIR = "/tmp/arborl-verify"


class Task(BaseModel):
    """What every task has: a stable id and free-form metadata (suite, difficulty, ...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, description="stable id, unique within its suite")
    metadata: dict[str, Any] = Field(default_factory=dict, description="anything the suite wants to keep")


class CodeTask(Task):
    """A repository, a problem to fix in it, and a command that says whether it is fixed.

    The repository comes as `repo_files` (relative path → text) and/or `repo_path` (a host
    directory copied in). `setup` runs once per sandbox, as root, before the snapshot every
    episode starts from (install dependencies there).

    Scoring never trusts the episode's sandbox as the agent left it: the agent's diff is
    taken, the sandbox is reset to the snapshot (every process of the episode killed), and
    the diff is applied to the clean tree. Then `hidden_files` are written into the
    repository (tests the agent must not see), `verifier_files` into `VERIFIER_DIR` (root's,
    read-only to the agent; the diff is there as `model.patch`), and `verify_command` runs:
    exit code 0 is 1.0, anything else 0.0. A verifier that reads its own verdict from a test
    log (`verifier_applies_patch`, the SWE-bench harness) applies `model.patch` itself.
    """

    kind: Literal["code"] = "code"
    problem_statement: str = Field(min_length=1, description="what the agent is asked to do")
    image: str = Field(BASE_IMAGE, description="container image holding the toolchain")
    workdir: str = Field("/workspace", description="where the repository lives in the sandbox")
    repo_files: dict[str, str] = Field(default_factory=dict, description="relative path → file text")
    repo_path: str | None = Field(None, description="host directory copied into workdir")
    git_init: bool = Field(True, description="commit the repository first, so `git diff` is the patch")
    setup: tuple[str, ...] = Field((), description="commands run once per sandbox, before the snapshot")
    test_command: str = Field("python3 -m pytest -q", description="what the run_tests tool runs")
    test_timeout_s: float = Field(120.0, gt=0, description="time limit of run_tests")
    verify_command: str | None = Field(None, description="reward command; None means test_command")
    verify_timeout_s: float = Field(300.0, gt=0, description="time limit of the verifier")
    hidden_files: dict[str, str] = Field(
        default_factory=dict, description="relative path → text, written just before verifying"
    )
    verifier_files: dict[str, str] = Field(
        default_factory=dict, description=f"file name → text, written into {VERIFIER_DIR} (root's) to verify"
    )
    verifier_applies_patch: bool = Field(
        False, description=f"the verify command applies {VERIFIER_DIR}/model.patch itself"
    )
    network: bool = Field(False, description="whether the sandbox may reach a network")

    @field_validator("repo_files", "hidden_files")
    @classmethod
    def _relative(cls, files: dict[str, str]) -> dict[str, str]:
        for path in files:
            if path.startswith("/") or ".." in Path(path).parts:
                raise ValueError(f"repository paths must be relative and stay inside it: {path!r}")
        return files

    @field_validator("verifier_files")
    @classmethod
    def _plain_names(cls, files: dict[str, str]) -> dict[str, str]:
        for name in files:
            if "/" in name or name in ("", ".", "..", "model.patch"):
                raise ValueError(f"verifier files are plain file names other than model.patch: {name!r}")
        return files

    @property
    def verifier(self) -> str:
        return self.verify_command or self.test_command


class Document(BaseModel):
    """One entry of a search corpus."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    title: str = ""
    text: str


class ToolDecl(BaseModel):
    """A tool a task declares: an OpenAI-style function schema plus where it runs.

    Exactly one implementation: `python` (source defining a function named `name`, run in
    the sandbox with the arguments as keywords; what it returns or prints is the result) or
    `handler` (`"package.module:function"` on the host, for trusted suite code).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
    description: str = ""
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON schema of the arguments",
    )
    python: str | None = None
    handler: str | None = None

    @model_validator(mode="after")
    def _one_implementation(self) -> ToolDecl:
        if (self.python is None) == (self.handler is None):
            raise ValueError(f"tool {self.name!r} needs exactly one of `python` or `handler`")
        return self


class ToolTask(Task):
    """A question answered with the help of tools; the final answer is checked by a verifier.

    `verifier` names a built-in check (`exact`, `numeric`, `contains`) or a user function
    `"package.module:function"` called as `fn(answer: str, task: ToolTask) -> float | bool`.
    """

    kind: Literal["tool"] = "tool"
    question: str = Field(min_length=1)
    system_prompt: str | None = Field(None, description="overrides the env's default system prompt")
    tools: tuple[ToolDecl, ...] = ()
    builtin_tools: tuple[str, ...] | None = Field(
        None, description="built-in tools offered; None: python, plus search when there is a corpus"
    )
    answer: str | float | int | None = None
    verifier: str = "exact"
    tolerance: float = Field(1e-6, ge=0, description="relative tolerance of the numeric verifier")
    corpus: tuple[Document, ...] = Field((), description="documents the search tool searches")
    corpus_path: str | None = Field(None, description="a JSONL file of documents shipped with the suite")
    image: str = BASE_IMAGE

    @model_validator(mode="after")
    def _unique_tools(self) -> ToolTask:
        names = [t.name for t in self.tools]
        if len(names) != len(set(names)):
            raise ValueError(f"tool names must be unique, got {names}")
        return self


def load_corpus(path: str | Path) -> tuple[Document, ...]:
    """Read a JSONL corpus: one `{"id", "title", "text"}` object per line."""
    docs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    docs.append(Document.model_validate(json.loads(line)))
                except ValueError as e:
                    raise ValueError(f"{path}:{n}: not a corpus document: {e}") from e
    return tuple(docs)


def coerce_task(task: Task | Mapping[str, Any], task_type: type[Task]) -> Task:
    """`task` as a `task_type`: models pass through, mappings are validated."""
    if isinstance(task, task_type):
        return task
    if isinstance(task, Task):
        return task_type.model_validate(task.model_dump())
    return task_type.model_validate(dict(task))
