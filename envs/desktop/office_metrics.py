"""OSWorld's LibreOffice metrics on files the getters copied to the host: `compare_table`
(its metrics/table.py) for `.xlsx` workbooks and `compare_docx_files` (metrics/docs.py) for
`.docx` / `.odt` documents. Same contract as `osworld_metrics`: `(result, expected, **options)
-> score in [0, 1]`, a missing file (None) scores 0.

`compare_table` runs its `rules` in order and scores 1 only when every rule holds. The rule
types of OSWorld's `multi_apps` and `os` tasks are implemented (`TABLE_RULES` in
`table_rules.py`; the loader refuses the others at load time):

| rule | holds when |
|---|---|
| `sheet_name` | both workbooks have the same sheet names, in order |
| `sheet_data` (`sheet_idx0`, `sheet_idx1`, `precision`=4) | the two sheets read by pandas, rounded to `precision` decimals, are equal (`DataFrame.equals`; pandas reads numbers saved as text as numbers) |
| `sheet_print` (`sheet_idx0`, `sheet_idx1`, `ignore_case`) | the CSV exports beside the files (`<file stem>-<sheet name>.csv`, as LibreOffice's `--convert-to csv` names them) have the same stripped lines, trailing blank lines ignored |
| `sheet_fuzzy` (`sheet_idx0`, `sheet_idx1`, `rules`: `range`, `type`, `threshold`, `ignore_case`, `ignore_chars`, `trim_leadings`, `trim_trailings`, `normalization`) | for every cell of the ranges, the cells' values (as `str`) after normalisation: `exact_match`, `includes` (the second's in the first's), `included_by`, `fuzzy_match` (ratio >= `threshold`, 85) |
| `check_cell` (`sheet_idx`, `coordinate`, `props: {"value": rule}`) | the cell's value matches the rule (`match_value_to_rule`: `re`, `eq`..., `approx:EPS`) |

A sheet index is OSWorld's: an int or `RI<n>` (the result's n-th sheet), `RN<name>`, `EI<n>`,
`EN<name>` (the expected workbook's). A cell's value is read from the file's XML as OSWorld's
`read_cell_value` does: the saved value (a formula's cached result), numbers as float, shared
and formula strings as str. Unlike OSWorld, inline strings and booleans are read too (OSWorld
gives None for them, so any two such cells compared equal there).

Left out (refused at load): the rule types `sparkline`, `chart`, `style`, `freeze`, `zoom`,
`data_validation`, `row_props`, `col_props`, `filter`, `pivot_table`, and `check_cell` style
props (`font_bold`, `bgcolor`, ...). No OSWorld `multi_apps` or `os` task uses them.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"
_ODF_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"


# The files come from the agent's sandbox (up to 64 MiB each): a zip whose parts declare more
# than this is refused (scores 0) before any part is read, so a zip bomb cannot exhaust the
# harness's memory. zipfile never inflates a part past the size it declares.
MAX_UNZIPPED_BYTES = 256 * 2**20


def open_bounded_zip(path: str) -> zipfile.ZipFile:
    """`zipfile.ZipFile(path)`, refused with ValueError when its parts declare too much."""
    z = zipfile.ZipFile(path)
    total = sum(i.file_size for i in z.infolist())
    if total > MAX_UNZIPPED_BYTES:
        z.close()
        raise ValueError(f"{path}: its parts inflate to {total} bytes (limit {MAX_UNZIPPED_BYTES})")
    return z


def indel_ratio(a: str, b: str) -> float:
    """rapidfuzz's `fuzz.ratio` (what OSWorld scores with), in [0, 100]: 200 * LCS / (len(a) +
    len(b)); two empty strings score 100."""
    from rapidfuzz import fuzz

    return float(fuzz.ratio(a, b))


# ---- workbooks -------------------------------------------------------------------------------


class Workbook:
    """One `.xlsx` file: its sheet names (in order) and, per sheet, the part that holds it."""

    def __init__(self, path: str) -> None:
        from lxml import etree

        self.path = path
        with open_bounded_zip(path) as z:
            book = etree.fromstring(z.read("xl/workbook.xml"))
            rels = etree.fromstring(z.read("xl/_rels/workbook.xml.rels"))
        targets = {r.get("Id"): r.get("Target") for r in rels.iter(f"{{{_PKG_REL}}}Relationship")}
        self.parts: dict[str, str] = {}
        for sheet in book.iter(f"{{{_MAIN}}}sheet"):
            target = targets[sheet.get(f"{{{_REL}}}id")]
            part = target.lstrip("/") if target.startswith("/") else str(PurePosixPath("xl") / target)
            self.parts[sheet.get("name")] = part
        self.sheet_names = list(self.parts)
        self._roots: dict[str, Any] = {}  # part -> parsed XML: rules read many cells of one sheet

    def _root(self, part: str) -> Any:
        if part not in self._roots:
            from lxml import etree

            with open_bounded_zip(self.path) as z:
                self._roots[part] = etree.fromstring(z.read(part))  # KeyError: no such part
        return self._roots[part]

    def cell_value(self, sheet: str, coordinate: str) -> Any:
        """OSWorld's `read_cell_value`: the saved value of one cell (None if it has none)."""
        root = self._root(self.parts[sheet])  # KeyError: no such sheet
        cells = root.xpath("m:sheetData/m:row/m:c[@r=$r]", namespaces={"m": _MAIN}, r=coordinate)
        if not cells:
            return None
        cell = cells[0]
        kind, v = cell.get("t", "n"), cell.find(f"{{{_MAIN}}}v")
        try:
            if kind == "n":
                return float(v.text)
            if kind == "s":
                si = self._root("xl/sharedStrings.xml").findall(f"{{{_MAIN}}}si")[int(v.text)]
                return "".join(t.text or "" for t in si.iter(f"{{{_MAIN}}}t"))
            if kind == "str":
                return v.text or ""
            if kind == "inlineStr":
                return "".join(t.text or "" for t in cell.iter(f"{{{_MAIN}}}t"))
            if kind == "b":
                return v.text == "1"
        except (AttributeError, TypeError, ValueError, IndexError, KeyError):
            return None
        return None  # an error value (t="e")


