"""OSWorld tasks that need root, checked at load time.

The desktop sandbox never gives the agent root: root in the sandbox could reach its own
evaluation (replace the programs the getters run, plant files that survive a reset), so the
agent's `sudo` only says that it cannot elevate. Two kinds of task are refused here:

- **Tasks whose agent must elevate** (create a user, install a package, set the time zone,
  make a directory in `/`): every agent would score 0, which teaches nothing. They are told
  apart by (1) OSWorld's own task ids, each read by hand (`AGENT_ROOT_TASKS`), and (2) for
  any other file, an instruction that tells the agent to use `sudo` or gives it the VM
  user's sudo password. An infeasible task is never refused: its answer is FAIL.
- **Root steps that would act on the agent's files after it has acted**: a `sudo` command in
  a `postconfig` step or a getter runs as root once the agent is done, so a path in the
  agent's home or in a world-writable directory there would let the agent choose what root
  runs or touches (a script it replaced, a symlink it planted).

`sudo` steps in `config` run before the agent acts, on a freshly reset sandbox: they are
fine (OSWorld's setups use them, e.g. `echo password | sudo -S mkdir ~/Desktop/x`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

#: OSWorld task ids whose solution needs the agent itself to be root, with the reason, from
#: each task's instruction and evaluator.
AGENT_ROOT_TASKS = {
    "43c2d64c-bae5-4b0a-9b1a-0a4e8f0aaa48": "it asks for the directory /test, and only root may create a "
    "directory in /",
    "5812b315-e7bd-4265-b51f-863c02174c28": "it asks for a new user (useradd, passwd), which only root may create",
    "b6781586-6346-41cd-935a-a6b1487918fc": "it asks to set the system time zone, which only root may change "
    "(and timedatectl needs systemd)",
    "94d95f96-9699-4208-98ba-3c3119edf9c2": "it asks to install Spotify system-wide (snap or apt), which "
    "needs root (and the network)",
}

_SUDO = re.compile(r"(^|[\s;&|(`])sudo(\s|$)")
_SUDO_WORD = re.compile(r"\bsudo\b", re.IGNORECASE)
# "my password is 'password'", "password: password": OSWorld's VM user's sudo password, given
# to an agent that is meant to type it.
_VM_PASSWORD = re.compile(r"\bpassword\b\W{0,6}(?:is\W{0,4})?password\b", re.IGNORECASE)
#: Where the agent can write (its home, under both names, and the world-writable directories).
_AGENT_PATHS = re.compile(r"~|\$\{?HOME\b|/home/|(^|[^\w/])/(tmp|var/tmp|dev/shm|run/lock)\b")


def uses_sudo(command: str | list[str]) -> bool:
    """Whether an OSWorld command calls `sudo` (it then runs as root)."""
    text = command if isinstance(command, str) else " ".join(str(w) for w in command)
    return bool(_SUDO.search(text))


def agent_root_reason(task_id: str, instruction: str) -> str | None:
    """Why the task's agent would have to be root, or None."""
    if task_id in AGENT_ROOT_TASKS:
        return AGENT_ROOT_TASKS[task_id]
    if _SUDO_WORD.search(instruction):
        return "its instruction tells the agent to use sudo"
    if _VM_PASSWORD.search(instruction):
        return "its instruction gives the agent the sudo password, to elevate with"
    return None


def root_after_agent_problem(where: str, command: Any) -> str | None:
    """Why a command that runs after the agent has acted must not run as root, or None."""
    if not isinstance(command, str | list) or not uses_sudo(command):
        return None
    text = command if isinstance(command, str) else " ".join(str(w) for w in command)
    m = _AGENT_PATHS.search(text)
    if m is None:
        return None
    return (
        f"{where}: the `sudo` command {text[:120]!r} runs as root after the agent has acted and names "
        f"{m.group(0).strip()!r}, a place the agent writes: root would act on what the agent left there"
    )


def agent_root_problem(task_id: str, instruction: str, infeasible: bool) -> str | None:
    """The refusal of a feasible task whose agent must be root, or None."""
    reason = None if infeasible else agent_root_reason(task_id, instruction)
    if reason is None:
        return None
    return (
        f"task {task_id!r} needs the agent to be root: {reason}. The desktop sandbox gives the agent no "
        "root (its `sudo` is refused, so that it cannot reach its own evaluation) and every agent would "
        "score 0, so the task is refused"
    )


def root_after_agent(commands: Iterable[tuple[str, Any]]) -> str | None:
    """The first problem of (where, command) pairs that run after the agent, or None."""
    return next((p for where, cmd in commands if (p := root_after_agent_problem(where, cmd))), None)
