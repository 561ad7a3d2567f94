"""Which hunk of a model patch did not apply: read from the grading harness's log.

The harness applies a patch with `git apply --verbose`, then `patch --fuzz=5 --dry-run`,
and prints both outputs (`tasks/swebench/harness.py`). Git stops at the first hunk that
does not apply and names it by file and its old start line (`error: patch failed:
src/m.py:12`); `patch` names it by number (`checking file src/m.py` ... `Hunk #2 FAILED at
12.`). Either is looked up in the patch to show the hunk itself; an error with no hunk
(a file the repository lacks, a corrupt patch) is shown as git said it.

The lookup is written here rather than with a diff parser (unidiff): a patch that does not
apply is often malformed, and a strict parser would refuse the very patches this explains.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

_GIT_FAILED = re.compile(r"^error: patch failed: (?P<file>.+):(?P<line>\d+)$", re.M)
_PATCH_FILE = re.compile(r"^checking file (?P<file>.+)$")
_PATCH_HUNK = re.compile(r"^Hunk #(?P<n>\d+) FAILED at (?P<line>\d+)")
_GIT_ERROR = re.compile(r"^error: (?!while searching for)(.+)$", re.M)
_HEADER = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")
_FILE = re.compile(r"^\+\+\+ (?:b/)?(.+?)\s*$")
MAX_HUNK_LINES = 40


@dataclass(frozen=True)
class FailingHunk:
    """The first hunk that did not apply (`header`/`text` empty when it was not found)."""

    file: str
    line: int
    header: str
    text: str
    why: str

    def summary(self) -> str:
        """One line: where, and the hunk's header (or what git said)."""
        if not self.file:
            return self.why
        return f"{self.file}:{self.line} {self.header}".rstrip()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _hunks(patch: str) -> dict[str, list[list[str]]]:
    """Each file's hunks (header line first), in patch order."""
    out: dict[str, list[list[str]]] = {}
    current: list[list[str]] | None = None
    previous = ""
    for line in patch.splitlines():
        after, previous = previous, line
        if line.startswith("diff --git "):
            current = None
        elif after.startswith("--- ") and (m := _FILE.match(line)) is not None:  # not an added "++ x"
            current = out.setdefault(m.group(1), [])
        elif line.startswith("@@") and current is not None:
            current.append([line])
        elif current:
            current[-1].append(line)
    return out


def _found(file: str, line: int, hunk: list[str] | None, why: str) -> FailingHunk:
    if hunk is None:
        return FailingHunk(file, line, "", "", why)
    return FailingHunk(file, line, hunk[0], "\n".join(hunk[:MAX_HUNK_LINES]), why)


def _from_git(log: str, hunks: dict[str, list[list[str]]]) -> FailingHunk | None:
    m = _GIT_FAILED.search(log)
    if m is None:
        return None
    file, line = m.group("file"), int(m.group("line"))
    by_start = [h for h in hunks.get(file, []) if (s := _HEADER.match(h[0])) and int(s.group(1)) == line]
    return _found(file, line, by_start[0] if by_start else None, m.group(0))


def _from_patch(log: str, hunks: dict[str, list[list[str]]]) -> FailingHunk | None:
    file = ""
    for text in log.splitlines():
        if (f := _PATCH_FILE.match(text)) is not None:
            file = f.group("file")
        elif (h := _PATCH_HUNK.match(text)) is not None and file:
            n, line = int(h.group("n")), int(h.group("line"))
            ours = hunks.get(file, [])
            return _found(file, line, ours[n - 1] if n <= len(ours) else None, text.strip())
    return None


def first_failing_hunk(log: str, patch: str | None) -> FailingHunk | None:
    """The first hunk of `patch` that the harness could not apply, from its `log`; None when
    the log does not say (then the grade's error is all there is)."""
    hunks = _hunks(patch or "")
    found = _from_git(log, hunks) or _from_patch(log, hunks)
    if found is not None:
        return found
    m = _GIT_ERROR.search(log)
    return FailingHunk("", 0, "", "", m.group(0)) if m else None
