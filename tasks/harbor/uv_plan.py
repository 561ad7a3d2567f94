"""What a task's `tests/test.sh` needs of uv, so its image can have it offline.

    plan = plan_uv(test_sh_text)     # pure: no Docker here (envs/harbor/images.py provides it)
    plan.needed                      # the script runs uv / uvx
    plan.version                     # the uv version its installer URL names ('' = any)
    plan.requirements                # what its uv commands install: ("pytest==8.4.1", ...)
    plan.project                     # it runs `uv add` / `uv sync` (a locked project: warmed so)

Terminal-Bench 2's tests almost all start the same way: `curl -LsSf
https://astral.sh/uv/<version>/install.sh | sh`, `source $HOME/.local/bin/env`, then `uvx -p
3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest ...` (or `uv init; uv add ...; uv run
pytest`). Harbor's verifier has the internet; arborl's has none, and this machine reaches PyPI
but neither astral.sh nor the Python builds uv downloads. So the image is given, at build time,
uv itself (from PyPI) where the installer would have put it, and uv's cache warmed with what the
script's uv commands install; the script then runs as written, offline. The requirements are
read from the commands' own arguments: `uvx`/`uv tool run` (`--with`/`-w`, `--from`, the tool),
`uv run --with`, `uv add`, `uv pip install`, `uv tool install`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

#: The installer URL; the version is optional (`https://astral.sh/uv/install.sh` is the latest).
INSTALLER = re.compile(r"https?://astral\.sh/uv/(?:(\d+\.\d+\.\d+)/)?install\.sh")
#: Options of uv's commands that take a value which is not a requirement.
VALUE_OPTIONS = frozenset(
    {
        "-p", "--python", "--directory", "--project", "--cache-dir", "--index", "--index-url",
        "--default-index", "--extra-index-url", "-i", "--find-links", "-f", "--constraint", "-c",
        "--override", "--exclude-newer", "--config-file", "--env-file", "--group", "--extra",
        "--optional", "--target", "--prefix", "--color", "--python-platform", "--resolution",
        "--prerelease", "--index-strategy", "--keyring-provider", "--link-mode", "-C",
        "--config-setting", "--package", "--script", "--dev-dependency", "--tag", "--branch",
        "--rev", "--build-constraint", "--only-group", "--no-group", "--no-binary", "--only-binary",
        "--refresh-package", "--reinstall-package", "--upgrade-package", "-P", "--requirement",
        "-r", "--editable", "-e", "--with-requirements", "--with-editable", "--marker", "-m",
    }
)  # fmt: skip
#: Words before a command that are not the command.
KEYWORDS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "time", "exec"})
#: Options whose value is a requirement to install.
REQUIREMENT_OPTIONS = frozenset({"-w", "--with", "--from"})


@dataclass(frozen=True)
class UvPlan:
    needed: bool = False
    version: str = ""
    requirements: tuple[str, ...] = ()
    project: bool = False


def _commands(text: str) -> list[list[str]]:
    """The script's simple commands as token lists (continuations joined, comments dropped,
    split at `;`, `&&`, `||`, `|` and `then`/`do`/`if`... keywords)."""
    joined = re.sub(r"\\\r?\n", " ", text)
    out: list[list[str]] = []
    for line in joined.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError:  # an unclosed quote: the line is not a plain command
            continue
        cmd: list[str] = []
        for tok in tokens:
            if tok and set(tok) <= set(";&|()"):
                if cmd:
                    out.append(cmd)
                cmd = []
            elif not cmd and tok in KEYWORDS:
                continue
            else:
                cmd.append(tok)
        if cmd:
            out.append(cmd)
    return out


def _split(args: list[str]) -> tuple[list[str], list[str]]:
    """(requirements named by options, positional arguments) of a uv command's arguments."""
    reqs: list[str] = []
    positional: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, value = a.partition("=")
        if a.startswith("-") and eq and name in REQUIREMENT_OPTIONS | VALUE_OPTIONS:
            if name in REQUIREMENT_OPTIONS:
                reqs += [r for r in value.split(",") if r]
        elif a in REQUIREMENT_OPTIONS and i + 1 < len(args):
            reqs += [r for r in args[i + 1].split(",") if r]
            i += 1
        elif a in VALUE_OPTIONS:
            i += 1
        elif a == "--":
            positional += args[i + 1 :]
            break
        elif not a.startswith("-"):
            positional.append(a)
        i += 1
    return reqs, positional


def _tool_requirements(args: list[str]) -> list[str]:
    """`uvx [options] TOOL [tool args]`: the options up to the tool, and the tool itself
    (unless `--from` names the package, or the tool is Python)."""
    head: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            head.append(a)
            if "=" not in a and (a in VALUE_OPTIONS or a in REQUIREMENT_OPTIONS) and i + 1 < len(args):
                head.append(args[i + 1])
                i += 1
            i += 1
            continue
        break
    reqs, _ = _split(head)
    tool = args[i] if i < len(args) else ""
    has_from = any(h == "--from" or h.startswith("--from=") for h in head)
    if tool and not has_from and not re.match(r"^python(\d(\.\d+)?)?$", tool):
        reqs.append(tool)
    return reqs


def plan_uv(text: str) -> UvPlan:
    """What `text` (a test.sh) needs of uv; `UvPlan()` when it runs none."""
    m = INSTALLER.search(text)
    version = (m.group(1) or "") if m else ""
    reqs: list[str] = []
    project = False
    needed = bool(m)
    for cmd in _commands(text):
        prog = cmd[0].rsplit("/", 1)[-1]
        if prog == "uvx":
            needed = True
            reqs += _tool_requirements(cmd[1:])
        elif prog == "uv" and len(cmd) > 1:
            needed = True
            _, pos = _split(cmd[1:])
            sub = pos[0] if pos else ""
            if sub == "tool" and len(pos) > 1 and pos[1] == "run":
                reqs += _tool_requirements(cmd[cmd.index("run") + 1 :])
            elif sub == "tool" and len(pos) > 1 and pos[1] == "install":
                r, p = _split(cmd[cmd.index("install") + 1 :])
                reqs += r + p[:1]
            elif sub == "pip" and len(pos) > 1 and pos[1] == "install":
                r, p = _split(cmd[cmd.index("install") + 1 :])
                reqs += r + p
            elif sub == "add":
                project = True
                r, p = _split(cmd[cmd.index("add") + 1 :])
                reqs += r + p
            elif sub in {"sync", "lock"}:
                project = True
            elif sub == "run":
                r, _ = _split(cmd[cmd.index("run") + 1 :])
                reqs += r
    seen = dict.fromkeys(r for r in reqs if r and not r.startswith(("/", ".")))
    # a bare name that another requirement pins (`-w pytest==8.4.1 pytest`) adds nothing
    pinned = {
        re.split(r"[<>=!~\[;@ ]", r, maxsplit=1)[0].lower() for r in seen if not re.fullmatch(r"[\w.-]+", r)
    }
    seen = {r: None for r in seen if not (re.fullmatch(r"[\w.-]+", r) and r.lower() in pinned)}
    return UvPlan(needed=needed, version=version, requirements=tuple(seen), project=project)