def _sheet(idx: int | str, result: Workbook, expected: Workbook | None) -> tuple[Workbook, str]:
    """OSWorld's sheet index: int / RI<n> / RN<name> / EI<n> / EN<name> -> (book, sheet name).
    An index past the last sheet names no sheet ("")."""
    if isinstance(idx, int):
        idx = f"RI{idx}"
    side, how, rest = idx[:1], idx[1:2], idx[2:]
    if side not in ("R", "E") or how not in ("I", "N"):
        raise ValueError(f"unrecognised sheet index {idx!r}")
    book = result if side == "R" else expected
    if book is None:
        raise ValueError(f"sheet index {idx!r} names the expected workbook, but there is none")
    if how == "N":
        return book, rest
    n = int(rest)
    return book, book.sheet_names[n] if 0 <= n < len(book.sheet_names) else ""


def _frame(book: Workbook, sheet: str) -> Any:
    import pandas as pd

    if sheet not in book.sheet_names:
        return None
    return pd.read_excel(book.path, sheet_name=sheet, engine="openpyxl")


def _printed(book: Workbook, sheet: str) -> list[str] | None:
    """The sheet's CSV export beside the workbook, lines stripped, trailing blank lines dropped."""
    csv = Path(book.path).with_name(f"{Path(book.path).stem}-{sheet}.csv")
    try:
        lines = [line.strip() for line in csv.read_text(encoding="utf-8").splitlines()]
    except OSError:
        return None
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _cells(ranges: Sequence[str] | str) -> list[str]:
    from openpyxl.utils import get_column_letter
    from openpyxl.worksheet.cell_range import MultiCellRange

    spec = ranges if isinstance(ranges, str) else " ".join(ranges)
    return [f"{get_column_letter(col)}{row}" for rng in MultiCellRange(spec) for row, col in rng.cells]


def _normalise(value: str, rule: Mapping[str, Any]) -> str:
    for old, new in rule.get("normalization", []):
        value = value.replace(old, new)
    if "trim_leadings" in rule:
        value = value.lstrip(rule["trim_leadings"])
    if "trim_trailings" in rule:
        value = value.rstrip(rule["trim_trailings"])
    if "ignore_chars" in rule:
        value = "".join(ch for ch in value if ch not in set(rule["ignore_chars"]))
    return value.lower() if rule.get("ignore_case", False) else value


def _fuzzy_cells_match(
    first: tuple[Workbook, str], second: tuple[Workbook, str], rule: Mapping[str, Any]
) -> bool:
    kind = rule["type"]
    for coordinate in _cells(rule["range"]):
        a = _normalise(str(first[0].cell_value(first[1], coordinate)), rule)
        b = _normalise(str(second[0].cell_value(second[1], coordinate)), rule)
        if kind == "exact_match":
            ok = a == b
        elif kind == "includes":
            ok = b in a
        elif kind == "included_by":
            ok = a in b
        elif kind == "fuzzy_match":
            ok = indel_ratio(a, b) >= float(rule.get("threshold", 85.0))
        else:
            raise ValueError(f"unknown sheet_fuzzy type {kind!r}")
        if not ok:
            return False
    return True


