"""Where the built-in SWE-bench suites keep their repositories (git bundles), searched after
the directories a user names."""

from __future__ import annotations

from . import mini, real

BUILTIN_REPOS = (mini.REPOS, real.REPOS)
