"""intervals: closed intervals with overlap and merge bugs."""

from __future__ import annotations

from . import Bug, Repo

# ---- intervals ---------------------------------------------------------------------------
INTERVALS = Repo(
    name="arborl-mini/intervals",
    version="1.0",
    summary="Closed numeric intervals: overlap tests, merging, total length.",
    files={
        "intervals/__init__.py": '"""intervals: closed numeric intervals."""\n\n'
        "from .interval import Interval\nfrom .ops import merge, total_length\n\n"
        '__all__ = ["Interval", "merge", "total_length"]\n',
        "intervals/interval.py": '"""A closed interval [start, end]."""\n\nfrom dataclasses import dataclass\n\n\n'
        "@dataclass(frozen=True, order=True)\n"
        "class Interval:\n"
        "    start: float\n"
        "    end: float\n\n"
        "    def __post_init__(self):\n"
        "        if self.end < self.start:\n"
        '            raise ValueError(f"interval end {self.end} is before its start {self.start}")\n\n'
        "    @property\n"
        "    def length(self):\n"
        "        return self.end - self.start\n\n"
        "    def contains(self, x):\n"
        "        return self.start <= x <= self.end\n\n"
        "    def overlaps(self, other):\n"
        '        """Whether the two intervals share at least one point."""\n'
        "@@overlaps:1@@\n",
        "intervals/ops.py": '"""Operations on collections of intervals."""\n\nfrom .interval import Interval\n\n\n'
        "def merge(intervals):\n"
        '    """Merge overlapping or touching intervals; the result is sorted by start."""\n'
        "    out = []\n"
        "@@unsorted:1@@\n"
        "@@touching:1@@\n"
        "            out[-1] = Interval(out[-1].start, max(out[-1].end, iv.end))\n"
        "        else:\n"
        "            out.append(iv)\n"
        "    return out\n\n\n"
        "def total_length(intervals):\n"
        '    """Length of the union of the intervals."""\n'
        "    return sum(iv.length for iv in merge(intervals))\n",
    },
    tests={
        "tests/test_interval.py": "import pytest\n\nfrom intervals import Interval\n\n\n"
        "def test_length_and_contains():\n"
        "    iv = Interval(1, 4)\n    assert iv.length == 3 and iv.contains(4) and not iv.contains(5)\n\n\n"
        "def test_rejects_reversed():\n    with pytest.raises(ValueError):\n        Interval(3, 1)\n\n\n"
        "def test_partial_overlap():\n    assert Interval(1, 5).overlaps(Interval(4, 8))\n\n\n"
        "def test_disjoint():\n    assert not Interval(1, 2).overlaps(Interval(3, 4))\n",
        "tests/test_ops.py": "from intervals import Interval, merge, total_length\n\n\n"
        "def test_merge_overlapping():\n"
        "    assert merge([Interval(1, 3), Interval(2, 4)]) == [Interval(1, 4)]\n\n\n"
        "def test_merge_keeps_disjoint():\n"
        "    assert merge([Interval(1, 2), Interval(5, 6)]) == [Interval(1, 2), Interval(5, 6)]\n\n\n"
        "def test_total_length():\n"
        "    assert total_length([Interval(0, 2), Interval(1, 3), Interval(10, 11)]) == 4\n",
    },
    bugs=(
        Bug(
            id="overlaps",
            title="Fix Interval.overlaps when one interval contains the other",
            problem_statement="`Interval(2, 3).overlaps(Interval(1, 10))` returns `False`, although "
            "[2, 3] lies inside [1, 10]. `overlaps` only checks whether an endpoint of the other "
            "interval falls inside this one. It should be true whenever the intervals share a "
            "point, in both directions.",
            changes=(
                (
                    "overlaps:1",
                    "        return self.start <= other.start <= self.end or self.start <= other.end <= self.end\n",
                    "        return self.start <= other.end and other.start <= self.end\n",
                ),
            ),
            test_file="tests/test_interval.py",
            tests="\n\ndef test_overlap_by_containment():\n"
            "    assert Interval(2, 3).overlaps(Interval(1, 10))\n"
            "    assert Interval(1, 10).overlaps(Interval(2, 3))\n",
        ),
        Bug(
            id="touching",
            title="merge: merge intervals that touch",
            problem_statement="`merge([Interval(1, 3), Interval(3, 5)])` returns both intervals "
            "unchanged. They are closed intervals sharing the point 3, so the result should be "
            "`[Interval(1, 5)]` (the docstring says touching intervals are merged).",
            changes=(
                (
                    "touching:1",
                    "        if out and iv.start < out[-1].end:\n",
                    "        if out and iv.start <= out[-1].end:\n",
                ),
            ),
            test_file="tests/test_ops.py",
            tests="\n\ndef test_merge_touching():\n"
            "    assert merge([Interval(1, 3), Interval(3, 5)]) == [Interval(1, 5)]\n",
            docs_note="Intervals are closed: [1, 3] and [3, 5] share the point 3.",
        ),
        Bug(
            id="unsorted",
            title="merge: sort the input first",
            problem_statement="`merge` gives wrong results when the intervals are not given in "
            "order of their start:\n\n```python\n>>> merge([Interval(5, 6), Interval(1, 2)])\n"
            "[Interval(start=5, end=6)]\n```\n\nExpected `[Interval(1, 2), Interval(5, 6)]`. "
            "The input may come in any order.",
            changes=(("unsorted:1", "    for iv in intervals:\n", "    for iv in sorted(intervals):\n"),),
            test_file="tests/test_ops.py",
            tests="\n\ndef test_merge_unsorted_disjoint():\n"
            "    assert merge([Interval(5, 6), Interval(1, 2)]) == [Interval(1, 2), Interval(5, 6)]\n\n\n"
            "def test_merge_unsorted_overlapping():\n"
            "    assert merge([Interval(4, 6), Interval(1, 5)]) == [Interval(1, 6)]\n",
        ),
    ),
)
