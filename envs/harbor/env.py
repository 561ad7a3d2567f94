"""`arborl/Harbor-v0`: a Harbor / Terminal-Bench task folder as a terminal-agent env.

The agent gets the task's `instruction.md` and works in a sandbox of the task's image (its
Dockerfile mapped onto the offline base, built on first use: `images.py`), in the image's
WORKDIR, which it owns, as the sandbox's unprivileged user, with the code env's tools: `bash`,
`str_replace_editor`, `submit`. At `submit`, when a turn budget ends the episode, or when the
task's `[agent] timeout_sec` has passed, the task's tests grade the sandbox as the agent left
it (`grading.py`: every agent process killed first, tests staged by root, the reward read by
the host) and the reward is the number test.sh wrote. The sandbox is destroyed afterwards,
never reset for another episode: the tests ran as root, and so did whatever of the agent's
they started.

Without a built image in the task (`arborl eval` builds them first: the hook in
`benchmark.py`), the env builds it at reset; that needs the Docker backend.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

from arborl.sandboxes import DockerBackend, Limits, SandboxSpec
from arborl.tasks.harbor import HarborTask, HarborTaskError, load_task

from ..base import Step
from ..benchmarks import InfraError
from ..code.tools import workspace_tools
from ..tool_calling_env import ToolCallingEnv
from ..toolbox import ToolBox, ToolUnavailable
from .grading import TestRun, run_tests
from .images import HarborImageError, TaskImage, build_task_image

SYSTEM_PROMPT = (
    "You are an expert at the Linux command line, working in a sandbox with no network. Use the "
    "tools to inspect the system, run commands and edit files until the task is done, then call "
    "`submit`. Anything you leave running is stopped before the checks run."
)
DEFAULT_TASK_DIR = Path(__file__).parent / "default_task"
# Hash of the files under the working directory (paths and contents), caches left out.
_TREE_HASH = (
    r"find . -xdev \( -name __pycache__ -o -name .pytest_cache \) -prune -o -type f -print0 2>/dev/null "
    "| sort -z | xargs -0 -r sha256sum -- 2>/dev/null | sha256sum"
)
_IMAGES: dict[tuple[str, str], TaskImage] = {}  # (task folder, Docker engine) -> built image


class GradingFailed(ToolUnavailable):
    """The task's tests could not be run (the task's or the infrastructure's fault, never the
    agent's): the episode ends as an env error."""


