"""OSWorld's LibreOffice metrics (`compare_table`, `compare_docx_files`) on small files made
with openpyxl and python-docx, with the rules of OSWorld's own `multi_apps` task JSONs (task ids
below), and the accessibility-tree metric with the rules of task f5c13cdd."""

from __future__ import annotations

import asyncio
import zipfile
from pathlib import Path

import pytest
from desktop_helpers import d1acdb87_rules

from arborl.envs.desktop.a11y import ATTR, ST
from arborl.envs.desktop.a11y_metrics import check_accessibility_tree
from arborl.envs.desktop.evaluators import evaluate
from arborl.envs.desktop.office_metrics import Workbook, compare_docx_files, compare_table, indel_ratio
from arborl.envs.desktop.screen import XDisplay
from arborl.envs.desktop.steps import StepContext
from arborl.envs.desktop.support import DESKTOP
from arborl.tasks.osworld import UnsupportedOSWorldFeature, load_osworld_task

openpyxl = pytest.importorskip("openpyxl")
docx = pytest.importorskip("docx")


def xlsx(path: Path, sheets: dict[str, list[list]], shared: bool = True) -> str:
    """A workbook; with `shared`, its strings in the shared-string table, as LibreOffice and Excel
    save them (openpyxl writes inline strings)."""
    wb = openpyxl.Workbook()
    wb.remove(wb.active)
    for name, rows in sheets.items():
        ws = wb.create_sheet(name)
        for row in rows:
            ws.append(row)
    wb.save(path)
    if shared:
        share_strings(path)
    return str(path)


def share_strings(path: Path) -> None:
    from lxml import etree

    main = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    with zipfile.ZipFile(path) as z:
        parts = {n: z.read(n) for n in z.namelist()}
    table: list[str] = []
    for name in [n for n in parts if n.startswith("xl/worksheets/sheet")]:
        root = etree.fromstring(parts[name])
        for c in root.iter(f"{{{main}}}c"):
            if c.get("t") == "inlineStr":
                text = "".join(t.text or "" for t in c.iter(f"{{{main}}}t"))
                c.remove(c.find(f"{{{main}}}is"))
                c.set("t", "s")
                etree.SubElement(c, f"{{{main}}}v").text = str(len(table))
                table.append(text)
        parts[name] = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
    sst = etree.Element(f"{{{main}}}sst", nsmap={None: main})
    for text in table:
        # rich text: two runs, as an app that formats part of a cell saves it
        si = etree.SubElement(sst, f"{{{main}}}si")
        half = len(text) // 2
        for piece in (text[:half], text[half:]):
            etree.SubElement(etree.SubElement(si, f"{{{main}}}r"), f"{{{main}}}t").text = piece
    parts["xl/sharedStrings.xml"] = etree.tostring(sst, xml_declaration=True, encoding="UTF-8")
    ct = parts["[Content_Types].xml"].decode()
    override = (
        '<Override PartName="/xl/sharedStrings.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
    )
    parts["[Content_Types].xml"] = ct.replace("</Types>", override + "</Types>").encode()
    rels = parts["xl/_rels/workbook.xml.rels"].decode()
    rel = (
        '<Relationship Id="rIdShared" Target="sharedStrings.xml" Type="http://schemas.openxmlformats'
        '.org/officeDocument/2006/relationships/sharedStrings"/>'
    )
    parts["xl/_rels/workbook.xml.rels"] = rels.replace("</Relationships>", rel + "</Relationships>").encode()
    with zipfile.ZipFile(path, "w") as z:
        for name, data in parts.items():
            z.writestr(name, data)


def document(path: Path, paragraphs: list[str]) -> str:
    d = docx.Document()
    for p in paragraphs:
        d.add_paragraph(p)
    d.save(path)
    return str(path)


def test_indel_ratio_is_rapidfuzz_ratio():
    # rapidfuzz's documented example, and 200 * LCS / (len + len) = 200 * 20 / 44
    assert indel_ratio("this is a test", "this is a test!") == pytest.approx(96.551724137931)
    assert indel_ratio("fuzzy wuzzy was a bear", "wuzzy fuzzy was a bear") == pytest.approx(90.9090909)
    assert indel_ratio("", "") == 100.0 and indel_ratio("abc", "") == 0.0


