"""What a test.sh needs of uv, read from the forms Terminal-Bench 2's and its adaptations'
tests take (the scripts below follow them: the installer piped to sh, `uvx` with `-w` /
`--with` / `--with=`, continuation lines, `if uvx ...; then`, `python -m pytest` as the tool,
a uv project made with `uv init` / `uv add`, a venv with `uv pip install`)."""

from __future__ import annotations

import pytest

from arborl.tasks.harbor.uv_plan import UvPlan, plan_uv

INSTALL = "apt-get update\napt-get install -y curl\ncurl -LsSf https://astral.sh/uv/0.9.7/install.sh | sh\n"
CASES = {
    "uvx-continued": (
        INSTALL + "source $HOME/.local/bin/env\n"
        "uvx \\\n  -p 3.13 \\\n  -w pytest==8.4.1 \\\n  -w pytest-json-ctrf==0.3.5 \\\n"
        "  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA\n",
        UvPlan(True, "0.9.7", ("pytest==8.4.1", "pytest-json-ctrf==0.3.5")),
    ),
    "if-uvx-with": (
        "curl -LsSf https://astral.sh/uv/install.sh | sh\nsource $HOME/.local/bin/env\n"
        "if uvx -p 3.13 --with pytest==8.4.1 --with=pytest-json-ctrf==0.3.5 pytest /tests -rA; then\n"
        "  echo 1 > /logs/verifier/reward.txt\nfi\n",
        UvPlan(True, "", ("pytest==8.4.1", "pytest-json-ctrf==0.3.5")),
    ),
    "python-as-the-tool": (
        INSTALL
        + "uvx -p 3.13 --with pytest==8.4.1 python -m pytest /tests/test_outputs.py -p no:cacheprovider\n",
        UvPlan(True, "0.9.7", ("pytest==8.4.1",)),
    ),
    "bare-tool-and-comment": (
        INSTALL + "uvx --with requests==2.32.3 pytest /tests  # run them\n",
        UvPlan(True, "0.9.7", ("requests==2.32.3", "pytest")),
    ),
    "project": (
        INSTALL
        + "uv init\nuv add pytest==8.4.1 pytest-json-ctrf==0.3.5\nuv run pytest /tests/test_outputs.py -rA\n",
        UvPlan(True, "0.9.7", ("pytest==8.4.1", "pytest-json-ctrf==0.3.5"), project=True),
    ),
    "venv-and-pip": (
        INSTALL + "uv venv .tbench-testing && source .tbench-testing/bin/activate\n"
        "uv pip install -r /tests/requirements.txt pytest==8.3.4 numpy==2.2.1\npytest /tests\n",
        UvPlan(True, "0.9.7", ("pytest==8.3.4", "numpy==2.2.1")),
    ),
    "no-uv": ("python3 -m pytest -q /tests/test_outputs.py\necho 1 > /logs/verifier/reward.txt\n", UvPlan()),
}


@pytest.mark.parametrize("name", list(CASES))
def test_plan(name):
    script, expected = CASES[name]
    assert plan_uv(script) == expected


def test_an_unclosed_quote_is_skipped_not_raised():
    assert plan_uv("echo 'oops\nuvx -w pytest==8.4.1 pytest\n").requirements == ("pytest==8.4.1",)
