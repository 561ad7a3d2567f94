"""OSWorld's command conventions in a desktop sandbox: how setup steps and getters run commands.

OSWorld's tasks are written for its Ubuntu VM, where a server running as user `user` (home
`/home/user`, sudo password `password`) executes them. Here:

- `shell: true` commands run under `/bin/sh -c` (dash on Debian), as OSWorld's server runs
  them with `subprocess.run(..., shell=True)`; `echo -e` then behaves as dash's.
- `python` as a program means the sandbox's `python3`. Python started this way, as the
  desktop user, never loads code the agent planted: no user site (`PYTHONNOUSERSITE`) and
  neither the working directory nor a script's own directory on `sys.path` (`PYTHONSAFEPATH`;
  a task script that imports a module beside it would need `PYTHONPATH`).
- A command that calls `sudo` runs as root, and nothing of the agent reaches it: `env -i`
  with a fixed PATH (the `sudo` shim first), working directory `/`, and no HOME in its
  environment. Only its outer shell knows HOME, as the desktop user's (a shell variable, not
  exported), so that `sudo mkdir ~/Desktop/x` means the user's Desktop, as the user's own
  shell expands it in OSWorld; the programs it starts find root's home (`/root`), and what
  `sudo` starts gets `HOME=/root` and a clean environment again (`SUDO_SHIM`).
- The shim (`/opt/arborl-desktop/bin/sudo`, written by root at sandbox setup, first on the agent's
  PATH too) accepts sudo's usual options (`-S` reads and drops the password line from stdin,
  `-u`, `-E`, `-H`, `-k`, `-p`) and runs the command when its caller is root. Called by the
  agent it says that the agent has no root here: root in the sandbox could reach its own
  evaluation, so tasks whose agent must elevate are refused at load
  (`arborl.tasks.osworld.root`); setup steps that use `sudo` work.
- A `python -c "import pyautogui; ..."` setup command is not run in the sandbox: its calls
  are parsed as the agent's actions are and replayed with xdotool, their coordinates scaled
  from OSWorld's 1920x1080 screen to this one (`replay_pyautogui`); a Ctrl+Alt shortcut
  waits (up to 5 s) for the window it opens to take the focus.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from arborl.tasks.osworld.root import uses_sudo

from .actions import ActionError, parse_actions, to_commands

HOME = "/home/agent"
OSWORLD_SCREEN = (1920, 1080)
# Not /opt/arborl: that is the sandbox server's, and the bubblewrap backend makes it root-only.
SHIM_DIR = "/opt/arborl-desktop/bin"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: PATH of root's commands and of the agent's (`DesktopEnv`'s sandbox spec): the shim first.
ROOT_PATH = f"{SHIM_DIR}:{SYSTEM_PATH}"
AGENT_PATH = f"{SHIM_DIR}:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
#: Python the harness starts as the desktop user loads nothing from the agent's files.
AGENT_PYTHON_ENV = {"PYTHONNOUSERSITE": "1", "PYTHONSAFEPATH": "1"}
ROOT_WORKDIR = "/"  # root's commands run where the agent cannot write

SUDO_SHIM = r"""#!/bin/sh
# arborl's sudo. Root (the harness's setup steps) runs the command in a clean environment with
# root's own HOME; anyone else, the agent included, is refused: the agent has no root here.
user=root
while [ $# -gt 0 ]; do
  case "$1" in
    -S|--stdin) IFS= read -r _password || true; shift ;;
    -u|--user) user="$2"; shift 2 ;;
    -p|--prompt) shift 2 ;;
    -E|-H|-k|-n|-i|--preserve-env|--set-home|--reset-timestamp|--non-interactive|--login) shift ;;
    --) shift; break ;;
    -*) echo "sudo (arborl): unsupported option $1" >&2; exit 1 ;;
    *) break ;;
  esac
done
if [ "$(id -u)" != 0 ]; then
  echo "sudo: not available: this sandbox gives you no root (no sudo, no su), so commands that need root cannot run here" >&2
  exit 1
