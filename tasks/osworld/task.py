"""OSWorld's task format: the `DesktopTask` type and the checks that need no desktop.

An OSWorld task file looks like this (https://github.com/xlang-ai/OSWorld, evaluation_examples/):

    {"id": "...", "instruction": "...", "source": "...", "related_apps": [...],
     "config": [{"type": "open", "parameters": {"path": "/home/agent/notes.txt"}}, ...],
     "evaluator": {"func": "compare_text_file",            # or a list of names
                   "result": {"type": "vm_file", "path": "...", "dest": "notes.txt"},
                   "expected": {"type": "cache_file", "path": "want.txt"},
                   "options": {"ignore_blanks": true},       # per metric (a list with a list of funcs)
                   "conj": "and",                            # how a list of metrics combines
                   "postconfig": [...]}}                     # setup steps run before evaluating

The models check the format itself (the evaluator's lists agree, files to upload exist,
downloads are cached, no task needs root: `root.py`). Whether a desktop can run a step, a
getter or a metric is the desktop's to say: validated with a `DesktopSupport` in the
validation context (`load_osworld_task(..., support=...)`), each is put to it, and what it
refuses is refused here, at load time, naming the culprit (`UnsupportedOSWorldFeature`).
The desktop env (`arborl.envs.desktop`) holds its own (`support.py`) and checks every task
it is given with it, so a task loaded without one is still refused before it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from ..task_types import Task
from .cache import (
    DOWNLOAD_CACHE_ENV,
    cached_cloud_file,
    cached_download,
    default_download_cache,
    getter_files,
)
from .root import agent_root_problem, root_after_agent

#: The sandbox image desktop tasks run in (`arborl sandbox build image=gui`).
GUI_IMAGE = "arborl/gui:latest"
#: Metrics that read only their `result` (OSWorld gives them no `expected`).
RESULT_ONLY_METRICS = frozenset({"check_text_enlarged", "is_utc_0"})


class UnsupportedOSWorldFeature(ValueError):
    """A task uses a setup step, getter, metric or option the desktop env cannot run."""


class TaskNeedsRoot(UnsupportedOSWorldFeature):
    """The task needs root where the desktop sandbox gives none (`root.py`)."""


class DesktopSupport(Protocol):
    """What a desktop can run. Each method returns when it can and raises
    `UnsupportedOSWorldFeature` (or `ValueError` for malformed parameters) when it cannot."""

    def check_step(self, kind: str, parameters: Mapping[str, Any]) -> None:
        """A setup step (`config` or `postconfig`)."""

    def check_getter(self, kind: str, parameters: Mapping[str, Any]) -> None:
        """A result or expected getter."""

    def check_metric(self, name: str) -> None:
        """A metric's name (before its getters are looked at)."""

    def check_metric_use(self, name: str, options: Mapping[str, Any], expected: OSWorldGetter | None) -> None:
        """A metric's options, and the rules its `expected` getter gives it."""


def _support(info: ValidationInfo) -> DesktopSupport | None:
    """The `support` the loader put in the validation context (None: the format only)."""
    context: Mapping[str, DesktopSupport | None] = info.context if isinstance(info.context, Mapping) else {}
    return context.get("support")


