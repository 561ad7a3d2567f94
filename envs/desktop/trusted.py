"""How the harness runs its own readers in a desktop sandbox, out of the agent's reach.

The agent runs code as the desktop user, and keeps running it while the episode is
evaluated. What the harness runs there to read the desktop's state must not be the agent's
code, nor be open to it:

- **Harness Python** (`run_python`: the accessibility tree, directory listings, file tests)
  runs as the desktop user (AT-SPI's apps answer only their own user) but from
  `HARNESS_PYTHON`, a copy of the image's interpreter that root made execute-only. The
  kernel makes a process that runs an unreadable program non-dumpable, so the agent can
  neither ptrace it nor read or write its memory through /proc; `-I` keeps the agent's
  files out of it (no user site, no PYTHON* variables, no working directory on sys.path),
  and it runs in `/`.
- **Root's reads** (`run_root`: the window list) run under `env -i` with a fixed PATH,
  root's HOME, in `/`.
- **Bounded**: each read has a size; more is `OutputTooLarge` (see `bounds`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from arborl.sandboxes import ExecResult

from ..sandboxed import TimedSandbox
from .bounds import OutputTooLarge
from .commands import SHIM_DIR, root_argv

HARNESS_PYTHON = f"{SHIM_DIR}/python3-harness"
#: Root's sandbox setup step that makes it (an unreadable, executable copy of python3).
INSTALL_HARNESS_PYTHON = f'install -m 0711 "$(readlink -f /usr/bin/python3)" {HARNESS_PYTHON}'


def _bounded(r: ExecResult, what: str, limit: int) -> ExecResult:
    if r.truncated:
        raise OutputTooLarge(f"{what} is larger than {limit} bytes, the most the harness reads")
    return r


async def run_python(
    sb: TimedSandbox,
    code: str,
    args: Sequence[str] = (),
    *,
    what: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    max_output: int = 8 << 20,
) -> ExecResult:
    """`code` run by the harness's Python as the desktop user; OutputTooLarge past `max_output`."""
    r = await sb.exec(
        [HARNESS_PYTHON, "-I", "-c", code, *args],
        workdir="/",
        env=dict(env or {}),
        timeout=timeout,
        max_output=max_output,
    )
    return _bounded(r, what, max_output)


async def run_root(
    sb: TimedSandbox,
    argv: list[str],
    *,
    what: str,
    display: str | None = None,
    timeout: float = 60.0,
    max_output: int = 1 << 20,
) -> ExecResult:
    """`argv` run as root in a clean environment in `/`; OutputTooLarge past `max_output`."""
    r = await sb.exec(
        root_argv(argv, display), user="root", workdir="/", timeout=timeout, max_output=max_output
    )
    return _bounded(r, what, max_output)
