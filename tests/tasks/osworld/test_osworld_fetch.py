"""The download cache of OSWorld tasks: filled from a server the test starts on loopback (no
outside traffic), laid out as OSWorld's own cache, and what the loader requires of a task
with `download` steps."""

from __future__ import annotations

import functools
import http.server
import json
import threading
import uuid

import pytest

from arborl.tasks.osworld import (
    UnsupportedOSWorldFeature,
    cached_cloud_file,
    cached_download,
    load_osworld_task,
)
from arborl.tasks.osworld.fetch import fetch, main


@pytest.fixture
def server(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "setup.sh").write_text("#!/bin/sh\nmkdir -p ~/dir1\n")
    (site / "eval.sh").write_text("echo ok\n")
    (site / "gold.csv").write_text("a,b\n")
    (site / "gold-Sheet1.csv").write_text("a\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _task(base: str) -> dict:
    return {
        "id": "t-download",
        "instruction": "do it",
        "config": [
            {"type": "download", "parameters": {"files": [{"url": f"{base}/setup.sh", "path": "setup.sh"}]}},
            {"type": "execute", "parameters": {"command": "chmod +x setup.sh", "shell": True}},
        ],
        "evaluator": {
            "postconfig": [
                {"type": "download", "parameters": {"files": [{"url": f"{base}/eval.sh", "path": "eval.sh"}]}}
            ],
            "func": "check_include_exclude",
            "result": {"type": "vm_command_line", "command": "bash eval.sh", "shell": True},
            "expected": {"type": "rule", "rules": {"include": ["ok"], "exclude": []}},
        },
    }


def test_fetch_fills_osworld_s_cache_layout_and_the_task_then_loads(server, tmp_path):
    tasks, cache = tmp_path / "tasks", tmp_path / "cache"
    tasks.mkdir()
    (tasks / "t.json").write_text(json.dumps(_task(server)))
    with pytest.raises(UnsupportedOSWorldFeature, match="not in the download cache"):
        load_osworld_task(tasks / "t.json", download_cache=cache)

    assert fetch([tasks], cache) == {"fetched": 2, "cached": 0, "failed": 0}
    # OSWorld's SetupController names: cache/<task id>/<uuid5(URL)>_<basename(path)>
    url = f"{server}/setup.sh"
    want = cache / "t-download" / f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_setup.sh"
    assert cached_download(cache, "t-download", url, "setup.sh") == want
    assert want.read_text().startswith("#!/bin/sh")
    task = load_osworld_task(tasks / "t.json", download_cache=cache)
    assert [s.type for s in task.config] == ["download", "execute"] and task.download_cache == str(cache)

    assert fetch([tasks / "t.json"], cache) == {"fetched": 0, "cached": 2, "failed": 0}


def test_a_url_that_fails_is_counted_and_leaves_no_file(server, tmp_path, monkeypatch, capsys):
    task = _task(server)
    task["config"][0]["parameters"]["files"][0]["url"] = f"{server}/missing.sh"
    (tmp_path / "t.json").write_text(json.dumps(task))
    monkeypatch.setenv("ARBORL_OSWORLD_CACHE", str(tmp_path / "cache"))
    assert main([str(tmp_path / "t.json")]) == 1
    assert "fetched 1, cached 0, failed 1" in capsys.readouterr().out
    assert not list((tmp_path / "cache" / "t-download").glob("*setup.sh*"))
    with pytest.raises(UnsupportedOSWorldFeature, match=r"setup\.sh is not in the download cache"):
        load_osworld_task(tmp_path / "t.json")  # the cache named by ARBORL_OSWORLD_CACHE


def test_cloud_file_getters_are_fetched_as_osworld_caches_them(server, tmp_path):
    """OSWorld's `cloud_file` getter keeps its file as <cache>/<task id>/<dest>."""
    task = {
        "id": "t-cloud",
        "instruction": "do it",
        "evaluator": {
            "func": ["compare_csv", "compare_table"],
            "result": [
                {"type": "vm_file", "path": "/home/user/a.csv", "dest": "a.csv"},
                {"type": "vm_file", "path": "/home/user/a.xlsx", "dest": "a.xlsx"},
            ],
            "expected": [
                {"type": "cloud_file", "path": f"{server}/gold.csv", "dest": "gold.csv"},
                {
                    "type": "cloud_file",
                    "path": [f"{server}/gold.csv", f"{server}/gold-Sheet1.csv"],
                    "dest": ["gold.xlsx", "gold-Sheet1.csv"],
                    "multi": True,
                },
            ],
            "options": [
                {},
                {"rules": [{"type": "sheet_print", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1"}]},
            ],
        },
    }
    cache = tmp_path / "cache"
    (tmp_path / "t.json").write_text(json.dumps(task))
    with pytest.raises(
        UnsupportedOSWorldFeature, match=r"cloud_file: gold\.csv is not in the download cache"
    ):
        load_osworld_task(tmp_path / "t.json", download_cache=cache)
    assert fetch([tmp_path / "t.json"], cache) == {"fetched": 3, "cached": 0, "failed": 0}
    assert cached_cloud_file(cache, "t-cloud", "gold-Sheet1.csv") == cache / "t-cloud" / "gold-Sheet1.csv"
    assert (cache / "t-cloud" / "gold-Sheet1.csv").read_text() == "a\n"
    assert (cache / "t-cloud" / "gold.xlsx").read_text() == "a,b\n"
    load_osworld_task(tmp_path / "t.json", download_cache=cache)
    assert fetch([tmp_path / "t.json"], cache) == {"fetched": 0, "cached": 3, "failed": 0}
