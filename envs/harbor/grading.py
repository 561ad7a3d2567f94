"""Grading a Harbor task in the agent's sandbox, out of the agent's reach.

Harbor grades the container as the agent left it: `tests/` is copied to /tests, `test.sh` runs,
and the reward is the number it wrote to /logs/verifier/reward.txt (or reward.json). The agent
under RL is an adversary that will try to write that number itself, so here, in order:

1. every process in the sandbox is killed (the agent's, whatever it left running: nothing of
   the agent acts from here on, so what follows sees files only, never a race);
2. /tests, /solution and /logs are removed and made anew by root: /tests holds the task's test
   files (regular files, root's, read-only to others), /logs/verifier is root's and empty, so a
   reward.txt the agent planted, or a link standing at its place, is gone;
3. `test.sh` runs **as root**, as Harbor runs it: tests install, start and inspect what they
   need, and nothing of the agent's (its user) can signal, trace or write into a root process.
   Its environment is rebuilt from nothing: the image's ENV, then `PATH` of directories that
   root alone may write (checked up to `/`, so a binary the agent planted cannot shadow a
   command), `HOME=/root`, no user site, `PYTHONSAFEPATH` (the working directory, the agent's,
   is not on `sys.path`: no `pytest.py` or `json.py` of its own is imported), then the task's
   `[verifier] env`. pytest finds its configuration and conftest.py from /tests upwards, where
   the agent could write nothing. Its output comes back to the host;
4. test.sh runs under the reward guard (`guard.py`): what it starts stays below the guard,
   which kills all of it the moment test.sh exits and says whether the reward changed after
   that (a service of the agent's that the tests started, left rewriting the reward: a 0); then
   every process in the sandbox is killed again;
5. the reward file is read by the host, as root, following no link, and parsed strictly: one
   finite number in reward.txt, or reward.json's `reward` (Harbor's flat object of numbers).
   No reward, or not a number, is the agent's 0 with the reason; `HarborEnv`'s hook makes it an
   environment error when the gold run gets it (the task's test.sh is broken).

What the tests run of the agent's (its program, its start script) runs as root inside step 3:
it could write the reward itself before test.sh writes its own at the end, which is why a
test.sh should write the reward last (Harbor's own do); a write after test.sh has ended is
caught by the guard, one squeezed between test.sh's last write and its exit is not. The
sandbox is never reused after grading (`HarborEnv` destroys it), since root code of the
agent's may have changed anything.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from arborl.sandboxes import ROOT_ENV, SandboxFileNotFound, SandboxOpError
from arborl.sandboxes.base import tar_archive
from arborl.tasks.harbor import REWARD_JSON, REWARD_TXT, TESTS_DIR, VERIFIER_LOGS, HarborTask, read_files

from .guard import guard_argv, new_nonce, read_verdict

#: The files of /logs/verifier that hold a reward (Harbor's).
REWARD_NAMES = ("reward.txt", "reward.json")
#: The verifier's output kept (head and tail) per stream.
MAX_TEST_OUTPUT = 256 * 1024
MAX_REWARD_BYTES = 64 * 1024
#: Where commands are looked up when the image sets no PATH (Debian's root PATH).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: What the environment of test.sh always says, whatever the image's ENV.
SANITISED = {
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    "PYTHONNOUSERSITE": "1",
    "PYTHONSAFEPATH": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "DEBIAN_FRONTEND": "noninteractive",
}
#: Image ENV keys that never reach test.sh (they are set above, or make a shell run code).
DROPPED_ENV = frozenset({"PATH", "HOME", "BASH_ENV", "ENV", "PYTHONSTARTUP", "PYTHONUSERBASE", "LD_PRELOAD"})

# Root's own directories on the PATH: each, resolved, and every directory above it, owned by
# root and writable by no one else. Run as root after every agent process is gone.
_SAFE_PATH = r"""out=
IFS=: read -r -a dirs <<< "$1"
for d in "${dirs[@]}"; do
  [ -n "$d" ] || continue
  r=$(readlink -f -- "$d" 2>/dev/null) || continue
  ok=1; x=$r
  while :; do
    if [ ! -d "$x" ] || [ "$(stat -c %u -- "$x")" != 0 ] || [ $(( 0$(stat -c %a -- "$x") & 022 )) -ne 0 ]; then ok=0; break; fi
    [ "$x" = / ] && break
    x=$(dirname -- "$x")
  done
  [ $ok = 1 ] && case ":$out:" in *":$d:"*) ;; *) out=${out:+$out:}$d ;; esac
