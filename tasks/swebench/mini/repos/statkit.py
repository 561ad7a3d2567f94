"""statkit: descriptive statistics with median, variance and percentile bugs."""

from __future__ import annotations

from . import Bug, Repo

# ---- statkit -----------------------------------------------------------------------------
STATKIT = Repo(
    name="arborl-mini/statkit",
    version="0.3",
    summary="Descriptive statistics without dependencies.",
    files={
        "statkit/__init__.py": '"""statkit: descriptive statistics."""\n\n'
        "from .central import StatisticsError, mean, median, mode\n"
        "from .spread import percentile, stdev, variance\n\n"
        '__all__ = ["StatisticsError", "mean", "median", "mode", "percentile", "stdev", "variance"]\n',
        "statkit/central.py": '"""Measures of central tendency."""\n\nfrom collections import Counter\n\n\n'
        "class StatisticsError(ValueError):\n"
        '    """The data does not allow the statistic (e.g. it is empty)."""\n\n\n'
        "def mean(data):\n"
        "    data = list(data)\n"
        "    if not data:\n"
        '        raise StatisticsError("mean of empty data")\n'
        "    return sum(data) / len(data)\n\n\n"
        "def median(data):\n"
        "    data = sorted(data)\n"
        "    if not data:\n"
        '        raise StatisticsError("median of empty data")\n'
        "    mid = len(data) // 2\n"
        "@@median:1@@\n\n\n"
        "def mode(data):\n"
        '    """The most common value; the smallest one on ties."""\n'
        "    counts = Counter(data)\n"
        "    if not counts:\n"
        '        raise StatisticsError("mode of empty data")\n'
        "    top = max(counts.values())\n"
        "    return min(v for v, c in counts.items() if c == top)\n",
        "statkit/spread.py": '"""Measures of spread."""\n\nimport math\n\nfrom .central import StatisticsError, mean\n\n\n'
        "def variance(data, sample=True):\n"
        '    """Sample variance (divides by n - 1), or population variance with sample=False."""\n'
        "    data = list(data)\n"
        "    n = len(data)\n"
        "    if n < (2 if sample else 1):\n"
        '        raise StatisticsError("variance needs more data points")\n'
        "    m = mean(data)\n"
        "    ss = sum((x - m) ** 2 for x in data)\n"
        "@@variance:1@@\n\n\n"
        "def stdev(data, sample=True):\n"
        "    return math.sqrt(variance(data, sample))\n\n\n"
        "def percentile(data, q):\n"
        '    """The q-th percentile (0 <= q <= 100), interpolating linearly between ranks."""\n'
        "    if not 0 <= q <= 100:\n"
        '        raise ValueError("q must be between 0 and 100")\n'
        "    data = sorted(data)\n"
        "    if not data:\n"
        '        raise StatisticsError("percentile of empty data")\n'
        "    pos = (len(data) - 1) * q / 100\n"
        "    lo = int(pos)\n"
        "@@percentile:1@@\n"
        "    return data[lo] + (data[hi] - data[lo]) * (pos - lo)\n",
    },
    tests={
        "tests/test_central.py": "import pytest\n\nfrom statkit import StatisticsError, mean, median, mode\n\n\n"
        "def test_mean():\n    assert mean([1, 2, 3, 4]) == 2.5\n\n\n"
        "def test_median_odd():\n    assert median([3, 1, 2]) == 2\n\n\n"
        "def test_mode_prefers_smallest_on_ties():\n    assert mode([3, 1, 3, 1, 2]) == 1\n\n\n"
        "def test_empty_data_is_an_error():\n"
        "    with pytest.raises(StatisticsError):\n        median([])\n",
        "tests/test_spread.py": "import math\n\nfrom statkit import percentile, stdev, variance\n\n\n"
        "def test_variance_of_constant_data_is_zero():\n    assert variance([2, 2, 2]) == 0\n\n\n"
        "def test_population_variance():\n    assert variance([1, 2, 3, 4], sample=False) == 1.25\n\n\n"
        "def test_stdev_of_constant_data():\n    assert stdev([5, 5, 5]) == 0\n\n\n"
        "def test_percentile_median():\n    assert percentile([1, 2, 3, 4, 5], 50) == 3\n\n\n"
        "def test_percentile_interpolates():\n    assert math.isclose(percentile([10, 20], 25), 12.5)\n",
    },
    bugs=(
        Bug(
            id="median",
            title="Fix median of an even number of values",
            problem_statement="`statkit.median` is wrong for an even number of values: "
            "`median([1, 2, 3, 4])` returns `3`, but the median is the mean of the two middle "
            "values, `2.5`. Odd-length data is fine.",
            changes=(
                (
                    "median:1",
                    "    return data[mid]\n",
                    "    if len(data) % 2:\n        return data[mid]\n"
                    "    return (data[mid - 1] + data[mid]) / 2\n",
                ),
            ),
            test_file="tests/test_central.py",
            tests="\n\ndef test_median_even():\n    assert median([1, 2, 3, 4]) == 2.5\n"
            "    assert median([4, 1]) == 2.5\n",
        ),
        Bug(
            id="variance",
            title="Fix sample variance: divide by n - 1",
            problem_statement="`variance(data)` is documented as the sample variance (dividing by "
            "n - 1) but divides by n: `variance([1, 2, 3, 4])` gives `1.25` instead of `1.666...`. "
            "`stdev` inherits the error. `variance(data, sample=False)` (population) is right.",
            changes=(("variance:1", "    return ss / n\n", "    return ss / (n - 1 if sample else n)\n"),),
            test_file="tests/test_spread.py",
            tests="\n\ndef test_sample_variance():\n    assert math.isclose(variance([1, 2, 3, 4]), 5 / 3)\n\n\n"
            "def test_sample_stdev():\n    assert math.isclose(stdev([2, 4, 4, 4, 5, 5, 7, 9]), math.sqrt(32 / 7))\n",
            docs_note="`variance` and `stdev` default to the sample statistics.",
        ),
        Bug(
            id="percentile",
            title="Fix percentile at the top rank and for single values",
            problem_statement="`percentile` raises `IndexError: list index out of range` for "
            "`percentile([1, 2, 3], 100)` and for any q with a single data point "
            "(`percentile([7], 50)`). Both should return the value at that rank (3 and 7).",
            changes=(("percentile:1", "    hi = lo + 1\n", "    hi = min(lo + 1, len(data) - 1)\n"),),
            test_file="tests/test_spread.py",
            tests="\n\ndef test_percentile_top_rank():\n    assert percentile([1, 2, 3], 100) == 3\n\n\n"
            "def test_percentile_single_value():\n    assert percentile([7], 50) == 7\n",
        ),
    ),
)
