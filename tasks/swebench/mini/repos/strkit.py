"""strkit: string helpers with a slugify, a truncate and a case-conversion bug."""

from __future__ import annotations

from . import Bug, Repo

# ---- strkit ------------------------------------------------------------------------------
STRKIT = Repo(
    name="arborl-mini/strkit",
    version="0.1",
    summary="Small string helpers: slugs, truncation, word wrapping, case conversion.",
    files={
        "strkit/__init__.py": '"""strkit: small string helpers."""\n\n'
        "from .case import camel_to_snake, snake_to_camel\n"
        "from .text import slugify, truncate, wrap_words\n\n"
        '__all__ = ["camel_to_snake", "slugify", "snake_to_camel", "truncate", "wrap_words"]\n',
        "strkit/text.py": '"""Text helpers: slugs, truncation, word wrapping."""\n\nimport re\n\n'
        "@@slugify:1@@\n\n\n"
        'def slugify(text: str, sep: str = "-") -> str:\n'
        '    """Lower-case `text` and join its words with `sep`: \'Hello, World!\' -> \'hello-world\'."""\n'
        "    slug = _NON_ALNUM.sub(sep, text.lower())\n"
        "@@slugify:2@@\n\n\n"
        'def truncate(text: str, width: int, suffix: str = "...") -> str:\n'
        '    """`text` cut to at most `width` characters, ending in `suffix` when it is cut."""\n'
        "    if width < len(suffix):\n"
        '        raise ValueError("width must leave room for the suffix")\n'
        "    if len(text) <= width:\n"
        "        return text\n"
        "@@truncate:1@@\n\n\n"
        "def wrap_words(text: str, width: int) -> list[str]:\n"
        '    """Greedy word wrap: lines of at most `width` characters (longer words stand alone)."""\n'
        '    lines, line = [], ""\n'
        "    for word in text.split():\n"
        "        if line and len(line) + 1 + len(word) > width:\n"
        "            lines.append(line)\n"
        "            line = word\n"
        "        else:\n"
        '            line = f"{line} {word}" if line else word\n'
        "    if line:\n"
        "        lines.append(line)\n"
        "    return lines\n",
        "strkit/case.py": '"""Identifier case conversion."""\n\nimport re\n\n'
        "@@acronyms:1@@\n\n\n"
        "def camel_to_snake(name: str) -> str:\n"
        '    """\'parseHttpRequest\' -> \'parse_http_request\'."""\n'
        '    return _BOUNDARY.sub("_", name).lower()\n\n\n'
        "def snake_to_camel(name: str) -> str:\n"
        '    """\'parse_http_request\' -> \'parseHttpRequest\'."""\n'
        '    first, *rest = name.split("_")\n'
        '    return first + "".join(part.title() for part in rest)\n',
    },
    tests={
        "tests/test_text.py": "import pytest\n\nfrom strkit import slugify, truncate, wrap_words\n\n\n"
        "def test_slugify_simple():\n"
        '    assert slugify("hello world") == "hello-world"\n\n\n'
        "def test_slugify_lowercases_and_custom_sep():\n"
        '    assert slugify("Big Data", sep="_") == "big_data"\n\n\n'
        "def test_truncate_short_text_is_unchanged():\n"
        '    assert truncate("short", 10) == "short"\n\n\n'
        "def test_truncate_needs_room_for_suffix():\n"
        "    with pytest.raises(ValueError):\n"
        '        truncate("abcdef", 2)\n\n\n'
        "def test_wrap_words():\n"
        '    assert wrap_words("the quick brown fox", 10) == ["the quick", "brown fox"]\n',
        "tests/test_case.py": "from strkit import camel_to_snake, snake_to_camel\n\n\n"
        "def test_camel_to_snake_simple():\n"
        '    assert camel_to_snake("parseHttpRequest") == "parse_http_request"\n\n\n'
        "def test_snake_to_camel():\n"
        '    assert snake_to_camel("parse_http_request") == "parseHttpRequest"\n',
    },
    bugs=(
        Bug(
            id="slugify",
            title="Fix slugify: collapse separator runs and strip them from the ends",
            problem_statement="`strkit.slugify` leaves repeated and dangling separators.\n\n"
            "```python\n>>> slugify('Hello, World')\n'hello--world'\n>>> slugify('  Hi there! ')\n"
            "'--hi-there--'\n```\n\nExpected `'hello-world'` and `'hi-there'`: a run of characters "
            "that are not letters or digits should become one separator, and the slug should not "
            "start or end with one.",
            changes=(
                (
                    "slugify:1",
                    '_NON_ALNUM = re.compile(r"[^a-z0-9]")\n',
                    '_NON_ALNUM = re.compile(r"[^a-z0-9]+")\n',
                ),
                ("slugify:2", "    return slug\n", "    return slug.strip(sep)\n"),
            ),
            test_file="tests/test_text.py",
            tests="\n\ndef test_slugify_collapses_punctuation():\n"
            '    assert slugify("Hello, World") == "hello-world"\n\n\n'
            "def test_slugify_strips_edges():\n"
            '    assert slugify("  Hi there! ") == "hi-there"\n',
        ),
        Bug(
            id="truncate",
            title="Fix truncate: count the suffix in the width",
            problem_statement="`strkit.truncate(text, width)` returns strings longer than `width` "
            "when it cuts them:\n\n```python\n>>> truncate('hello world', 8)\n'hello wo...'\n```\n\n"
            "That is 11 characters. The result, suffix included, must be at most `width` "
            "characters (`'hello...'` here).",
            changes=(
                (
                    "truncate:1",
                    "    return text[:width] + suffix\n",
                    "    return text[: width - len(suffix)] + suffix\n",
                ),
            ),
            test_file="tests/test_text.py",
            tests="\n\ndef test_truncate_counts_the_suffix():\n"
            '    assert truncate("hello world", 8) == "hello..."\n\n\n'
            "def test_truncate_length_is_width():\n"
            '    assert len(truncate("a" * 50, 10)) == 10\n',
            docs_note="Use `truncate` for previews and `wrap_words` for fixed-width output.",
        ),
        Bug(
            id="acronyms",
            title="Fix camel_to_snake for acronyms",
            problem_statement="`camel_to_snake` splits acronyms into letters:\n\n```python\n"
            ">>> camel_to_snake('HTTPServer')\n'h_t_t_p_server'\n```\n\nExpected `'http_server'` "
            "(and `'get_http_response'` for `'getHTTPResponse'`). A run of capitals is one word; "
            "a new word starts at a capital that follows a lower-case letter or digit, or at the "
            "last capital of a run when a lower-case letter follows it.",
            changes=(
                (
                    "acronyms:1",
                    '_BOUNDARY = re.compile(r"(?<=.)(?=[A-Z])")\n',
                    '_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")\n',
                ),
            ),
            test_file="tests/test_case.py",
            tests="\n\ndef test_camel_to_snake_acronyms():\n"
            '    assert camel_to_snake("HTTPServer") == "http_server"\n'
            '    assert camel_to_snake("getHTTPResponse") == "get_http_response"\n',
        ),
    ),
)