class HarborEnv(ToolCallingEnv):
    """A Harbor task in a sandbox of its own image, graded by its tests (see the module doc)."""

    task_type: ClassVar[type[HarborTask]] = HarborTask
    default_task: ClassVar[HarborTask] = load_task(DEFAULT_TASK_DIR, "arborl/hello-harbor")

    def __init__(
        self,
        *,
        system_prompt: str = SYSTEM_PROMPT,
        command_timeout_s: float = 60.0,
        max_command_timeout_s: float = 600.0,
        max_output_bytes: int = 16 * 1024,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            system_prompt: the first message of every episode.
            command_timeout_s: default time limit of a `bash` call.
            max_command_timeout_s: the most a `bash` call may ask for (and never past the
                task's `[agent] timeout_sec`).
            max_output_bytes: head+tail kept of each output stream of a command.
            **kwargs: see `ToolCallingEnv` (parser, ...) and `SandboxEnv` (pool, backend, ...).
        """
        super().__init__(**kwargs)
        self.system_prompt = system_prompt
        self.command_timeout_s = command_timeout_s
        self._max_command_timeout_s = max_command_timeout_s
        self.max_output_bytes = max_output_bytes
        self._deadline: float | None = None
        self._graded_here = False  # the tests ran in the leased sandbox: it is not reused

    # ---- the sandbox -----------------------------------------------------------------------
    @property
    def max_command_timeout_s(self) -> float:
        """The configured limit, cut to what is left of the agent's time."""
        if self._deadline is None:
            return self._max_command_timeout_s
        return max(1.0, min(self._max_command_timeout_s, self._deadline - time.monotonic()))

    def image(self, task: HarborTask) -> TaskImage:
        """The task's image (built at reset when the task carries none)."""
        if task.image:  # built by the evaluation's hook (on every node), its ENV carried along
            return TaskImage(task.image, dict(task.image_env))
        key = (task.path, self._engine_key())
        if key not in _IMAGES:
            raise HarborImageError(f"task {task.id}: its image is not built (reset builds it)")
        return _IMAGES[key]

    def sandbox_spec(self, task: HarborTask) -> SandboxSpec:
        built = self.image(task)
        env = {k: v for k, v in built.env.items() if k not in ("HOME",)}
        if "PATH" in env:  # an image's `ENV PATH=/x:$PATH` over a base that set none
            env["PATH"] = _with_base_path(env["PATH"])
        limits = Limits(
            **({"cpus": float(task.cpus)} if task.cpus else {}),
            **({"memory_mb": int(task.memory_mb)} if task.memory_mb else {}),
        )
        return SandboxSpec(
            image=built.tag,
            workdir=task.workdir,
            env={**env, **task.agent_env},
            limits=limits,
            setup=(f"chown -R agent: {task.workdir}",),
            reset_paths=(task.workdir, "/home/agent", "/tmp"),
        )

    def _engine_key(self) -> str:
        backend = getattr(self.pool, "backend", None)
        return str(getattr(getattr(backend, "client", None), "api", ""))

    async def _before_reset(self, task: HarborTask) -> None:
        if task.error:
            raise HarborTaskError(task.error)
        if task.image_error:
            raise HarborImageError(task.image_error)
        await self.prepare_image(task)
        await super()._before_reset(task)

    async def prepare_image(self, task: HarborTask) -> None:
        """Build `task`'s image on this env's Docker engine unless it is built (blocking work
        in a thread); `sandbox_spec(task)` needs it."""
        import asyncio

        if task.image:
            return
        key = (task.path, self._engine_key())
        if key in _IMAGES:
            return
        if hasattr(self.pool, "on_each_node"):  # a Ray pool: built on every node's engine
            from .benchmark import images_here

            per_node = await self.pool.on_each_node(images_here, [task])
            built = {(t.image, t.image_error) for [t] in per_node.values()}
            if len(built) > 1:
                raise InfraError(f"task {task.id}: the sandbox nodes built different images: {sorted(built)}")
            [t] = next(iter(per_node.values()))
            if t.image_error or not t.image:
                raise HarborImageError(
                    t.image_error or f"task {task.id}: the nodes could not build its image"
                )
            _IMAGES[key] = TaskImage(t.image, dict(t.image_env))
            return
        backend = self.pool.backend
        if not isinstance(backend, DockerBackend):
            raise InfraError(
                f"task {task.id}: Harbor tasks run in images built from their Dockerfile, which needs "
                f"the docker sandbox backend (this pool's is {getattr(backend, 'name', backend)!r})",
                permanent=True,
            )
        _IMAGES[key] = await asyncio.to_thread(build_task_image, backend.client, task)

    # ---- the episode -----------------------------------------------------------------------
    async def on_reset(self, task: HarborTask) -> list[dict[str, str]]:
        self.toolbox = ToolBox(workspace_tools(self, where="the task's environment"))
        self._graded_here = False
        self._deadline = time.monotonic() + task.agent_timeout_s if task.agent_timeout_s else None
        prompt = f"{task.instruction}\n\nYou are in {task.workdir}. When the task is done, call `submit`."
        return [self.system_message(self.system_prompt), {"role": "user", "content": prompt}]

    async def on_step(self, action: str) -> Step:
        if self._deadline is not None and time.monotonic() > self._deadline:
            reward, info = await self.verify()
            why = f"The time limit of this task ({self.task.agent_timeout_s:g} s) has passed; your work was graded as it is."
            return Step(why, reward=reward, truncated=True, info={**info, "truncated_by": "agent_timeout"})
        return await super().on_step(action)

    async def on_finish(self) -> tuple[float, dict[str, Any]]:
        """A budget ended the episode: grade the sandbox as it is."""
        return await self.verify()

    async def verify(self) -> tuple[float, dict[str, Any]]:
        """Run the task's tests on the sandbox as the agent left it (`grading.py`).

        Grading that cannot be done (tests that cannot be staged, an image whose system
        directories others may write) ends the episode as an env error, never a tool error
        the agent reads and goes on from, nor a 0 it is scored on."""
        task: HarborTask = self.task
        self._graded_here = True
        raw = self.sandbox.raw
        try:
            run: TestRun = await run_tests(self.sandbox, task, self.image(task).env, raw.kill_processes)
        except (RuntimeError, HarborTaskError) as e:
            raise GradingFailed(f"task {task.id}: the tests could not run: {e}") from e
        return run.reward, {"verifier": run.info()}

    def _end_episode(self, broken: bool = False) -> None:
        graded, self._graded_here = self._graded_here, False
        self._deadline = None
        super()._end_episode(broken=broken or graded)

    async def state_hash(self) -> str:
        if self._proxy is None:
            return ""
        r = await self.sandbox.exec(_TREE_HASH, timeout=60)
        if r.exit_code != 0 or len(r.stdout) < 16:
            raise RuntimeError(
                f"the working tree's hash failed (exit {r.exit_code}): {r.stderr.strip()[-300:]}"
            )
        return r.stdout[:16]


_BASE_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _with_base_path(path: str) -> str:
    return ":".join(dict.fromkeys([p for p in path.split(":") if p] + list(_BASE_PATH)))
