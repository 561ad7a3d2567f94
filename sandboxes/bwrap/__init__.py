"""The bubblewrap backend: sandboxes as bubblewrap namespaces, where no container engine runs.

- `backend.py`: `BwrapBackend` and its config (`sandbox=bwrap`);
- `uids.py`: the agent uid each sandbox takes, allocated across processes;
- `cgroups.py`: each sandbox's memory, pids and CPU cgroup;
- `seccomp.py`: the system-call filter the agent's commands run under.
"""

from .backend import BwrapBackend, BwrapBackendConfig

__all__ = ["BwrapBackend", "BwrapBackendConfig"]
