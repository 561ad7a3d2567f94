"""Test data, not tests: the Harbor example tasks' own tests (tests/data/harbor*/*/tests/) run
inside their task's sandbox, never on the host."""

collect_ignore_glob = ["harbor/*", "harbor-uv/*"]