done
printf %s "$out"
"""
_STAGE = f"rm -rf {TESTS_DIR} /solution /logs && install -d -m 0755 -o root -g root /logs {VERIFIER_LOGS} {TESTS_DIR}"
_SEAL = (
    f"chown -R root:root {TESTS_DIR} && chmod -R u=rwX,go=rX {TESTS_DIR} && chmod 0755 {TESTS_DIR}/test.sh"
)


@dataclass
class TestRun:
    """What running a task's tests found."""

    reward: float = 0.0
    rewards: dict[str, float] = field(default_factory=dict)
    """reward.json's numbers (reward.txt: {"reward": the number})."""
    error: str = ""
    """Why there is no reward ('' when there is one)."""
    error_kind: str = ""
    """`no_reward` | `bad_reward` | `tests_timeout` | `reward_tampered` | ''."""
    exit_code: int | None = None
    timed_out: bool = False
    output: str = ""

    @property
    def graded(self) -> bool:
        return not self.error

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"reward": self.reward, "graded": self.graded, "exit_code": self.exit_code}
        if self.rewards:
            out["rewards"] = dict(self.rewards)
        if self.error:
            out |= {"error": self.error, "error_kind": self.error_kind}
        if self.timed_out:
            out["timed_out"] = True
        out["output_tail"] = self.output[-4000:]
        return out


def parse_reward_txt(text: str) -> float:
    """One finite number, nothing else (whitespace around it aside)."""
    words = text.split()
    if len(words) != 1:
        raise ValueError(f"it holds {len(words)} words, not one number: {text[:80]!r}")
    value = float(words[0])  # ValueError names the text
    if not math.isfinite(value):
        raise ValueError(f"{words[0]!r} is not a finite number")
    return value


def _finite(value: float) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer too large for a float
        return False


