"""verl's ``arborl:`` section, typed: what arborl's agent loop reads from verl's config.

`compose_verl_config` puts these defaults in Hydra's config store, so the composed section
has every key (override any with ``arborl.<key>=...``) and a default has one source; the
section is validated into `ArborlSection` before Ray starts (`run_verl`) and in each
agent-loop worker. Unknown keys are errors.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf
from pydantic import BaseModel, ConfigDict, Field

from arborl.agents.tree_rollout import TreeConfig
from arborl.sandboxes import PoolConfig


class ArborlSection(BaseModel):
    """The ``arborl:`` section of verl's config (trainer/verl/arborl_ppo.yaml)."""

    model_config = ConfigDict(extra="forbid")

    env_id: str = Field("arborl/Tool-v0", description="the env every sample runs in (gymnasium.make id)")
    env_kwargs: dict[str, Any] = Field(default_factory=dict, description="gymnasium.make's keyword arguments")
    task_key: str = Field(
        "task",
        description="the dataset column holding the task (a dict, or JSON text); else extra_info.<task_key>",
    )
    max_turns: int = Field(8, ge=1, description="turns per episode")
    max_new_tokens: int | None = Field(
        None, ge=1, description="tokens a turn may generate (None: the whole response_length)"
    )
    tree: TreeConfig | None = Field(
        None,
        description="the rollout.n samples of a prompt are the leaves of one rollout tree "
        "(arborl.agents.tree_rollout; `leaves` is set to rollout.n), e.g. {roots: 2, branches: 2, branch_at: both}",
    )
    credit_log: str | None = Field(
        None, description="a JSONL file: per step, each group's scores and advantage range"
    )
    pool: PoolConfig = Field(
        default_factory=lambda: PoolConfig(max_size=8),
        description="each agent-loop worker's SandboxPool (with sandbox=ray: its pool on each node)",
    )

    @classmethod
    def of(cls, config: Any) -> ArborlSection:
        """The validated section of verl's whole `config` (a DictConfig or a mapping)."""
        section = config.get("arborl") if config is not None else None
        if isinstance(section, DictConfig):
            section = OmegaConf.to_container(section, resolve=True)
        return cls.model_validate(section or {})


def section_defaults() -> dict[str, Any]:
    """`ArborlSection`'s defaults as plain data: the ``arborl`` node of the composed config."""
    return ArborlSection().model_dump(mode="json")
