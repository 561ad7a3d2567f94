"""bfcl-eval result files, read as they are, to re-score them.

    arborl eval suite=bfcl-simple predictions=result/gpt-4o-FC/non_live/BFCL_v4_simple_python_result.json

A result file is what bfcl-eval's `generate` writes (`result/<model>/<group>/BFCL_v4_<category>
_result.json`): one JSON object per line with the entry's `id` and `result` (the model's raw
output in its handler's form: `decoding`; multi-turn: a list of turns, each a list of the
turn's replies), plus bookkeeping scoring ignores (`inference_log`, token counts, latency).
`predictions=` may also be a directory: every `BFCL_v4_*_result.json` under it (as bfcl-eval's
runner finds them) whose category the suite has.

What is not right in a file is said with its file and line, and the rest is still scored:

- a line that is not JSON, or not an object with an `id` string: not read (its entry, if
  any, is then missing);
- an id the suite does not have: not scored; when no id is the suite's, the whole file is
  refused, naming the suite its ids belong to;
- an entry given twice: scored once when both results are the same; when they differ, or
  the line has no `result`, the entry is not scored and counts as wrong (`unusable`);
- an entry of a scored category with no result: counts as wrong (`missing`). bfcl-eval
  refuses such a file unless given `--partial-eval`, which scores only the entries present.

A file that is not a result file at all (a score file, a SWE-bench predictions file, a JSON
document) is refused with what it looks like.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .data import BfclTask
from .decoding import DECODERS, Decoder
from .grading import Verdict
from .official import bfcl_decoders
from .rescoring import Scored, score_result, underscored
from .suites import suite_name

#: bfcl-eval's result file names (`RESULT_FILE_PATTERN`).
RESULT_FILE_PATTERN = "BFCL_v4_*_result.json"
#: arborl's error kinds for an entry that has no result to score (bfcl-eval has none: it
#: refuses the file, or with `--partial-eval` leaves the entry out).
MISSING, UNUSABLE = "arborl:missing_result", "arborl:unusable_result"


class ResultFileError(ValueError):
    """A bfcl-eval result file (or directory) that cannot be scored; the message names the
    file, and the line where one is at fault."""


@dataclass
class ResultEntry:
    id: str
    result: Any
    where: str
    """file:line"""


@dataclass
class ResultFiles:
    """The entries of one or more result files, and how they are decoded."""

    paths: list[Path]
    entries: dict[str, ResultEntry]
    unusable: dict[str, str] = field(default_factory=dict)
    """entry id → why it cannot be scored (counts as wrong)"""
    problems: list[str] = field(default_factory=list)
    """"file:line: what", for every line that was not scored as it stands"""
    categories: set[str] = field(default_factory=set)
    """the BFCL categories the files hold entries of (only these are scored)"""
    decoder: Decoder = "fc"
    underscored: bool = False
    how: str = ""
    """how the decoder and the name mangling were chosen, in words"""

    def score(self, task: BfclTask) -> tuple[Scored, ResultEntry | None]:
        """The entry's verdict, and its result (None when it has none: then the verdict is
        `MISSING` or `UNUSABLE`, with why)."""
        if task.id in self.unusable:
            return Scored(Verdict(False, UNUSABLE, [self.unusable[task.id]])), None
        entry = self.entries.get(task.id)
        if entry is None:
            where = ", ".join(map(str, self.paths))
            return Scored(Verdict(False, MISSING, [f"no result for {task.id} in {where}"])), None
        return score_result(task, entry.result, self.decoder, self.underscored), entry


def result_paths(path: str | Path, categories: Sequence[str]) -> list[Path]:
    """`path` itself, or the result files under a directory for `categories`."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ResultFileError(f"{path}: no such file or directory")
    found = sorted(path.rglob(RESULT_FILE_PATTERN))
    category = bfcl_decoders().category_of_file
    chosen = [p for p in found if category(p, raise_error=False) in categories]
    if not chosen:
        have = sorted({category(p, raise_error=False) for p in found} - {None})
        raise ResultFileError(
            f"{path}: no bfcl-eval result file ({RESULT_FILE_PATTERN}) for {', '.join(categories)}"
            + (f"; it has {', '.join(have)}" if have else "")
        )
    return chosen


def read_result_files(
    path: str | Path,
    tasks: Sequence[BfclTask],
    suite: str,
    decoder: str = "auto",
    underscore_to_dot: bool | None = None,
) -> ResultFiles:
    """The results in `path` for `tasks` (a suite's, all of them), decoded with `decoder`
    (`auto`: from the results' form) and, when `underscore_to_dot` is None, the name
    mangling detected from the calls."""
    if decoder != "auto" and decoder not in DECODERS:
        raise ResultFileError(f"unknown decoder {decoder!r}: auto, {', '.join(DECODERS)}")
    by_id = {t.id: t for t in tasks}
    paths = result_paths(path, sorted({t.category for t in tasks}))
    files = ResultFiles(paths, {})
    foreign: list[tuple[str, str]] = []
    for p in paths:
        for where, row in _rows(p, files.problems):
            _add(files, where, row, by_id, foreign)
    if foreign and not files.entries and not files.unusable:
        raise ResultFileError(_foreign_error(paths, foreign, suite))
    files.problems += [f"{where}: {i!r} is not an entry of {suite}; not scored" for where, i in foreign]
    files.categories = {by_id[i].category for i in [*files.entries, *files.unusable]}
    pairs = [(by_id[i], e.result) for i, e in files.entries.items()]
    files.decoder, how = _decoder(decoder, [s for t, r in pairs for s in _replies(t, r)])
    if underscore_to_dot is None:
        files.underscored, evidence = underscored(pairs, files.decoder)
        how += f"; names {'mangled' if files.underscored else 'as they are'} (auto: {evidence})"
    else:
        files.underscored = underscore_to_dot
        how += f"; names {'mangled' if underscore_to_dot else 'as they are'} (given)"
    files.how = how
    return files


