"""OSWorld's command conventions in a desktop sandbox: how setup steps and getters run commands.

OSWorld's tasks are written for its Ubuntu VM, where a server running as user `user` (home
`/home/user`, sudo password `password`) executes them. Here:

- `shell: true` commands run under `/bin/sh -c` (dash on Debian), as OSWorld's server runs
  them with `subprocess.run(..., shell=True)`; `echo -e` then behaves as dash's.
- `python` as a program means the sandbox's `python3`.
- A command that calls `sudo` runs as root, with the desktop user's HOME / USER / LOGNAME and
  a `sudo` shim first on PATH (`SUDO_SHIM`, installed by the env). The shim accepts sudo's
  usual options (`-S` reads and drops the password line from stdin, `-u`, `-E`, `-H`, `-k`,
  `-p`) and runs the command when its caller is root; called by anyone else it fails with a
  message. The agent's own processes never get root (containers run with
  `no-new-privileges`), so tasks whose *agent* must `sudo` cannot be solved here; setup and
  evaluation steps that use it work.
- A `python -c "import pyautogui; ..."` setup command is not run in the sandbox: its calls
  are parsed as the agent's actions are and replayed with xdotool, their coordinates scaled
  from OSWorld's 1920x1080 screen to this one (`replay_pyautogui`); a Ctrl+Alt shortcut
  waits (up to 5 s) for the window it opens to take the focus.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from .actions import ActionError, parse_actions, to_commands

HOME = "/home/agent"
OSWORLD_SCREEN = (1920, 1080)
SHIM_DIR = "/opt/arborl/bin"
ROOT_PATH = f"{SHIM_DIR}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SUDO = re.compile(r"(^|[\s;&|(`])sudo(\s|$)")

SUDO_SHIM = r"""#!/bin/sh
# arborl's sudo for OSWorld's setup steps: the harness runs those as root. This never
# elevates: a caller that is not root is refused (containers run with no-new-privileges).
user=root
while [ $# -gt 0 ]; do
  case "$1" in
    -S|--stdin) IFS= read -r _password || true; shift ;;
    -u|--user) user="$2"; shift 2 ;;
    -p|--prompt) shift 2 ;;
    -E|-H|-k|-n|-i|--preserve-env|--set-home|--reset-timestamp|--non-interactive|--login) shift ;;
    --) shift; break ;;
    -*) echo "sudo (arborl shim): unsupported option $1" >&2; exit 1 ;;
    *) break ;;
  esac
done
if [ "$(id -u)" != 0 ]; then
  echo "sudo (arborl shim): cannot elevate here: the agent has no root in this sandbox" >&2
  exit 1
fi
[ $# -gt 0 ] || { echo "usage: sudo [-S] [-u user] command ..." >&2; exit 1; }
if [ "$user" != root ] && [ "$user" != 0 ]; then
  exec su -s /bin/sh "$user" -c 'exec "$0" "$@"' -- "$@"
fi
exec "$@"
"""


def vm_path(path: str) -> str:
    """A path as OSWorld's VM server takes it: relative to the user's home, `/home/user` → HOME."""
    if path == "/home/user" or path.startswith("/home/user/"):
        return HOME + path[len("/home/user") :]
    return path if path.startswith("/") else f"{HOME}/{path}"


def uses_sudo(command: str | list[str]) -> bool:
    text = command if isinstance(command, str) else " ".join(command)
    return bool(_SUDO.search(text))


def argv(command: str | list[str], shell: bool = False) -> list[str]:
    """OSWorld's command forms as an argv: a shell command under /bin/sh, else split words."""
    if isinstance(command, list):
        words = ["python3" if i == 0 and w == "python" else w for i, w in enumerate(command)]
        return ["/bin/sh", "-c", shlex.join(words)] if shell else words
    if shell:
        return ["/bin/sh", "-c", re.sub(r"^python(\s)", r"python3\1", command)]
    return argv(shlex.split(command))


def exec_options(command: str | list[str], display_env: dict[str, str]) -> dict[str, Any]:
    """`Sandbox.exec` keyword arguments for an OSWorld command (root with the shim for sudo)."""
    env = dict(display_env)
    options: dict[str, Any] = {"workdir": HOME, "env": env}
    if uses_sudo(command):
        env.update({"HOME": HOME, "USER": "agent", "LOGNAME": "agent", "PATH": ROOT_PATH})
        options["user"] = "root"
    return options


def pyautogui_code(command: str | list[str]) -> str | None:
    """The Python source of a `python -c "...pyautogui..."` command, else None."""
    words: list[str]
    if isinstance(command, list):
        words = list(command)
    else:
        try:
            words = shlex.split(command)
        except ValueError:
            return None
    if len(words) == 3 and words[0] in ("python", "python3") and words[1] == "-c" and "pyautogui" in words[2]:
        return words[2]
    return None


def replay_lines(code: str, width: int, height: int, max_wait_s: float = 10.0) -> list[list[str]]:
    """xdotool lines for each pyautogui call of `code` (OSWorld coordinates scaled to
    `width` x `height`). Raises ActionError for code the action parser does not accept."""
    actions = parse_actions(code.strip(), *OSWORLD_SCREEN)  # `a; b` is two statements to ast
    sx, sy = width / OSWORLD_SCREEN[0], height / OSWORLD_SCREEN[1]
    lines = []
    for a in actions:
        if a.special:
            continue
        args = dict(a.args)
        if args.get("x") is not None and args.get("y") is not None:
            args["x"] = min(width - 1, round(args["x"] * sx))
            args["y"] = min(height - 1, round(args["y"] * sy))
        cmds = to_commands(type(a)(a.name, args), max_wait_s)
        if a.name == "hotkey" and {"Control_L", "Alt_L"} <= set(args.get("keys") or ()):
            cmds = [_ACTIVE_BEFORE, *cmds, _WAIT_ACTIVE_CHANGE]
        lines.append(cmds)
    return lines


# A desktop shortcut (Ctrl+Alt+...: Ctrl+Alt+T opens a terminal) in setup code waits, up to 5 s,
# for the window it opens to take the focus: OSWorld's setups give it a fixed 0.5 s and then
# type into it, which a loaded container can miss (the typing went to the desktop, measured).
_ACTIVE_BEFORE = "_w=$(xdotool getactivewindow 2>/dev/null || true)"
_WAIT_ACTIVE_CHANGE = (
    "for _i in $(seq 100); do _v=$(xdotool getactivewindow 2>/dev/null || true); "
    '[ -n "$_v" ] && [ "$_v" != "$_w" ] && break; sleep 0.05; done'
)


__all__ = [
    "HOME",
    "OSWORLD_SCREEN",
    "ROOT_PATH",
    "SHIM_DIR",
    "SUDO_SHIM",
    "ActionError",
    "argv",
    "exec_options",
    "pyautogui_code",
    "replay_lines",
    "uses_sudo",
]