def _rule_holds(r: Mapping[str, Any], result: Workbook, expected: Workbook | None) -> bool | None:
    """One compare_table rule; None when the result's sheet is missing (the score is then 0)."""
    kind = r["type"]
    if kind == "sheet_name":
        return expected is not None and result.sheet_names == expected.sheet_names
    if kind == "sheet_data":
        first = _frame(*_sheet(r["sheet_idx0"], result, expected))
        if first is None:
            return None
        second = _frame(*_sheet(r["sheet_idx1"], result, expected))
        digits = int(r.get("precision", 4))
        return second is not None and bool(first.round(digits).equals(second.round(digits)))
    if kind == "sheet_print":
        lines0 = _printed(*_sheet(r["sheet_idx0"], result, expected))
        if lines0 is None:
            return None
        lines1 = _printed(*_sheet(r["sheet_idx1"], result, expected))
        if lines1 is None:
            return False
        if r.get("ignore_case", False):
            lines0, lines1 = [x.lower() for x in lines0], [x.lower() for x in lines1]
        return lines0 == lines1
    if kind == "sheet_fuzzy":
        first, second = _sheet(r["sheet_idx0"], result, expected), _sheet(r["sheet_idx1"], result, expected)
        return all(_fuzzy_cells_match(first, second, sub) for sub in r["rules"])
    if kind == "check_cell":
        book, sheet = _sheet(r["sheet_idx"], result, expected)
        if sheet not in book.sheet_names:
            return None
        from .osworld_metrics import match_value_to_rule  # here: osworld_metrics registers this module

        for prop, rule in r["props"].items():
            if prop != "value":
                raise ValueError(f"check_cell: cell property {prop!r} is not implemented (only 'value')")
            if not match_value_to_rule(book.cell_value(sheet, r["coordinate"]), rule):
                return False
        return True
    raise ValueError(f"compare_table: rule type {kind!r} is not implemented")


def compare_table(result: Any, expected: Any = None, rules: Sequence[Mapping[str, Any]] = ()) -> float:
    """1.0 when every rule holds for the result workbook (and the expected one), else 0.0."""
    if not result:
        return 0.0
    try:
        book = Workbook(str(result))
    except (OSError, KeyError, zipfile.BadZipFile, ValueError):
        return 0.0  # not a workbook: as OSWorld, the agent's file scores 0
    gold = Workbook(str(expected)) if expected else None
    for r in rules:
        if not _rule_holds(r, book, gold):
            return 0.0
    return 1.0


# ---- documents -------------------------------------------------------------------------------


def _paragraphs(path: str) -> list[str] | None:
    """The paragraphs' text of a .docx (python-docx) or .odt (its `text:p` elements: their own
    text and their spans', as OSWorld reads them); None for another type or a broken file."""
    try:
        if path.endswith(".docx"):
            import docx

            open_bounded_zip(path).close()
            return [p.text for p in docx.Document(path).paragraphs]
        if path.endswith(".odt"):
            from lxml import etree

            with open_bounded_zip(path) as z:
                root = etree.fromstring(z.read("content.xml"))
            out = []
            for p in root.iter(f"{{{_ODF_TEXT}}}p"):
                parts = [p.text or ""]
                for child in p:
                    if child.tag == f"{{{_ODF_TEXT}}}span":
                        parts.append(child.text or "")
                    parts.append(child.tail or "")
                out.append("".join(parts))
            return out
    except Exception:  # python-docx raises many types for a file that is not a document
        return None
    return None


def compare_docx_files(
    result: Any,
    expected: Any,
    ignore_blanks: bool = True,
    ignore_case: bool = False,
    ignore_order: bool = False,
    content_only: bool = False,
) -> float:
    """OSWorld's `compare_docx_files`: the two documents' paragraph texts are equal.

    Both files must be .docx, or both .odt. `ignore_order` sorts the paragraphs first.
    `ignore_blanks` (the default) compares the whole texts with every run of whitespace made one
    space (paragraph breaks included); without it, paragraph by paragraph. `content_only`
    scores the similarity of the whitespace-normalised texts (`indel_ratio` / 100) instead.
    """
    if not result or not expected:
        return 0.0
    a, b = str(result), str(expected)
    if Path(a).suffix != Path(b).suffix:
        return 0.0
    paras_a, paras_b = _paragraphs(a), _paragraphs(b)
    if paras_a is None or paras_b is None:
        return 0.0
    if ignore_order:
        paras_a, paras_b = sorted(paras_a), sorted(paras_b)
    if content_only or ignore_blanks:
        text_a = re.sub(r"\s+", " ", "\n".join(paras_a)).strip()
        text_b = re.sub(r"\s+", " ", "\n".join(paras_b)).strip()
        if ignore_case:
            text_a, text_b = text_a.lower(), text_b.lower()
        return indel_ratio(text_a, text_b) / 100.0 if content_only else float(text_a == text_b)
    if ignore_case:
        paras_a, paras_b = [p.lower() for p in paras_a], [p.lower() for p in paras_b]
    return float(paras_a == paras_b)


OFFICE_METRICS: dict[str, Callable[..., float]] = {f.__name__: f for f in (compare_table, compare_docx_files)}