def _rows(path: Path, problems: list[str]) -> list[tuple[str, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ResultFileError(f"{path}: cannot read ({e})") from None
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, list):  # a JSON document: its lines may be objects by chance
        raise ResultFileError(f"{path}: not a bfcl-eval result file: {_looks_like(('not JSON', '['))}")
    rows, first = [], None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"{where}: not JSON ({e.msg} at column {e.colno}); not read")
            first = first or ("not JSON", line)
            continue
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            problems.append(f"{where}: not a result (an object with an `id` string); not read")
            first = first or ("other", row)
            continue
        rows.append((where, row))
    if not rows:
        raise ResultFileError(f"{path}: not a bfcl-eval result file: {_looks_like(first)}")
    return rows


def _looks_like(first: tuple[str, Any] | None) -> str:
    expected = (
        "expected one JSON object per line with `id` and `result`, as bfcl-eval's generate "
        "writes BFCL_v4_<category>_result.json"
    )
    if first is None:
        return f"it is empty; {expected}"
    kind, row = first
    if isinstance(row, dict) and {"accuracy", "correct_count", "total_count"} <= set(row):
        return f"it is a bfcl-eval score file (BFCL_v4_<category>_score.json); {expected}"
    if isinstance(row, dict) and "instance_id" in row:
        return f"it looks like a SWE-bench predictions file (give it with a SWE-bench suite); {expected}"
    if kind == "not JSON" and str(row).strip() in ("[", "{"):
        return f"it is one JSON document, not JSON lines; {expected}"
    return f"line 1 is {str(row)[:80]!r}; {expected}"


def _add(
    files: ResultFiles,
    where: str,
    row: dict[str, Any],
    by_id: dict[str, BfclTask],
    foreign: list[tuple[str, str]],
) -> None:
    entry_id = row["id"]
    if entry_id not in by_id:
        foreign.append((where, entry_id))
        return
    if entry_id in files.unusable:
        files.unusable[entry_id] += f"; and again at {where}"
        files.problems.append(f"{where}: {entry_id} given again; not scored (counts as wrong)")
        return
    if "result" not in row:
        files.entries.pop(entry_id, None)
        files.unusable[entry_id] = f"{where}: no `result` for {entry_id}"
        files.problems.append(f"{where}: no `result`; {entry_id} not scored (counts as wrong)")
        return
    first = files.entries.get(entry_id)
    if first is None:
        files.entries[entry_id] = ResultEntry(entry_id, row["result"], where)
    elif first.result == row["result"]:
        files.problems.append(f"{where}: {entry_id} again, the same result as {first.where}; scored once")
    else:
        del files.entries[entry_id]
        files.unusable[entry_id] = f"{first.where} and {where} hold different results for {entry_id}"
        files.problems.append(
            f"{where}: a different result for {entry_id} than {first.where}; not scored (counts as wrong)"
        )


def _foreign_error(paths: list[Path], foreign: list[tuple[str, str]], suite: str) -> str:
    category = bfcl_decoders().category_of_id
    theirs = set()
    for _, entry_id in foreign:
        try:
            theirs.add(category(entry_id))
        except Exception:  # an id that names no BFCL category
            continue
    hint = ", ".join(f"{c} (suite={suite_name(c)})" for c in sorted(theirs))
    where, entry_id = foreign[0]
    return (
        f"{', '.join(map(str, paths))}: none of its {len(foreign)} ids is an entry of {suite} "
        f"({where}: {entry_id!r})" + (f"; its ids are BFCL's {hint}" if hint else "")
    )


def _decoder(given: str, replies: list[Any]) -> tuple[Decoder, str]:
    if given != "auto":
        return given, f"decoder {given} (given)"  # type: ignore[return-value]
    if any(isinstance(r, list) for r in replies):
        return "fc", "decoder fc (auto: replies are lists of calls, as function-calling handlers store them)"
    if any(isinstance(r, str) and "<tool_call>" in r for r in replies):
        return "hermes", "decoder hermes (auto: replies hold <tool_call> blocks)"
    return "prompting", "decoder prompting (auto: replies are text, as prompted models' handlers store them)"


def _replies(task: BfclTask, result: Any) -> list[Any]:
    """The replies of a result: a single-turn result is one; a multi-turn one holds turns of
    replies (a result that is not a list holds none)."""
    if task.scoring != "multi_turn":
        return [result]
    return [s for t in result if isinstance(t, list) for s in t] if isinstance(result, list) else []
