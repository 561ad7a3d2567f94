"""scripts/osworld_loads.py, the tally behind docs/desktop.md's load counts, on the copies of
OSWorld's `os` tasks in data/: 13 of 24 load with an empty download cache, 21 with a full one
(placeholders; the other 3 need the agent to be root), and the refusals are counted by their
first reason."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).with_name("data")


@pytest.fixture(scope="module")
def osworld_loads():
    spec = importlib.util.spec_from_file_location("osworld_loads", ROOT / "scripts" / "osworld_loads.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_os_domain_counts(osworld_loads, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("ARBORL_OSWORLD_CACHE", str(tmp_path / "empty"))  # not the user's cache
    assert osworld_loads.main([str(DATA / "osworld-os")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("13 of 24 load\n")
    assert "    8  download not in the cache" in out and "    3  needs the agent to be root" in out

    assert osworld_loads.main([str(DATA / "osworld-os"), "--assume-cached"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("21 of 24 load (download cache assumed full)\n")
    assert "    3  needs the agent to be root" in out


def test_refusals_are_named_by_their_first_reason(osworld_loads):
    category = osworld_loads.category
    assert category(
        "t: config.0: launch: 'google-chrome' is not installed in the desktop image; use chromium; x"
    ) == ("launch google-chrome (not in the image)")
    assert (
        category("t: evaluator: metric 'compare_pdfs' is not supported by the desktop env")
        == "metric compare_pdfs"
    )
    assert category("t: config.1: open: no application for '.pptx' files (/a.pptx)") == "open of .pptx files"
    assert category("t: evaluator.expected.0: cloud_file: a.xlsx is not in the download cache (/c)") == (
        "cloud_file not in the cache"
    )
    assert category("t: task 't' needs the agent to be root: it asks for a new user") == (
        "needs the agent to be root"
    )
