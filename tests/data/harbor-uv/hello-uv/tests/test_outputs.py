from pathlib import Path

import pytest


def test_greeting_exists():
    assert Path("/app/greeting.txt").is_file()


def test_greeting_content():
    assert Path("/app/greeting.txt").read_text().strip() == "Hello from uv!"


def test_pytest_is_the_pinned_one():
    # uvx ran the tests with the version the script pins, not the image's own pytest
    assert pytest.__version__ == "8.4.1"
