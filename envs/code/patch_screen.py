"""Which changes of a model patch touch test infrastructure rather than the code under test.

A patch that hooks the test runner forges its verdict without fixing anything: a
`conftest.py` that marks every test passed, a `pytest.ini` that selects no test, a module at
the repository's root that shadows one the test runner imports (`python3 -m pytest` puts the
working directory first on sys.path), a `.pth` or `sitecustomize.py` that runs before
anything else, a change under `.git` or to `.gitattributes` that makes the grader's own git
run code. SWE-smith and R2E-Gym reject such patches outright; so does arborl: a patch with any
of these scores 0 with the reasons recorded. The repository's own test infrastructure keeps
working: only changes to it are refused.

The check reads the patch's file headers (and, for `pyproject.toml` and `setup.cfg`, which
mostly hold other things, the base version of the file to tell which section a changed line
belongs to). It is a pure function: the caller fetches those base files from a clean sandbox.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

#: Files whose very presence configures or hooks the test run.
INFRA_NAMES = {
    "conftest.py": "pytest plugin file (conftest.py)",
    "pytest.ini": "pytest configuration",
    ".pytest.ini": "pytest configuration",
    "tox.ini": "tox / pytest configuration",
    "sitecustomize.py": "Python start-up hook (sitecustomize)",
    "usercustomize.py": "Python start-up hook (usercustomize)",
    ".gitattributes": "git attributes (filters run by the grader's git)",
    ".gitmodules": "git submodules",
}
#: Modules the test runner imports before any test: a new file of that name at the top of the
#: import path runs first. The standard library's names come from the running interpreter.
RUNNER_MODULES = {"pytest", "_pytest", "pluggy", "py", "iniconfig", "packaging", "exceptiongroup", "tomli"}
SOURCE_ROOTS = ("", "src/")  # the working directory and the usual PYTHONPATH=src of src layouts
#: Config files that hold test configuration beside other things: only their test sections count.
SECTIONED = ("pyproject.toml", "setup.cfg")
_TEST_SECTION = re.compile(
    r"^\[\s*(tool\.pytest[^\]]*|tool:pytest|pytest|tool\.tox[^\]]*|tox[^\]]*|"
    r"project\.entry-points\.pytest11|options\.entry_points)\s*\]"
)
_HEADER = re.compile(r"^\s*\[[^\]]*\]")
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


@dataclass
class FileChange:
    """One file of a git patch: its old and new paths and the hunk lines."""

    old: str | None
    new: str | None
    added: bool = False
    lines: list[str] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return [p for p in dict.fromkeys((self.old, self.new)) if p]


def _unquote(name: str) -> str:
    """A path as git writes it in a header: C-quoted when it has special characters."""
    name = name.strip()
    if len(name) >= 2 and name[0] == name[-1] == '"':
        raw = name[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
        return raw.encode("latin-1", "replace").decode("utf-8", "replace")
    return name


def _strip(path: str | None, prefix: str) -> str | None:
    if path is None or path == "/dev/null":
        return None
    return path[len(prefix) :] if path.startswith(prefix) else path


def _header_paths(rest: str) -> tuple[str | None, str | None]:
    """The two paths of a `diff --git a/X b/Y` line (each C-quoted when it needs to be)."""
    tokens: list[str] = []
    i = 0
    while i < len(rest) and len(tokens) < 2:
        if rest[i] == '"':
            j = i + 1
            while j < len(rest) and rest[j] != '"':
                j += 2 if rest[j] == "\\" else 1
            tokens.append(_unquote(rest[i : j + 1]))
            i = j + 2
        elif len(tokens) == 0 and not rest.endswith('"'):
            # Unquoted: `a/P b/P` for the same P (renames name their paths on their own lines).
            n = len(rest)
            same = rest[2 : (n - 1) // 2]
            if rest == f"a/{same} b/{same}":
                return same, same
            a, _, b = rest.partition(" b/")
            return _strip(a, "a/"), b or None
        else:
            j = rest.find(" ", i)
            tokens.append(rest[i : j if j >= 0 else len(rest)])
            i = (j + 1) if j >= 0 else len(rest)
    old = _strip(tokens[0], "a/") if tokens else None
    new = _strip(tokens[1], "b/") if len(tokens) > 1 else old
    return old, new


def parse_patch(patch: str) -> list[FileChange]:
    """The files a `git diff` touches (renames and copies name both paths)."""
    files: list[FileChange] = []
    cur: FileChange | None = None
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            cur = FileChange(*_header_paths(line[len("diff --git ") :]))
            files.append(cur)
        elif cur is None:
            continue
        elif line.startswith(("--- ", "+++ ")) and not cur.lines:
            path = _unquote(line[4:])
            if path != "/dev/null":
                if line[0] == "-":
                    cur.old = _strip(path, "a/")
                else:
                    cur.new = _strip(path, "b/")
        elif line.startswith(("rename from ", "copy from ")):
            cur.old = _unquote(line.split(" ", 2)[2])
        elif line.startswith(("rename to ", "copy to ")):
            cur.new = _unquote(line.split(" ", 2)[2])
            cur.added = True  # a new name: it can shadow like a new file
        elif line.startswith("new file mode"):
            cur.added = True
        elif line.startswith(("@@", "+", "-", " ")):
            cur.lines.append(line)
    return files


def _shadowed_module(path: str) -> str | None:
    """The module a new file at the top of an import root would shadow, if any."""
    for root in SOURCE_ROOTS:
        if not path.startswith(root):
            continue
        rel = path[len(root) :]
        parts = rel.split("/")
        name = None
        if len(parts) == 1 and rel.endswith((".py", ".pyc", ".so")):
            name = rel.split(".")[0]
        elif len(parts) == 2 and parts[1] == "__init__.py":
            name = parts[0]
        if name and (name in sys.stdlib_module_names or name in RUNNER_MODULES):
            return name
    return None


def _sectioned_changes(change: FileChange, base: str | None) -> bool:
    """Whether a changed line of pyproject.toml / setup.cfg falls in a test section."""
    old_lines = (base or "").splitlines()
    section = ""
    for line in change.lines:
        m = _HUNK.match(line)
        if m:
            start = int(m.group(1)) - 1  # lines before the hunk: find the section in force
            section = next((h for h in reversed(old_lines[: max(0, start)]) if _HEADER.match(h)), "")
            continue
        text = line[1:]
        if _HEADER.match(text):
            section = text
        if line[0] in "+-" and (_TEST_SECTION.match(section.strip()) or _TEST_SECTION.match(text.strip())):
            return True
    return False


def infrastructure_changes(patch: str, base_files: Mapping[str, str | None] | None = None) -> list[str]:
    """Reasons to refuse `patch` as tampering with the tests (empty: nothing found).

    `base_files` holds the base text of the patch's `SECTIONED` files (path → text, None if
    the file is new); a sectioned file missing from it counts as changed throughout.
    """
    reasons: list[str] = []
    for change in parse_patch(patch):
        for path in change.paths:
            parts = path.split("/")
            name = parts[-1]
            if path.startswith("/") or ".." in parts or "" in parts:
                reasons.append(f"{path}: a path outside the repository")
            elif ".git" in parts:
                reasons.append(f"{path}: inside .git (the grader's git would read it)")
            elif name in INFRA_NAMES:
                reasons.append(f"{path}: {INFRA_NAMES[name]}")
            elif name.endswith(".pth"):
                reasons.append(f"{path}: a .pth file (runs at Python start-up)")
            elif name in SECTIONED:
                known = base_files is not None and path in base_files
                if not known or _sectioned_changes(change, (base_files or {}).get(path)):
                    reasons.append(f"{path}: changes the test configuration")
            elif change.added and path == change.new and (mod := _shadowed_module(path)):
                reasons.append(f"{path}: shadows the module {mod!r} that the test run imports")
    return list(dict.fromkeys(reasons))


def sectioned_files(patch: str) -> list[str]:
    """The patch's files whose base text `infrastructure_changes` needs."""
    return [p for c in parse_patch(patch) for p in c.paths if p.split("/")[-1] in SECTIONED]
