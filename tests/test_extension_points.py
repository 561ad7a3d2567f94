"""A new engine or sandbox backend is a folder plus one registry line (issue 51 §4): both are
registered here, from a test module, with one line each, and arborl picks them up where it
builds, configures or lists engines and backends: the trainer's run, `make_engine`, the
gateway's `--engine`, `arborl engines`; `make_backend`/`make_pool`, `sandbox=<name>` in the
Hydra config, `arborl sandbox ls/gc/backends` and the help."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict

from arborl.agents.engines import (
    ENGINES,
    EngineError,
    Generation,
    InferenceEngine,
    SamplingParams,
    TrainerPolicy,
    WeightsSource,
    make_engine,
    register_engine,
)
from arborl.cli.config import ConfigError, load_config, section
from arborl.cli.main import _parser, main
from arborl.sandboxes import (
    BACKENDS,
    PoolConfig,
    Sandbox,
    SandboxBackend,
    SandboxInfo,
    SandboxPool,
    SandboxSpec,
    make_backend,
    make_pool,
    register_backend,
)


# ---- an engine of our own ---------------------------------------------------------------------
class EchoEngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["echo"] = "echo"
    model: str
    loud: bool = False


class EchoEngine(InferenceEngine):
    """Generates nothing; remembers what it was built from."""

    kind = "echo"

    def __init__(self, config: EchoEngineConfig, policy: TrainerPolicy | None = None) -> None:
        self.config, self.policy, self.closed = config, policy, False

    @classmethod
    def for_trainer(cls, policy: TrainerPolicy, options: Mapping[str, Any]) -> EchoEngine:
        return cls(EchoEngineConfig(model=policy.weights, **options), policy)

    async def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        raise EngineError("the echo engine generates nothing")

    async def update_weights(self, weights: WeightsSource) -> None:
        return None

    async def close(self) -> None:
        self.closed = True


# ---- a sandbox backend of our own -------------------------------------------------------------
class ListingBackendConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["listing"] = "listing"
    label: str = "from-a-plugin"


class ListingBackend(SandboxBackend):
    """Holds one (pretend) sandbox, to be listed and reaped."""

    name = "listing"

    def __init__(self, config: ListingBackendConfig) -> None:
        self.config = config
        self.sandboxes = [f"{config.label}-1"]

    async def create(self, spec: SandboxSpec, pool_id: str = "") -> Sandbox:
        raise NotImplementedError

    async def destroy(self, sandbox: Sandbox) -> None: ...

    async def is_running(self, sandbox: Sandbox) -> bool:
        return False

    async def describe_death(self, sandbox: Sandbox) -> str:
        return "never lived"

    async def snapshot(self, sandbox: Sandbox) -> list[tuple[str, str]]:
        return []

    def list_sandboxes(self) -> list[SandboxInfo]:
        return [
            SandboxInfo(
                id=i,
                backend=self.name,
                status="running",
                image="none",
                owner_pid=None,
                owner_alive=False,
                created=time.time(),
            )
            for i in self.sandboxes
        ]

    def reap(self, all_sandboxes: bool = False, run: str | None = None) -> list[str]:
        gone, self.sandboxes = self.sandboxes, []
        return gone


@pytest.fixture
def registered():
    """The one registry line of each, as a plug-in module would have them (undone after)."""
    register_engine("echo", EchoEngine, EchoEngineConfig)
    register_backend("listing", ListingBackendConfig, ListingBackend)
    yield
    ENGINES.pop("echo")
    BACKENDS.pop("listing")


def test_the_registered_engine_is_built_by_make_engine_and_validated_by_its_model(registered):
    engine = make_engine({"type": "echo", "model": "m", "loud": True})
    assert isinstance(engine, EchoEngine) and engine.config.loud
    with pytest.raises(ValueError, match="quiet"):  # its own model validates it: unknown keys too
        make_engine({"type": "echo", "model": "m", "quiet": True})


def test_the_trainer_builds_its_engine_through_the_registry(registered, tiny_model, tmp_path):
    from arborl.trainer.local.config import TrainConfig
    from arborl.trainer.local.progress import Progress
    from arborl.trainer.local.run_context import RunContext

    cfg = TrainConfig.model_validate(
        {
            "model": {"path": str(tiny_model), "engine": "echo", "engine_options": {"loud": True}},
            "tasks": {"eval_size": 1},
            "run": {"dir": str(tmp_path / "run")},
        }
    )
    ctx = RunContext(cfg, Progress(enabled=False))
    ctx.open()
    try:
        engine = ctx.engine
        assert isinstance(engine, EchoEngine) and engine.config.loud
        assert engine.policy.weights == str(tiny_model) and engine.policy.module is ctx.model
        assert ctx.agent.engine is engine  # the run's agents generate with it
    finally:
        asyncio.run(ctx.close())
    assert engine.closed


@pytest.fixture
def wide(monkeypatch):
    """The CLI's tables on a wide console, so that no cell wraps."""
    from arborl.cli import engines_cmds, sandbox_cmds

    for module in (engines_cmds, sandbox_cmds):
        monkeypatch.setattr(module.console, "width", 400)


def test_the_cli_offers_and_lists_the_registered_engine(registered, wide, capsys):
    args = _parser().parse_args(["gateway", "--model", "m", "--engine", "echo"])
    assert args.engine == "echo"
    assert main(["engines"]) == 0
    out = capsys.readouterr().out
    assert "echo" in out and "EchoEngineConfig" in out and "loud" in out


def test_an_unregistered_engine_is_refused_naming_the_registered_ones():
    with pytest.raises(
        ValueError, match=r"unknown engine type 'echo'; registered: openai, transformers, vllm"
    ):
        make_engine({"type": "echo", "model": "m"})


def test_the_registered_backend_is_built_configured_and_pooled(registered):
    backend = make_backend({"type": "listing", "label": "x"})
    assert isinstance(backend, ListingBackend) and backend.config.label == "x"
    pool = make_pool({"type": "listing"}, PoolConfig(max_size=2))
    assert isinstance(pool, SandboxPool) and isinstance(pool.backend, ListingBackend)
    cfg = load_config(["sandbox=listing", "sandbox.label=y"])  # its defaults are a Hydra option
    assert section(cfg, "sandbox") == {"type": "listing", "label": "y"}
    with pytest.raises(
        ConfigError, match=r"unknown key 'sandbox\.nope'; the keys of sandbox are: type, label"
    ):
        load_config(["sandbox=listing", "+sandbox.nope=1"])


def test_the_cli_lists_the_registered_backend_and_its_sandboxes(registered, wide, capsys):
    assert main(["sandbox", "backends"]) == 0
    out = capsys.readouterr().out
    assert "listing" in out and "ListingBackendConfig" in out
    assert main(["sandbox", "ls", "sandbox=listing"]) == 0
    assert "from-a-plugi" in capsys.readouterr().out  # its sandbox (ids are cut to 12)
    assert main(["sandbox", "gc", "sandbox=listing"]) == 0
    assert "listing: removed 1 orphans" in capsys.readouterr().out
    assert "sandbox=docker|bwrap|auto|ray|listing" in _parser().format_help()
