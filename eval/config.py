"""`arborl eval`'s configuration: typed, one description per field, composed by Hydra.

`arborl eval suite=swe-mini agent=gold concurrency=8` composes `cli/conf/eval.yaml` with the
overrides and validates the result into `EvalConfig` (unknown keys are errors). The keys and
defaults that file composes are this model's, generated (cli/config.py), so they have one source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, ValidationError, model_validator

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


class RunSection(_Strict):
    dir: str | None = Field(None, description="run directory; None: runs/eval/<suite>-<agent>")
    resume: bool = Field(True, description="skip (instance, sample) pairs already finished in run.dir")


class EvalConfig(_Strict):
    """Everything `arborl eval` needs. Besides the fields here, each registered benchmark's own
    section (`arborl.envs.benchmarks.Benchmark.options`: `swe`, `bfcl`, a user's), validated by
    its model and reached as an attribute (`cfg.swe.images`); any other key is an error."""

    # the benchmarks' sections: extras, each replaced by its model in `_benchmark_sections`
    model_config = ConfigDict(extra="allow")

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
        description="grade stored outputs, no agent runs: a file or directory that the suite's "
        "benchmark reads (its hook's `predictions`: SWE-bench's predictions files, bfcl-eval's "
        "result files; docs/eval.md)",
    )
    tasks: list[str] | None = Field(None, description="only these task ids")
    limit: int | None = Field(None, ge=1, description="only the first N tasks")
    samples: int = Field(1, ge=1, description="episodes per instance (n of pass@k)")
    pass_k: list[int] = Field(default_factory=lambda: [1], description="k values reported (n is added)")
    concurrency: int = Field(4, ge=1, description="instances in flight at once")
    max_turns: int | None = Field(None, ge=1, description="turns per episode; None: the suite's")
    env_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="gymnasium.make kwargs over the suite's own, e.g. +env_kwargs.obs_type=image to show a "
        "vision-language model the screen on desktop-mini (docs/vision.md)",
    )
    instance_timeout_s: float = Field(
        900.0, gt=0, description="wall-clock limit of one attempt (episode + grading)"
    )
    retries: int = Field(2, ge=0, description="extra attempts after an infrastructure (sandbox) failure")
    model: ModelSection = Field(default_factory=ModelSection)
    run: RunSection = Field(default_factory=RunSection)
    report: bool = Field(True, description="write report.md / report.html at the end")
    screenshots: bool = Field(
        True,
        description="store the screenshot of every observation that carries one (desktop, web with "
        "pixels) as instances/<id>/sample-<k>/screens/turn-NNN.png, for `arborl view`",
    )

    @model_validator(mode="wrap")
    @classmethod
    def _benchmark_sections(cls, data: Any, handler: ModelWrapValidatorHandler[EvalConfig]) -> EvalConfig:
        """Validate each benchmark's section with its model (its defaults where not given) and
        refuse any other key, with pydantic's own errors at the key's place, as for a field."""
        if not isinstance(data, dict):
            return handler(data)
        from arborl.envs.benchmarks import benchmark_sections

        known = benchmark_sections()
        data = dict(data)
        given = {key: data.pop(key) for key in list(data) if key not in cls.model_fields}
        errors: list[Any] = []
        sections: dict[str, BaseModel] = {}
        for key, value in given.items():
            if key not in known:
                errors.append({"type": "extra_forbidden", "loc": (key,), "input": value})
        for key, model in known.items():
            value = given.get(key, {})
            try:
                sections[key] = value if isinstance(value, model) else model.model_validate(value)
            except ValidationError as e:
                errors += [
                    {"type": err["type"], "loc": (key, *err["loc"]), "input": err["input"]}
                    | ({"ctx": err["ctx"]} if "ctx" in err else {})
                    for err in e.errors()
                ]
        try:
            config = handler(data)
        except ValidationError as e:
            errors = [
                {"type": err["type"], "loc": err["loc"], "input": err["input"]}
                | ({"ctx": err["ctx"]} if "ctx" in err else {})
                for err in e.errors()
            ] + errors
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        config.__pydantic_extra__ = sections
        return config

    @classmethod
    def section_models(cls) -> dict[str, type[BaseModel]]:
        """The benchmarks' sections (key → model): the keys this config has beyond its fields."""
        from arborl.envs.benchmarks import benchmark_sections

        return benchmark_sections()

    def benchmark_options(self, key: str | None) -> BaseModel | None:
        """The validated section `key` (a hook's `options[0]`); None for None."""
        return None if key is None else (self.__pydantic_extra__ or {})[key]

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
