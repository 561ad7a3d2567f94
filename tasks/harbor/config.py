"""`task.toml`, Harbor's task configuration, as a pydantic model that refuses what it does not know.

    config = TaskConfig.from_toml(text)          # raises TaskConfigError naming each bad key
    config.verifier.timeout_sec, config.agent.timeout_sec, config.environment.build_timeout_sec

The fields are Harbor's own (its `harbor.models.task.config`: `[metadata]` free-form,
`[verifier]`, `[agent]`, `[environment]`, `[solution]`, `version` / `schema_version`, the
`[task]` package section), so a real Harbor or Terminal-Bench 2 task loads. Unlike Harbor,
every section forbids keys it does not define: a misspelt `timout_sec` is an error naming the
file and the key, not a default that silently applies. `[metadata]` stays free-form, as in
Harbor (authors keep their own fields there).

What arborl cannot honour is refused with its reason when the task loads (a GPU, a TPU, a
Windows container, MCP servers, a network for the agent is simply not given: the sandbox has
none, see `network_note`), never ignored in a way that changes the score.
"""

from __future__ import annotations

import re
import tomllib
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class TaskConfigError(ValueError):
    """`task.toml` is not valid TOML or not a valid Harbor task configuration."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Author(_Section):
    name: str
    email: str | None = None


class PackageInfo(_Section):
    """`[task]`: the task as a package in Harbor's registry (`org/name`)."""

    name: str
    version: str | None = None
    description: str = ""
    authors: list[Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


class NetworkMode(StrEnum):
    PUBLIC = "public"
    NO_NETWORK = "no-network"
    ALLOWLIST = "allowlist"


class VerifierConfig(_Section):
    timeout_sec: float = Field(600.0, gt=0, description="time limit of tests/test.sh")
    env: dict[str, str] = Field(default_factory=dict, description="environment of tests/test.sh")
    user: str | int | None = Field(None, description="Harbor: who runs the tests (arborl: root, see grading)")
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None
    environment_mode: str | None = Field(None, description="Harbor: 'shared' (the only one arborl runs)")


class SolutionConfig(_Section):
    env: dict[str, str] = Field(default_factory=dict, description="environment of solution/solve.sh")


class AgentConfig(_Section):
    timeout_sec: float | None = Field(None, gt=0, description="the agent's time limit (wall clock)")
    user: str | int | None = Field(
        None, description="Harbor: who runs the agent (arborl: its unprivileged user)"
    )
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None


class HealthcheckConfig(_Section):
    command: str
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG])\s*$", re.I)


def size_mb(text: str) -> int:
    """Harbor's deprecated `memory = "2G"` / `storage = "512M"` sizes, in MB."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a size like '2G', '512M' or '1024K'")
    value, unit = float(m.group(1)), m.group(2).upper()
    return int(value * {"G": 1024, "M": 1, "K": 1 / 1024}[unit])


class EnvironmentConfig(_Section):
    build_timeout_sec: float = Field(600.0, gt=0, description="time limit of the image build")
    docker_image: str | None = Field(None, description="a prebuilt image instead of environment/Dockerfile")
    os: str = "linux"
    cpus: int | float | None = Field(None, gt=0)
    memory_mb: int | None = Field(None, gt=0)
    storage_mb: int | None = Field(None, gt=0)
    gpus: int | None = Field(None, ge=0)
    gpu_types: list[str] | None = None
    allow_internet: bool | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, description="environment of the agent's commands")
    skills_dir: str | None = None
    healthcheck: HealthcheckConfig | None = None
    workdir: str | None = Field(None, description="overrides the image's WORKDIR")
    # Harbor's deprecated spellings of memory_mb / storage_mb.
    memory: str | None = None
    storage: str | None = None

    @model_validator(mode="after")
    def _sizes(self) -> EnvironmentConfig:
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            value = getattr(self, old)
            if value is None:
                continue
            mb = size_mb(value)
            if getattr(self, new) not in (None, mb):
                raise ValueError(f"{old}={value!r} ({mb} MB) contradicts {new}={getattr(self, new)}")
            setattr(self, new, mb)
        return self

    @field_validator("workdir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"workdir must be an absolute path, not {value!r}")
        return value


class TaskConfig(_Section):
    """A whole `task.toml`."""

    schema_version: str = "1.0"
    task: PackageInfo | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    source: str | None = None
    artifacts: list[Any] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _version(cls, data: Any) -> Any:
        # Harbor renamed `version` to `schema_version`; both spellings are in use.
        if isinstance(data, dict) and "version" in data:
            data = dict(data)
            if "schema_version" in data:
                raise ValueError("give one of version and schema_version, not both")
            data["schema_version"] = data.pop("version")
        return data

    @classmethod
    def from_toml(cls, text: str) -> TaskConfig:
        """Parse and validate; TaskConfigError says which key is wrong and why."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise TaskConfigError(f"not valid TOML: {e}") from None
        try:
            config = cls.model_validate(data)
        except ValidationError as e:
            raise TaskConfigError(describe(e)) from None
        problems = config.unsupported()
        if problems:
            raise TaskConfigError("; ".join(problems))
        return config

    def unsupported(self) -> list[str]:
        """What this task asks for that arborl's sandboxes cannot give (each with its key)."""
        env = self.environment
        out = []
        if env.os.lower() != "linux":
            out.append(f"[environment] os = {env.os!r}: arborl runs Linux containers only")
        if env.gpus:
            out.append(f"[environment] gpus = {env.gpus}: arborl's sandboxes have no GPU")
        if env.mcp_servers:
            out.append("[environment] mcp_servers: give MCP servers to the env instead (mcp_servers=)")
        if self.verifier.environment_mode not in (None, "shared"):
            out.append(
                f"[verifier] environment_mode = {self.verifier.environment_mode!r}: arborl runs the "
                "tests in the agent's container, after every agent process is gone ('shared')"
            )
        return out

    def network_note(self) -> str:
        """What the agent gets of the network the task asks for: none (said, not refused:
        Harbor's default is a public network, and most tasks never use it)."""
        asked = self.environment.network_mode or (
            NetworkMode.NO_NETWORK if self.environment.allow_internet is False else NetworkMode.PUBLIC
        )
        if asked == NetworkMode.NO_NETWORK:
            return ""
        return f"the task allows network ({asked.value}); arborl's sandboxes have none"


def describe(e: ValidationError) -> str:
    """Pydantic's errors as `[section] key: what is wrong (got ...)`, one per problem."""
    parts = []
    for err in e.errors():
        loc = [str(x) for x in err["loc"]]
        where = f"[{'.'.join(loc[:-1])}] {loc[-1]}" if len(loc) > 1 else (loc[0] if loc else "task.toml")
        if err["type"] == "extra_forbidden":
            parts.append(f"{where}: unknown key")
        else:
            got = err.get("input")
            shown = "" if isinstance(got, dict) else f" (got {got!r})"
            parts.append(f"{where}: {err['msg']}{shown}")
    return "; ".join(parts)
