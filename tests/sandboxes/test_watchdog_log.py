"""The watchdog has no terminal: what it reaped, and a reap that failed every try, are lines of
its log file, so a failure is never silent."""

from __future__ import annotations

import pytest

from arborl.sandboxes import factory
from arborl.sandboxes.ray import watchdog


class Backend:
    def __init__(self, fails: int) -> None:
        self.fails = fails

    def reap(self) -> None:
        if self.fails:
            self.fails -= 1
            raise ConnectionError("the engine is busy")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARBORL_CACHE", str(tmp_path))
    monkeypatch.setattr(watchdog.time, "sleep", lambda s: None)
    return tmp_path


def test_a_reap_that_fails_every_try_is_logged_with_its_error(cache, monkeypatch):
    monkeypatch.setattr(factory, "make_backend", lambda cfg: Backend(fails=99))
    assert watchdog.reap({"pid": 4242, "backend": {"type": "docker"}}) is False
    text = (cache / "watchdog.log").read_text()
    assert text.count("reaping docker sandboxes failed") == 3 and "ConnectionError: the engine is busy" in text
    assert "gave up" in text and "arborl sandbox gc" in text


def test_a_reap_that_succeeds_on_a_later_try_is_logged_too(cache, monkeypatch):
    backend = Backend(fails=1)
    monkeypatch.setattr(factory, "make_backend", lambda cfg: backend)
    assert watchdog.reap({"pid": 4242, "backend": {"type": "bwrap"}}) is True
    lines = (cache / "watchdog.log").read_text().splitlines()
    assert len(lines) == 2 and "failed (try 1 of 3)" in lines[0] and "reaped" in lines[1]
