"""`arborl eval`'s configuration: typed, one description per field, composed by Hydra.

`arborl eval suite=swe-mini agent=gold concurrency=8` composes `cli/conf/eval.yaml` with the
overrides and validates the result into `EvalConfig` (unknown keys are errors).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSection(_Strict):
    path: str | None = Field(None, description="a Hugging Face model directory; None: the tiny model")
    engine: dict[str, Any] = Field(
        default_factory=lambda: {"type": "transformers"},
        description="engine config (arborl.agents.engines): type transformers | vllm | openai, ...; "
        "`model` defaults to `path`",
    )
    max_new_tokens: int = Field(256, ge=1, description="tokens per reply")
    max_context_tokens: int = Field(4096, ge=2, description="prompt + every turn")
    temperature: float = Field(0.0, ge=0, description="0: greedy")
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int | None = Field(0, ge=0, description="sampling seed of sample 0 (sample j: seed + j)")


class SWESection(_Strict):
    images: Literal["auto", "off"] = Field(
        "auto", description="auto: SWE tasks run on instance images when the backend is Docker"
    )
    repos_dir: list[str] = Field(
        default_factory=list, description="where repository bundles/checkouts for instance images are"
    )


class RunSection(_Strict):
    dir: str | None = Field(None, description="run directory; None: runs/eval/<suite>-<agent>")
    resume: bool = Field(True, description="skip (instance, sample) pairs already finished in run.dir")


class EvalConfig(_Strict):
    """Everything `arborl eval` needs."""

    suite: str = Field("tool-mini", description="a registered suite (`arborl eval --list`)")
    agent: Literal["gold", "empty", "model"] = Field(
        "gold", description="gold / empty: the suite's scripted policies; model: an LLM agent"
    )
    tasks: list[str] | None = Field(None, description="only these task ids")
    limit: int | None = Field(None, ge=1, description="only the first N tasks")
    samples: int = Field(1, ge=1, description="episodes per instance (n of pass@k)")
    pass_k: list[int] = Field(default_factory=lambda: [1], description="k values reported (n is added)")
    concurrency: int = Field(4, ge=1, description="instances in flight at once")
    max_turns: int | None = Field(None, ge=1, description="turns per episode; None: the suite's")
    instance_timeout_s: float = Field(
        900.0, gt=0, description="wall-clock limit of one attempt (episode + grading)"
    )
    retries: int = Field(2, ge=0, description="extra attempts after an infrastructure (sandbox) failure")
    model: ModelSection = Field(default_factory=ModelSection)
    swe: SWESection = Field(default_factory=SWESection)
    run: RunSection = Field(default_factory=RunSection)
    report: bool = Field(True, description="write report.md / report.html at the end")

    def run_dir(self) -> Path:
        return Path(self.run.dir) if self.run.dir else Path("runs") / "eval" / f"{self.suite}-{self.agent}"