def parse_reward_json(text: str) -> dict[str, float]:
    """Harbor's reward.json: a flat object whose numeric values are rewards; `reward` is the one
    that counts (or the only number there is). Returns the numbers, `reward` among them."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"it is a JSON {type(data).__name__}, not an object of numbers")
    numbers = {
        str(k): float(v)
        for k, v in data.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and _finite(v)
    }
    if "reward" not in numbers:
        if "reward" in data:
            raise ValueError(f'its "reward" is {repr(data["reward"])[:80]}, not a finite number')
        if len(numbers) != 1:
            raise ValueError(
                f'it has no "reward" key and {len(numbers)} numbers to choose from: {sorted(numbers)[:5]}'
            )
        numbers["reward"] = next(iter(numbers.values()))
    return numbers


class UnsafeImage(RuntimeError):
    """The image lets others than root write where the system's commands are: nothing run
    there as root can be trusted, so the task cannot be graded (the task's fault)."""


async def safe_path(sandbox: Any, candidate: str) -> str:
    """`candidate` (a PATH) less every directory root alone may not write; UnsafeImage when
    the system's own directories are among those."""
    r = await sandbox.exec(
        ["/bin/bash", "-c", _SAFE_PATH, "safe-path", f"{candidate}:{ROOT_ENV['PATH']}"],
        user="root",
        timeout=60,
        workdir="/",
        env=ROOT_ENV,
    )
    safe = r.stdout.strip().split(":") if r.ok else []
    unsafe = [d for d in ROOT_ENV["PATH"].split(":") if d not in safe]
    if unsafe:
        raise UnsafeImage(
            f"the image lets others than root write {', '.join(unsafe)}: its tests cannot be trusted"
        )
    wanted = [d for d in candidate.split(":") if d in safe]
    return ":".join(dict.fromkeys(wanted or safe))


async def run_tests(sandbox: Any, task: HarborTask, image_env: dict[str, str], kill: Any) -> TestRun:
    """Steps 1-5 of the module doc on `sandbox` (the agent's, as it left it); `kill()` kills
    every process in it. Raises `SandboxError` for a sandbox that failed (the caller decides
    whose fault that is) and `RuntimeError` when the tests cannot be staged."""
    await kill()
    staged = await sandbox.exec(_STAGE, user="root", timeout=120, workdir="/", env=ROOT_ENV)
    if not staged.ok:
        raise RuntimeError(f"cannot prepare {TESTS_DIR} and {VERIFIER_LOGS}: {staged.output[-500:]}")
    await sandbox.upload(tar_archive(read_files(task.folder / "tests")), TESTS_DIR, user="root")
    sealed = await sandbox.exec(_SEAL, user="root", timeout=120, workdir="/", env=ROOT_ENV)
    if not sealed.ok:
        raise RuntimeError(f"cannot seal {TESTS_DIR}: {sealed.output[-500:]}")
    # Harbor sets [environment] env on the container, so its tests see it too.
    env = {k: v for k, v in {**image_env, **task.agent_env}.items() if k not in DROPPED_ENV}
    env |= SANITISED | task.verifier_env
    env["PATH"] = await safe_path(
        sandbox, task.verifier_env.get("PATH") or image_env.get("PATH") or DEFAULT_PATH
    )
    assignments = [f"{k}={v}" for k, v in env.items() if k.isidentifier()]
    nonce = new_nonce()
    r = await sandbox.exec(
        guard_argv(VERIFIER_LOGS, REWARD_NAMES, ["/usr/bin/env", "-i", *assignments, f"{TESTS_DIR}/test.sh"]),
        user="root",
        timeout=task.verifier_timeout_s,
        workdir=task.workdir,
        max_output=MAX_TEST_OUTPUT,
        env=ROOT_ENV,
        stdin=nonce + "\n",
    )
    await kill()
    verdict, stdout = read_verdict(r.stdout, nonce)
    output = stdout + (("\n" if stdout else "") + r.stderr if r.stderr else "")
    run = TestRun(exit_code=verdict.exit_code, timed_out=r.timed_out, output=output)
    if r.timed_out:
        run.error, run.error_kind = (
            f"task {task.id}: tests/test.sh ran past [verifier] timeout_sec={task.verifier_timeout_s:g} s",
            "tests_timeout",
        )
        return run
    if not verdict.found or verdict.changed_after_exit:
        why = (
            "the reward changed after tests/test.sh had ended (a process the tests started wrote it)"
            if verdict.found
            else "the tests' run ended without the reward guard's verdict (a process the tests started killed it)"
        )
        run.error, run.error_kind = f"task {task.id}: {why}", "reward_tampered"
        return run
    await read_reward(sandbox, task, run)
    return run


async def read_reward(sandbox: Any, task: HarborTask, run: TestRun) -> None:
    """Fill `run` from reward.json, else reward.txt (Harbor's order), read as root, no links."""
    for path, parse in ((REWARD_JSON, parse_reward_json), (REWARD_TXT, None)):
        try:
            data = await sandbox.read_file(path, user="root", max_bytes=MAX_REWARD_BYTES)
        except SandboxFileNotFound:
            continue
        except SandboxOpError as e:  # a link, a directory, too large: not a reward
            run.error, run.error_kind = f"task {task.id}: {path}: {e}", "bad_reward"
            return
        try:
            text = data.decode("utf-8")
            if parse is not None:
                run.rewards = parse(text)
            else:
                run.rewards = {"reward": parse_reward_txt(text)}
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            run.error = f"task {task.id}: tests/test.sh wrote {path}, which is not a reward: {e}"
            run.error_kind = "bad_reward"
            return
        run.reward = run.rewards["reward"]
        return
    run.error = f"task {task.id}: tests/test.sh wrote no reward ({REWARD_TXT} or {REWARD_JSON})"
    run.error_kind = "no_reward"
