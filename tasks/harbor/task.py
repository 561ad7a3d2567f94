"""`HarborTask`: one Harbor / Terminal-Bench task folder, as `arborl/Harbor-v0` runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from ..task_types import Task

#: Where Harbor puts things in the task's container (its `EnvironmentPaths`).
TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"
LOGS_DIR = "/logs"
VERIFIER_LOGS = "/logs/verifier"
REWARD_TXT = "/logs/verifier/reward.txt"
REWARD_JSON = "/logs/verifier/reward.json"


class HarborTask(Task):
    """A task folder: `instruction.md` is the prompt, `environment/Dockerfile` the sandbox's
    image (mapped onto the offline base), `tests/test.sh` the verifier that writes the reward,
    `solution/solve.sh` the gold run.

    A folder that cannot be used still becomes a task, carrying `error` (bad input: which
    file, what is wrong) or `image_error` (what cannot be built offline: which line, why), so
    that an evaluation reports it under its own id and runs the others."""

    kind: Literal["harbor"] = "harbor"
    path: str = Field(description="the task folder on the host")
    instruction: str = Field("", description="instruction.md: what the agent is asked to do")
    workdir: str = Field("/app", description="where the agent works (the image's WORKDIR)")
    family: str = Field("debian", description="the offline base the image starts from: debian or python")
    agent_timeout_s: float | None = Field(
        None, description="[agent] timeout_sec: the agent's wall-clock limit"
    )
    verifier_timeout_s: float = Field(600.0, gt=0, description="[verifier] timeout_sec")
    build_timeout_s: float = Field(600.0, gt=0, description="[environment] build_timeout_sec")
    verifier_env: dict[str, str] = Field(default_factory=dict, description="[verifier] env, resolved")
    solution_env: dict[str, str] = Field(default_factory=dict, description="[solution] env, resolved")
    agent_env: dict[str, str] = Field(default_factory=dict, description="[environment] env, resolved")
    cpus: float | None = Field(None, description="[environment] cpus")
    memory_mb: int | None = Field(None, description="[environment] memory_mb")
    has_solution: bool = Field(False, description="solution/solve.sh exists")
    image: str = Field("", description="the built image's tag ('' until it is built)")
    image_env: dict[str, str] = Field(
        default_factory=dict,
        description="the ENV the built image carries (its Dockerfile's ENV over the base's)",
    )
    error: str = Field("", description="why the folder cannot be used as a task (bad input), naming the file")
    image_error: str = Field("", description="why its image cannot be built offline, naming the line")

    @property
    def folder(self) -> Path:
        return Path(self.path)

    @property
    def usable(self) -> bool:
        """Whether an episode can run at all (a training stream leaves the others out)."""
        return not self.error and not self.image_error
