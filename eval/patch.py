"""Extract the model patch (`git diff` of the episode's repository) from a code env.

The patch has to be read while the episode's sandbox is still leased: once the episode ends
the sandbox goes back to its pool and is reset in place. The code env scores an episode in
one method, `verify()`, called by the `submit` tool and when a budget ends the episode
(`afinish`), so `RecordPatch` wraps that method on the env it wraps: before the verifier
writes its hidden test files and runs, the working tree is diffed against the commit the
episode started from, and the patch comes back in the scoring step's info as
`info["model_patch"]` (`info["model_patch_error"]` if it could not be read).

The diff goes through a temporary index, so the agent's own index is untouched; untracked
files are included (a new module is part of a fix), caches and the verifier's directory
are not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import gymnasium

from arborl.envs import AsyncWrapper
from arborl.envs.code import CodeEnv

MAX_PATCH_BYTES = 8 * 1024 * 1024
_DIFF = r"""idx=/tmp/.arborl-patch-index.$$
rm -f "$idx"; [ -f .git/index ] && cp .git/index "$idx"
export GIT_INDEX_FILE="$idx"
git add -A -- . ':(exclude).arborl' ':(exclude,glob)**/__pycache__/**' ':(exclude,glob)**/*.pyc' \
  ':(exclude,glob)**/.pytest_cache/**' >/dev/null 2>&1
git -c core.quotepath=off diff --cached --binary --no-color --no-ext-diff "$1"
rc=$?; rm -f "$idx"; exit $rc"""


def is_code_env(env: gymnasium.Env) -> bool:
    return isinstance(env.unwrapped, CodeEnv)


class RecordPatch(AsyncWrapper):
    """Put the repository's patch into the info of the step that scores the episode."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        base = env.unwrapped
        if not isinstance(base, CodeEnv):
            raise TypeError(f"RecordPatch needs a code env, got {type(base).__name__}")
        self._start: str = "HEAD"
        original: Callable[[], Awaitable[tuple[float, dict[str, Any]]]] = base.verify

        async def verify_recording() -> tuple[float, dict[str, Any]]:
            patch, error = await self.capture()
            reward, info = await original()
            extra = {"model_patch": patch} if error is None else {"model_patch_error": error}
            return reward, {**info, **extra}

        # The env's own scoring method, wrapped on this instance only (see the module doc).
        base.verify = verify_recording

    async def areset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = await super().areset(**kwargs)
        r = await self.env.unwrapped.sandbox.exec(["git", "rev-parse", "HEAD"], timeout=60)
        self._start = r.stdout.strip() if r.exit_code == 0 and r.stdout.strip() else "HEAD"
        return obs, info

    async def capture(self) -> tuple[str | None, str | None]:
        """(patch, None), or (None, why it could not be read)."""
        sandbox = self.env.unwrapped.sandbox
        r = await sandbox.exec(
            ["bash", "-c", _DIFF, "diff", self._start], timeout=120, max_output=MAX_PATCH_BYTES
        )
        if r.exit_code != 0 or r.timed_out:
            return None, f"git diff failed (exit {r.exit_code}): {r.stderr.strip()[-500:]}"
        if r.truncated:
            return None, f"the patch is larger than {MAX_PATCH_BYTES} bytes"
        return r.stdout, None