fi
[ $# -gt 0 ] || { echo "usage: sudo [-S] [-u user] command ..." >&2; exit 1; }
clean="PATH=@ROOT_PATH@ LANG=C.UTF-8${DISPLAY:+ DISPLAY=$DISPLAY}"
if [ "$user" != root ] && [ "$user" != 0 ]; then
  exec /usr/bin/env -i $clean su -s /bin/sh "$user" -c 'exec "$0" "$@"' -- "$@"
fi
exec /usr/bin/env -i $clean HOME=/root USER=root LOGNAME=root "$@"
""".replace("@ROOT_PATH@", ROOT_PATH)


def vm_path(path: str) -> str:
    """A path as OSWorld's VM server takes it: relative to the user's home, `/home/user` → HOME."""
    if path == "/home/user" or path.startswith("/home/user/"):
        return HOME + path[len("/home/user") :]
    return path if path.startswith("/") else f"{HOME}/{path}"


def argv(command: str | list[str], shell: bool = False) -> list[str]:
    """OSWorld's command forms as an argv: a shell command under /bin/sh, else split words."""
    if isinstance(command, list):
        words = ["python3" if i == 0 and w == "python" else w for i, w in enumerate(command)]
        return ["/bin/sh", "-c", shlex.join(words)] if shell else words
    if shell:
        return ["/bin/sh", "-c", re.sub(r"^python(\s)", r"python3\1", command)]
    return argv(shlex.split(command))


def root_argv(words: list[str], display: str | None = None, home: str = "/root") -> list[str]:
    """`words` run by `env -i`: a fixed PATH, root's HOME (none with `home=""`), the display."""
    env = [f"PATH={ROOT_PATH}", "LANG=C.UTF-8"]
    if home:
        env += [f"HOME={home}", "USER=root", "LOGNAME=root"]
    if display:
        env.append(f"DISPLAY={display}")
    return ["/usr/bin/env", "-i", *env, *words]


def exec_args(command: str | list[str], shell: bool, display_env: Mapping[str, str]) -> dict[str, Any]:
    """`Sandbox.exec` keyword arguments, `cmd` included, for an OSWorld command: as the
    desktop user in its home, or, for one that calls `sudo`, as root in a clean environment."""
    words = argv(command, shell)
    if not uses_sudo(command):
        return {"cmd": words, "workdir": HOME, "env": {**display_env, **AGENT_PYTHON_ENV}}
    display = display_env.get("DISPLAY")
    if words[:2] == ["/bin/sh", "-c"]:
        # The outer shell expands `~` as the desktop user's shell would, and exports no HOME.
        script = f"HOME={HOME}\n{words[2]}"
        return {
            "cmd": root_argv(["/bin/sh", "-c", script], display, home=""),
            "workdir": ROOT_WORKDIR,
            "user": "root",
        }
    return {"cmd": root_argv(words, display), "workdir": ROOT_WORKDIR, "user": "root"}


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
        keys = list(args.get("keys") or ())
        if a.name == "hotkey" and {"Control_L", "Alt_L"} <= set(keys):
            if keys[-1].lower() == "t":  # the terminal's shortcut: pressed again if it was lost
                cmds = [
                    _ACTIVE_BEFORE,
                    _TERMINALS_BEFORE,
                    *cmds,
                    _WAIT_ACTIVE_CHANGE,
                    _lost_terminal_key(cmds),
                ]
            else:
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

# Ctrl+Alt+T pressed by xdotool right after VLC's window took the focus was lost in 2 to 4 of
# 12 resets on a loaded machine (no lxterminal process started, the focus stayed on VLC's
# window, and the binding opened a terminal when pressed again later; with xterm launched
# instead of VLC, 12 of 12 worked). Where nothing took the focus and no lxterminal process
# (the desktop's one binding for it, env.py) started, the key is pressed once more: a terminal
# that is only slow has its process by then and is not opened twice. (Where a terminal is
# already open, a second `lxterminal` hands its window to the first and exits, so a new window
# that takes over 5 s to get the focus could still be doubled.)
_TERMINALS_BEFORE = "_t=$(pgrep -d, -x lxterminal || true)"


def _lost_terminal_key(key_cmds: list[str]) -> str:
    again = "; ".join([*key_cmds, _WAIT_ACTIVE_CHANGE])
    return (
        'if [ "$(xdotool getactivewindow 2>/dev/null || true)" = "$_w" ] '
        '&& [ "$(pgrep -d, -x lxterminal || true)" = "$_t" ]; then ' + again + "; fi"
    )


__all__ = [
    "AGENT_PATH",
    "AGENT_PYTHON_ENV",
    "HOME",
    "OSWORLD_SCREEN",
    "ROOT_PATH",
    "ROOT_WORKDIR",
    "SHIM_DIR",
    "SUDO_SHIM",
    "ActionError",
    "argv",
    "exec_args",
    "pyautogui_code",
    "replay_lines",
    "root_argv",
    "uses_sudo",
]
