"""`arborl eval`'s configuration: typed, one description per field, composed by Hydra.

`arborl eval suite=swe-mini agent=gold concurrency=8` composes `cli/conf/eval.yaml` with the
overrides and validates the result into `EvalConfig` (unknown keys are errors). The keys and
defaults that file composes are this model's, generated (cli/config.py), so they have one source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from arborl.agents.context import ContextMode
from arborl.tasks.user_suites import suite_slug


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
    context: ContextMode = Field(
        "truncate",
        description="past max_context_tokens: end the episode (truncate), drop the oldest turns "
        "(sliding_window) or have the model summarise (summarize), as the agent's `context`",
    )
    temperature: float = Field(0.0, ge=0, description="0: greedy")
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int | None = Field(
        0,
        ge=0,
        description="sampling seed of sample 0 (sample j: seed + j; each generation draws its own from it, the task and the turn)",
    )


class SWESection(_Strict):
    images: Literal["auto", "off"] = Field(
        "auto", description="auto: SWE tasks run on instance images when the backend is Docker"
    )
    repos_dir: list[str] = Field(
        default_factory=list,
        description="where repositories are: directories holding <owner>__<name>.bundle, a bare mirror "
        "<owner>__<name>.git, a checkout <owner>__<name>/.git (or the same under <owner>/<name>), or any "
        "bare repository or checkout whose remote URL names the repository; or .json mapping files "
        '{"owner/name": "path"} (arborl.tasks.swebench.repos)',
    )
    environments: str | None = Field(
        None, description="a JSON list of SWEEnvironment (per repo/version install, test command, log parser)"
    )
    split: str | None = Field(
        None, description="the split of a `datasets` DatasetDict directory given as suite"
    )


class BfclSection(_Strict):
    """How bfcl-eval result files given as `predictions` are read (arborl.tasks.bfcl.result_files)."""

    decoder: Literal["auto", "fc", "prompting", "hermes"] = Field(
        "auto",
        description="the form the model's handler stored replies in: fc (lists of calls, function-"
        "calling APIs), prompting (Python call-list text), hermes (<tool_call> text); auto: "
        "from the results (arborl.tasks.bfcl.decoding)",
    )
    underscore_to_dot: bool | None = Field(
        None,
        description="whether the model saw dotted function names with '_' for '.' (bfcl-eval's "
        "model table says so per model); None: detected from the calls",
    )


class RunSection(_Strict):
    dir: str | None = Field(None, description="run directory; None: runs/eval/<suite>-<agent>")
    resume: bool = Field(True, description="skip (instance, sample) pairs already finished in run.dir")


class EvalConfig(_Strict):
    """Everything `arborl eval` needs."""

    suite: str = Field(
        "tool-mini",
        description="a registered suite (`arborl eval --list`), or a path: SWE-bench instances "
        "(.json/.jsonl/a datasets directory) or OSWorld task JSONs (a file or a directory)",
    )
    agent: Literal["gold", "empty", "model", "predictions"] = Field(
        "gold",
        description="gold / empty: the suite's scripted policies; model: an LLM agent; predictions: "
        "grade `predictions` (set by giving it)",
    )
    predictions: str | None = Field(
        None,
        description="grade stored outputs, no agent runs: a SWE-bench predictions file (instance_id, "
        "model_patch) for a SWE-bench suite; bfcl-eval result files (a BFCL_v4_<category>_result"
        ".json or a directory of them) for a BFCL suite",
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
    bfcl: BfclSection = Field(default_factory=BfclSection)
    run: RunSection = Field(default_factory=RunSection)
    report: bool = Field(True, description="write report.md / report.html at the end")
    screenshots: bool = Field(
        True,
        description="store the screenshot of every observation that carries one (desktop, web with "
        "pixels) as instances/<id>/sample-<k>/screens/turn-NNN.png, for `arborl view`",
    )

    @model_validator(mode="after")
    def _predictions_agent(self) -> EvalConfig:
        if self.predictions is not None:
            self.agent = "predictions"
        elif self.agent == "predictions":
            raise ValueError("agent=predictions needs predictions=FILE")
        return self

    def run_dir(self) -> Path:
        if self.run.dir:
            return Path(self.run.dir)
        return Path("runs") / "eval" / f"{suite_slug(self.suite)}-{self.agent}"
