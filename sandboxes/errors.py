"""Typed sandbox errors. Each message says what happened and what to do next."""

from __future__ import annotations

from typing import Literal

#: Who made a sandbox fail: the agent (its commands exhausted or killed it: a failure of the
#: episode, never retried) or not (the engine, the host, someone else: retried elsewhere).
Fault = Literal["agent", "infra"]


class SandboxError(Exception):
    """Base class of every error the sandbox layer raises."""

    fault: Fault = "infra"


class SandboxUnavailable(SandboxError):
    """The backend cannot run on this machine (no Docker engine, no bubblewrap, no image)."""


class SandboxStartError(SandboxError):
    """A sandbox was asked for but did not come up."""


class SandboxCrashed(SandboxError):
    """The sandbox died (container exited or was killed, bwrap process gone) mid-operation.

    The pool replaces crashed sandboxes; callers holding one should end the episode.
    `fault` is the backend's reading of the death: "agent" when the sandbox's own limits
    killed it (its memory cgroup OOM-killed it), "infra" when it was stopped or removed
    from outside or the engine went away.
    """

    def __init__(self, sandbox_id: str, reason: str, fault: Fault = "infra") -> None:
        super().__init__(f"sandbox {sandbox_id} crashed: {reason}")
        self.sandbox_id = sandbox_id
        self.reason = reason
        self.fault = fault

    def __reduce__(self) -> tuple[type[SandboxCrashed], tuple[str, str, Fault]]:
        # Pickled across processes (a node's pool actor to the harness) with its fault intact.
        return (type(self), (self.sandbox_id, self.reason, self.fault))


class SandboxUnresponsive(SandboxError):
    """The sandbox is alive but did not answer in time (its server is wedged).

    The server answers within seconds of any command's own deadline unless the processes
    beside it starve it (of memory, pids or CPU), and only the agent runs processes there.
    """

    fault: Fault = "agent"


class SandboxOpError(SandboxError):
    """An operation failed inside the sandbox (bad path, file too large, ...)."""


class SandboxFileNotFound(SandboxOpError, FileNotFoundError):
    """The path asked for does not exist in the sandbox."""


class PoolTimeout(SandboxError, TimeoutError):
    """No sandbox became free within the acquire timeout: raise `max_size` or the timeout."""


class PoolClosed(SandboxError):
    """The pool was closed; create a new one."""


class UnknownBackend(SandboxError, ValueError):
    """A config names a sandbox backend that is not registered (`arborl.sandboxes.factory`)."""


class ImageBuildError(SandboxError):
    """Building a sandbox image failed; the message holds the tail of the build log."""