class OSWorldStep(BaseModel):
    """One setup step: `{"type": ..., "parameters": {...}}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str
    parameters: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _supported(self, info: ValidationInfo) -> OSWorldStep:
        support = _support(info)
        if support is not None:
            support.check_step(self.type, self.parameters)
        p = self.parameters
        if self.type == "sleep" and "seconds" in p and not isinstance(p["seconds"], int | float):
            raise ValueError(f"sleep: `seconds` must be a number, got {p['seconds']!r}")
        if self.type == "upload_file" and "files" in p:
            files = p["files"]
            if not isinstance(files, list) or not all(
                isinstance(f, Mapping) and {"local_path", "path"} <= f.keys() for f in files
            ):
                raise ValueError("upload_file: `files` must be a list of {local_path, path}")
        return self

    def files(self) -> list[Any]:
        """The `files` of an `upload_file` or `download` step (none when it names none)."""
        return list(self.parameters.get("files") or ())


class OSWorldGetter(BaseModel):
    """A result/expected getter: `{"type": ..., <its parameters>}`."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: str

    @model_validator(mode="after")
    def _supported(self, info: ValidationInfo) -> OSWorldGetter:
        support = _support(info)
        if support is not None:
            support.check_getter(self.type, self.params)
        return self

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class OSWorldEvaluator(BaseModel):
    """The evaluator, normalised to lists: metric i gets result[i], expected[i], options[i]."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    func: tuple[str, ...]
    result: tuple[OSWorldGetter | None, ...] = ()
    expected: tuple[OSWorldGetter | None, ...] = ()
    options: tuple[dict[str, Any], ...] = ()
    conj: Literal["and", "or"] = "and"
    postconfig: tuple[OSWorldStep, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _as_lists(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        funcs = data.get("func")
        single = isinstance(funcs, str)
        n = 1 if single else len(funcs or [])
        for key in ("func", "result", "expected", "options"):
            value = data.get(key)
            if value is None or value == [] or value == {}:
                data[key] = [None] * n if key != "func" else []
            elif single:
                data[key] = [value]
        data["options"] = [o or {} for o in data["options"]]
        return data

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> OSWorldEvaluator:
        support = _support(info)
        if not self.func:
            raise ValueError("evaluator.func is empty")
        n = len(self.func)
        for key in ("result", "expected", "options"):
            if len(getattr(self, key)) != n:
                raise ValueError(f"evaluator.{key} has {len(getattr(self, key))} entries for {n} metrics")
        for i, name in enumerate(self.func):
            if support is not None:
                support.check_metric(name)
            if name == "infeasible":
                if n != 1:
                    raise ValueError("`infeasible` must be the only metric")
                continue
            if self.result[i] is None or (self.expected[i] is None and name not in RESULT_ONLY_METRICS):
                raise ValueError(f"metric {name!r} needs both a `result` and an `expected` getter")
            if support is not None:
                support.check_metric_use(name, self.options[i], self.expected[i])
        return self

    @property
    def infeasible(self) -> bool:
        return self.func == ("infeasible",)


class DesktopTask(Task):
    """An OSWorld-format desktop task: an instruction, setup steps, and an evaluator.

    `metadata["osworld"]` keeps the file's informational fields (`source`, `snapshot`,
    `related_apps`, ...); `base_dir` is where relative `upload_file` paths are read from.
    """

    kind: Literal["desktop"] = "desktop"
    instruction: str = Field(min_length=1)
    config: tuple[OSWorldStep, ...] = ()
    evaluator: OSWorldEvaluator
    image: str = Field(GUI_IMAGE, description="the desktop image (Xvfb, openbox, apps)")
    base_dir: str | None = Field(None, description="directory of the task file (for upload_file)")
    download_cache: str | None = Field(
        None, description="root of the cache `download` steps read (see `cached_download`)"
    )

    @model_validator(mode="after")
    def _no_root_for_the_agent(self) -> DesktopTask:
        ev = self.evaluator
        after_agent = [
            (f"postconfig step {i + 1}", s.parameters.get("command")) for i, s in enumerate(ev.postconfig)
        ]
        after_agent += [
            (f"getter {g.type}", g.params.get("command")) for g in (*ev.result, *ev.expected) if g is not None
        ]
        problem = agent_root_problem(self.id, self.instruction, ev.infeasible) or root_after_agent(
            after_agent
        )
        if problem:
            raise TaskNeedsRoot(problem)
        return self

    @model_validator(mode="after")
    def _uploads_exist(self) -> DesktopTask:
        root = self.download_cache or default_download_cache()
        for step in (*self.config, *self.evaluator.postconfig):
            if step.type == "upload_file":
                for f in step.files():
                    path = resolve_local(f["local_path"], self.base_dir)
                    if not path.is_file():
                        raise ValueError(f"upload_file: {f['local_path']!r} is not a file ({path})")
            if step.type == "download":
                for f in step.files():
                    if not isinstance(f, Mapping) or not f.get("url") or not f.get("path"):
                        raise ValueError(f"download: a file needs a url and a path, got {f}")
                    _require_cached(
                        f"download: {f['path']}", cached_download(root, self.id, f["url"], f["path"])
                    )
        for getter in (*self.evaluator.result, *self.evaluator.expected):
            if getter is not None and getter.type == "cloud_file":
                for _, dest in _cloud_files(getter):
                    _require_cached(f"cloud_file: {dest}", cached_cloud_file(root, self.id, dest))
        return self


def _cloud_files(getter: OSWorldGetter) -> list[tuple[str, str]]:
    try:
        return getter_files(getter.params)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(
            f"cloud_file: a getter needs `path` and `dest` (lists of one length with `multi`): {e}"
        ) from e


def _require_cached(what: str, cached: Path) -> None:
    """Refuse a task whose `download` step or `cloud_file` getter has no file in the cache."""
    if not cached.is_file():
        raise UnsupportedOSWorldFeature(
            f"{what} is not in the download cache ({cached}); the sandboxes have no network. "
            "Fetch the task's files once on a host with network (python -m "
            f"arborl.tasks.osworld.fetch TASK_FILES), or point {DOWNLOAD_CACHE_ENV} at OSWorld's "
            "own cache/ directory"
        )


def resolve_local(local_path: str, base_dir: str | None) -> Path:
    """An `upload_file` local path: absolute, or relative to the task file's directory."""
    path = Path(local_path)
    return path if path.is_absolute() or base_dir is None else Path(base_dir) / path