# ---- compare_table ---------------------------------------------------------------------------

HEADER = ["Name", "Qty", "Price"]
BOOK = {"Sheet1": [HEADER, ["apple", 3, 1.5], ["pear", 2, 0.25]], "Notes": [["n"], ["x"]]}
# bc2b57f3 (a sheet-per-query workbook): sheet names, then each sheet's data
BC2B57F3 = [
    {"type": "sheet_name"},
    {"type": "sheet_data", "sheet_idx0": "RI0", "sheet_idx1": "EI0"},
    {"type": "sheet_data", "sheet_idx0": "RI1", "sheet_idx1": "EI1"},
]


def test_sheet_names_and_data(tmp_path):
    gold = xlsx(tmp_path / "gold.xlsx", BOOK)
    same = xlsx(tmp_path / "same.xlsx", BOOK)
    assert compare_table(same, gold, rules=BC2B57F3) == 1.0
    close = {**BOOK, "Sheet1": [HEADER, ["apple", 3, 1.50001], ["pear", 2, 0.25]]}  # equal to 4 digits
    assert compare_table(xlsx(tmp_path / "close.xlsx", close), gold, rules=BC2B57F3) == 1.0
    off = {**BOOK, "Sheet1": [HEADER, ["apple", 3, 1.5002], ["pear", 2, 0.25]]}
    assert compare_table(xlsx(tmp_path / "off.xlsx", off), gold, rules=BC2B57F3) == 0.0
    coarse = [{**BC2B57F3[1], "precision": 3}]
    assert compare_table(tmp_path / "off.xlsx", gold, rules=coarse) == 1.0
    renamed = {"Sheet1": BOOK["Sheet1"], "Memo": BOOK["Notes"]}
    assert compare_table(xlsx(tmp_path / "renamed.xlsx", renamed), gold, rules=BC2B57F3) == 0.0
    swapped = {"Notes": BOOK["Notes"], "Sheet1": BOOK["Sheet1"]}  # order matters to sheet_name
    assert compare_table(xlsx(tmp_path / "swapped.xlsx", swapped), gold, rules=BC2B57F3[:1]) == 0.0
    # by name on both sides (3a93cae4; its ignore_case is ignored by OSWorld too), and c7c1e4c3's int index
    by_name = [
        {"type": "sheet_data", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1", "ignore_case": True}
    ]
    assert compare_table(tmp_path / "swapped.xlsx", gold, rules=by_name) == 1.0
    assert compare_table(tmp_path / "swapped.xlsx", gold, rules=[{**BC2B57F3[1], "sheet_idx0": 0}]) == 0.0
    assert compare_table(same, gold, rules=[{**BC2B57F3[1], "sheet_idx0": 0}]) == 1.0
    # as pandas reads sheets: a number saved as text reads as the number; blank cells count
    text = {**BOOK, "Sheet1": [HEADER, ["apple", "3", 1.5], ["pear", 2, 0.25]]}
    assert compare_table(xlsx(tmp_path / "text.xlsx", text), gold, rules=BC2B57F3) == 1.0
    extra = {**BOOK, "Sheet1": [*BOOK["Sheet1"], ["plum", None, None]]}
    assert compare_table(xlsx(tmp_path / "extra.xlsx", extra), gold, rules=BC2B57F3) == 0.0


def test_missing_sheets_and_files_score_zero(tmp_path):
    gold = xlsx(tmp_path / "gold.xlsx", BOOK)
    one = xlsx(tmp_path / "one.xlsx", {"Sheet1": BOOK["Sheet1"]})
    assert compare_table(one, gold, rules=[BC2B57F3[2]]) == 0.0  # RI1: no second sheet
    assert compare_table(one, gold, rules=[{**BC2B57F3[1], "sheet_idx0": "RNSheet9"}]) == 0.0
    assert compare_table(None, gold, rules=BC2B57F3) == 0.0
    (tmp_path / "text.xlsx").write_text("not a workbook")
    assert compare_table(str(tmp_path / "text.xlsx"), gold, rules=BC2B57F3) == 0.0
    with pytest.raises(ValueError, match="rule type 'chart'"):
        compare_table(one, gold, rules=[{"type": "chart", "sheet_idx0": 0, "sheet_idx1": "EI0"}])


D1ACDB87 = d1acdb87_rules("RNSheet1", "ENSheet1")
RESTAURANTS = [
    ["Restaurant Name", "Address", "Contact Number", "Website"],
    ["Ollie's", "123 Main St, Springfield", "(555) 123-4567", "https://ollies.example"],
    ["Casa Bella", "9 Hill Rd, Shelbyville", "(555) 987-6543", "https://bella.example"],
]


def test_sheet_fuzzy_with_d1acdb87s_rules(tmp_path):
    gold = xlsx(tmp_path / "gold.xlsx", {"Sheet1": RESTAURANTS})
    agent = [row[:] for row in RESTAURANTS]
    agent[1][1] = "123 MAIN STREET, Springfield"  # St -> Street, case ignored
    agent[2][1] = "9 Hill Road, Shelbyville"
    agent[1][2] = "+1 555 123 4567"  # "15551234567" includes "5551234567"
    assert compare_table(xlsx(tmp_path / "ok.xlsx", {"Sheet1": agent}), gold, rules=D1ACDB87) == 1.0

    far = [row[:] for row in agent]
    far[2][1] = "456 Oak Avenue, Capital City"
    assert compare_table(xlsx(tmp_path / "far.xlsx", {"Sheet1": far}), gold, rules=D1ACDB87) == 0.0
    phone = [row[:] for row in agent]
    phone[1][2] = "555 123 0000"
    assert compare_table(xlsx(tmp_path / "phone.xlsx", {"Sheet1": phone}), gold, rules=D1ACDB87) == 0.0
    site = [row[:] for row in agent]
    site[2][3] = "https://bella.example/"
    assert compare_table(xlsx(tmp_path / "site.xlsx", {"Sheet1": site}), gold, rules=D1ACDB87) == 0.0
    missing = agent[:2]  # row 3 empty: "None" against the gold's values
    assert compare_table(xlsx(tmp_path / "short.xlsx", {"Sheet1": missing}), gold, rules=D1ACDB87) == 0.0


def test_included_by_and_the_fuzzy_threshold(tmp_path):
    a = xlsx(tmp_path / "a.xlsx", {"Sheet1": [["GPT-4 Turbo"]]})
    b = xlsx(tmp_path / "b.xlsx", {"Sheet1": [["OpenAI GPT-4 Turbo model"]]})
    rule = {"type": "sheet_fuzzy", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1"}
    assert compare_table(a, b, rules=[{**rule, "rules": [{"range": ["A1"], "type": "included_by"}]}]) == 1.0
    assert compare_table(a, b, rules=[{**rule, "rules": [{"range": ["A1"], "type": "includes"}]}]) == 0.0
    # ratio("gpt-4 turbo", "openai gpt-4 turbo model") = 200*11/35 = 62.9
    fuzzy = {"range": ["A1"], "type": "fuzzy_match", "ignore_case": True}
    assert compare_table(a, b, rules=[{**rule, "rules": [{**fuzzy, "threshold": 62}]}]) == 1.0
    assert compare_table(a, b, rules=[{**rule, "rules": [{**fuzzy, "threshold": 63}]}]) == 0.0


# 8e116af7 (bookkeeping): the new rows' amounts checked cell by cell, approx:0.1
def cell_rule(coordinate: str, ref: float) -> dict:
    return {
        "type": "check_cell",
        "sheet_idx": 0,
        "coordinate": coordinate,
        "props": {"value": {"method": "approx:0.1", "ref": ref}},
    }


def test_check_cell_values_with_8e116af7s_rules(tmp_path):
    rows = [["Date", "Item", "Kind", "Amount", "Balance"]] + [[None] * 5] * 7
    rows.append(["2024-01-01", "coffee", "food", -186.95, 603.07])
    book = xlsx(tmp_path / "book.xlsx", {"Sheet1": rows})
    rules = [cell_rule("D9", -186.93), cell_rule("E9", 603.07)]
    assert compare_table(book, book, rules=rules) == 1.0
    assert compare_table(book, book, rules=[cell_rule("D9", -187.1)]) == 0.0
    assert compare_table(book, book, rules=[cell_rule("D10", 0.0)]) == 0.0  # an empty cell: None
    regex = {**cell_rule("B9", 0), "props": {"value": {"method": "re", "ref": "^cof"}}}
    assert compare_table(book, book, rules=[regex]) == 1.0
    style = {**cell_rule("B9", 0), "props": {"font_bold": {"method": "eq", "ref": True}}}
    with pytest.raises(ValueError, match="font_bold"):
        compare_table(book, book, rules=[style])


def test_cell_values_are_read_as_osworld_reads_them(tmp_path):
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    ws["A1"], ws["A2"], ws["A3"], ws["A4"] = 7, "seven", "=A1*2", True
    wb.save(tmp_path / "v.xlsx")
    book = Workbook(str(tmp_path / "v.xlsx"))
    assert book.cell_value("Sheet1", "A2") == "seven"  # an inline string (OSWorld: None)
    assert book.cell_value("Sheet1", "A4") is True  # a boolean (OSWorld: None)
    share_strings(tmp_path / "v.xlsx")
    book = Workbook(str(tmp_path / "v.xlsx"))
    assert book.sheet_names == ["Sheet1"]
    assert book.cell_value("Sheet1", "A1") == 7.0 and isinstance(book.cell_value("Sheet1", "A1"), float)
    assert book.cell_value("Sheet1", "A2") == "seven"  # a shared string, its runs joined
    assert book.cell_value("Sheet1", "A3") is None  # a formula never computed has no saved value
    assert book.cell_value("Sheet1", "Z9") is None
    with pytest.raises(KeyError):
        book.cell_value("Other", "A1")


def test_sheet_print_compares_the_csv_exports_beside_the_files(tmp_path):
    # 881deb30 / 7e287123: postconfig exports Sheet1 to <stem>-Sheet1.csv; vm_file fetches both
    rule = [{"type": "sheet_print", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1"}]
    result = xlsx(tmp_path / "supported_rate.xlsx", {"Sheet1": [["x"]]})
    gold = xlsx(tmp_path / "supported_rate-gt.xlsx", {"Sheet1": [["y"]]})  # the data are not read
    (tmp_path / "supported_rate-gt-Sheet1.csv").write_text("Year,Rate\n2020,0.5\n")
    (tmp_path / "supported_rate-Sheet1.csv").write_text("Year,Rate  \n 2020,0.5\n\n\n")
    assert compare_table(result, gold, rules=rule) == 1.0
    (tmp_path / "supported_rate-Sheet1.csv").write_text("year,rate\n2020,0.5\n")
    assert compare_table(result, gold, rules=rule) == 0.0
    assert compare_table(result, gold, rules=[{**rule[0], "ignore_case": True}]) == 1.0
    (tmp_path / "supported_rate-Sheet1.csv").unlink()
    assert compare_table(result, gold, rules=rule) == 0.0


# ---- compare_docx_files ----------------------------------------------------------------------


def test_docx_default_compares_whitespace_normalised_text(tmp_path):
    gold = document(tmp_path / "gold.docx", ["Title", "First  line of text.", ""])
    # the default (ignore_blanks): paragraph breaks and runs of blanks are one space
    assert compare_docx_files(document(tmp_path / "a.docx", ["Title First line", "of text."]), gold) == 1.0
    assert compare_docx_files(document(tmp_path / "b.docx", ["title", "First line of text."]), gold) == 0.0
    # 1f18aa87's options
    assert compare_docx_files(tmp_path / "b.docx", gold, ignore_case=True, ignore_blanks=True) == 1.0
    # without ignore_blanks: paragraph by paragraph, blanks count
    assert compare_docx_files(tmp_path / "a.docx", gold, ignore_blanks=False) == 0.0
    exact = document(tmp_path / "c.docx", ["Title", "First  line of text.", ""])
    assert compare_docx_files(exact, gold, ignore_blanks=False) == 1.0


def test_docx_order_case_content_and_types(tmp_path):
    gold = document(tmp_path / "gold.docx", ["Paper A: notes", "Paper B: notes"])
    shuffled = document(tmp_path / "s.docx", ["paper b: notes", "paper a: notes"])
    # 236833a3's options
    opts = {"ignore_blanks": True, "ignore_case": True, "ignore_order": True}
    assert compare_docx_files(shuffled, gold, **opts) == 1.0
    assert compare_docx_files(shuffled, gold, **{**opts, "ignore_order": False}) == 0.0
    # content_only (0c825995): the texts' similarity, not 0/1
    near = document(tmp_path / "n.docx", ["Paper A: notes", "Paper B: note"])
    assert compare_docx_files(near, gold, content_only=True) == pytest.approx(
        indel_ratio("Paper A: notes Paper B: note", "Paper A: notes Paper B: notes") / 100
    )
    assert compare_docx_files(None, gold) == 0.0
    (tmp_path / "bad.docx").write_text("not a document")
    assert compare_docx_files(str(tmp_path / "bad.docx"), gold) == 0.0
    (tmp_path / "notes.txt").write_text("Paper A: notes Paper B: notes")
    assert compare_docx_files(str(tmp_path / "notes.txt"), gold) == 0.0  # both must be .docx


def odt(path: Path, body: str) -> str:
    content = (
        '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text>'
        f"{body}</office:text></office:body></office:document-content>"
    )
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        z.writestr("content.xml", content)
    return str(path)


def test_odt_paragraphs_with_spans(tmp_path):
    gold = odt(
        tmp_path / "gold.odt", "<text:p>Hello <text:span>big</text:span> world</text:p><text:p>Bye</text:p>"
    )
    same = odt(tmp_path / "same.odt", "<text:p>Hello big world</text:p><text:p>Bye</text:p>")
    other = odt(tmp_path / "other.odt", "<text:p>Hello small world</text:p><text:p>Bye</text:p>")
    assert compare_docx_files(same, gold, ignore_blanks=False) == 1.0
    assert compare_docx_files(other, gold) == 0.0
    docx_same = document(tmp_path / "same.docx", ["Hello big world", "Bye"])
    assert compare_docx_files(docx_same, gold) == 0.0  # a .docx against an .odt


# ---- check_accessibility_tree ----------------------------------------------------------------

# f5c13cdd (Thunderbird: a message to four addresses): each address is a pill after the To label
F5C13CDD = [
    {
        "selectors": [
            'tool-bar[attr|id=MsgHeadersToolbar] label[name=To]~[attr|class="address-pill"]'
            f'>label[attr|class="pill-label"][name*="{who}@someuniversity.edu"]'
        ]
    }
    for who in ("fox", "iron", "nancy", "stella")
]


def compose_window(addresses: list[str]) -> str:
    pills = "".join(
        f'<box attr:class="address-pill"><label attr:class="pill-label" name="{a}" /></box>'
        for a in addresses
    )
    return (
        f'<desktop-frame xmlns:st="{ST}" xmlns:attr="{ATTR}" name="main"><application name="Thunderbird">'
        '<frame name="Write: (no subject)" st:active="true"><tool-bar attr:id="MsgHeadersToolbar">'
        f'<label name="From" /><label name="To" />{pills}</tool-bar>'
        '<push-button name="Send" st:focused="true">Send</push-button></frame></application></desktop-frame>'
    )


def test_check_accessibility_tree_with_f5c13cdds_selectors():
    four = [f"{w}@someuniversity.edu" for w in ("fox", "iron", "nancy", "stella")]
    assert check_accessibility_tree(compose_window(four), F5C13CDD) == 1.0
    assert check_accessibility_tree(compose_window(four[:3]), F5C13CDD) == 0.0
    # the pills must follow the To label inside MsgHeadersToolbar
    moved = compose_window(four).replace('attr:id="MsgHeadersToolbar"', 'attr:id="Other"')
    assert check_accessibility_tree(moved, F5C13CDD) == 0.0
    assert check_accessibility_tree("", F5C13CDD) == 0.0


def test_check_accessibility_tree_xpath_and_text():
    tree = compose_window(["fox@someuniversity.edu"])
    focused = '//push-button[@st:focused="true"]'
    assert check_accessibility_tree(tree, [{"xpath": focused, "text": "Send"}]) == 1.0
    assert check_accessibility_tree(tree, [{"xpath": focused, "text": "Sent", "exact": True}]) == 0.0
    # fuzzy: indel ratio / 100 ("Send" vs "Sent": 200*3/8 = 75)
    assert check_accessibility_tree(tree, [{"xpath": focused, "text": "Sent", "exact": False}]) == 0.75
    # xpath wins over selectors; scores multiply
    both = {"xpath": focused, "selectors": ["menu"], "text": "Sent", "exact": False}
    assert check_accessibility_tree(tree, [both, both]) == pytest.approx(0.5625)
    assert check_accessibility_tree(tree, [{"selectors": ["menu"]}]) == 0.0
    with pytest.raises(ValueError, match="xpath"):
        check_accessibility_tree(tree, [{"text": "Send"}])


# ---- through the loader and evaluate ---------------------------------------------------------


def run_eval(evaluator: dict, tmp_path: Path) -> tuple[float, dict]:
    ev = load_osworld_task({"id": "t", "instruction": "x", "evaluator": evaluator}, support=DESKTOP).evaluator
    ctx = StepContext(sandbox=None, display=XDisplay(), cache_dir=tmp_path)  # type: ignore[arg-type]
    return asyncio.run(evaluate(ev, ctx, None))


def test_compare_table_and_docx_through_evaluate(tmp_path):
    xlsx(tmp_path / "result.xlsx", {"Sheet1": RESTAURANTS})
    xlsx(tmp_path / "gold.xlsx", {"Sheet1": RESTAURANTS})
    document(tmp_path / "result.docx", ["a", "b"])
    document(tmp_path / "gold.docx", ["a", "c"])
    evaluator = {
        "func": ["compare_table", "compare_docx_files"],
        "result": [
            {"type": "cache_file", "path": "result.xlsx"},
            {"type": "cache_file", "path": "result.docx"},
        ],
        "expected": [
            {"type": "cache_file", "path": "gold.xlsx"},
            {"type": "cache_file", "path": "gold.docx"},
        ],
        "options": [{"rules": D1ACDB87}, {"ignore_blanks": True}],
        "conj": "or",
    }
    score, details = run_eval(evaluator, tmp_path)
    assert score == 1.0 and details["metrics"][0]["score"] == 1.0
    score, details = run_eval({**evaluator, "conj": "and"}, tmp_path)
    assert score == 0.0 and [m["score"] for m in details["metrics"]] == [1.0, 0.0]


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ([{"type": "chart", "sheet_idx0": 0, "sheet_idx1": "EI0"}], "rule type 'chart'"),
        ([{"type": "check_cell", "sheet_idx": 0, "coordinate": "A1", "props": {"bgcolor": {}}}], "bgcolor"),
        (
            [
                {
                    "type": "sheet_fuzzy",
                    "sheet_idx0": 0,
                    "sheet_idx1": "EI0",
                    "rules": [{"range": ["A1"], "type": "regex"}],
                }
            ],
            "'regex'",
        ),
        ([{"type": "sheet_data", "sheet_idx0": "XX0", "sheet_idx1": "EI0"}], "sheet index 'XX0'"),
        ("sheet_data", "list"),
    ],
)
def test_unsupported_compare_table_rules_are_refused_at_load(rules, message):
    evaluator = {
        "func": "compare_table",
        "result": {"type": "vm_file", "path": "/home/user/a.xlsx", "dest": "a.xlsx"},
        "expected": {"type": "cache_file", "path": "gold.xlsx"},
        "options": {"rules": rules},
    }
    with pytest.raises(UnsupportedOSWorldFeature if message != "list" else ValueError, match=message):
        load_osworld_task({"id": "t", "instruction": "x", "evaluator": evaluator}, support=DESKTOP)


def test_cloud_file_gold_comes_from_the_download_cache(tmp_path):
    """881deb30's shape: the result and the gold each a workbook plus its CSV export (`multi`,
    `gives` [0]); the gold's files are read from <cache>/<task id>/<dest>, beside each other."""
    cache, episode = tmp_path / "cache", tmp_path / "episode"
    (cache / "t").mkdir(parents=True)
    episode.mkdir()
    xlsx(cache / "t" / "rate-gt.xlsx", {"Sheet1": [["x"]]})
    (cache / "t" / "rate-gt-Sheet1.csv").write_text("Year,Rate\n2020,0.5\n")
    xlsx(episode / "rate.xlsx", {"Sheet1": [["x"]]})
    (episode / "rate-Sheet1.csv").write_text("Year,Rate\n2020,0.5\n")
    evaluator = {
        "func": "compare_table",
        "result": {"type": "cache_file", "path": "rate.xlsx"},
        "expected": {
            "type": "cloud_file",
            "path": ["https://drive.example/1", "https://drive.example/2"],
            "dest": ["rate-gt.xlsx", "rate-gt-Sheet1.csv"],
            "multi": True,
        },
        "options": {"rules": [{"type": "sheet_print", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1"}]},
    }
    task = load_osworld_task(
        {"id": "t", "instruction": "x", "evaluator": evaluator}, download_cache=cache, support=DESKTOP
    )
    ctx = StepContext(
        sandbox=None, display=XDisplay(), cache_dir=episode, task_id="t", download_cache=str(cache)
    )  # type: ignore[arg-type]
    score, details = asyncio.run(evaluate(task.evaluator, ctx, None))
    assert score == 1.0, details
    assert (episode / "rate-gt-Sheet1.csv").is_file()  # copied beside the gold workbook
    (episode / "rate-Sheet1.csv").write_text("Year,Rate\n2020,0.7\n")
    assert asyncio.run(evaluate(task.evaluator, ctx, None))[0] == 0.0
    (cache / "t" / "rate-gt.xlsx").unlink()  # gone since the load: None, and a file metric scores 0
    assert asyncio.run(evaluate(task.evaluator, ctx, None))[0] == 0.0


def bomb(path: Path, source: str, part: str, mib: int = 300) -> str:
    """`source` with `part` padded by `mib` MiB of blanks after its root element (still valid
    XML; a few hundred KiB zipped)."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for item in src.infolist():
            if item.filename != part:
                out.writestr(item, src.read(item))
        with out.open(part, "w", force_zip64=True) as f:
            f.write(src.read(part))
            chunk = b" " * 2**20
            for _ in range(mib):
                f.write(chunk)
    return str(path)


def test_a_zip_bomb_from_the_sandbox_scores_zero_without_being_inflated(tmp_path):
    """The agent writes the files these metrics read: one whose parts inflate past the limit is
    refused from its directory alone (a workbook read from a bomb would take GiBs of memory)."""
    import resource

    gold = xlsx(tmp_path / "gold.xlsx", BOOK)
    assert compare_table(xlsx(tmp_path / "same.xlsx", BOOK), gold, rules=BC2B57F3) == 1.0
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sheet = Workbook(gold).parts["Sheet1"]
    assert compare_table(bomb(tmp_path / "bomb.xlsx", gold, sheet), gold, rules=BC2B57F3) == 0.0
    doc = document(tmp_path / "gold.docx", ["Title"])
    assert compare_docx_files(bomb(tmp_path / "bomb.docx", doc, "word/document.xml"), doc) == 0.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KiB
