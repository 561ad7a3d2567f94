"""SWE-bench instance → the `CodeTask` that `arborl/Code-v0` runs.

Two ways to put the repository in the sandbox:

- `image=`: an instance image (see `images`): the repository is already at
  `/workspace`, at `base_commit`, with its history and its environment installed.
- `repo_files=`: the repository's files at `base_commit` (text), written into a sandbox of
  the base image; the environment's files and install commands run as setup (as root).
  Portable (no image build) but without the history.

Either way the verifier is SWE-bench's evaluation: when the episode is scored, the agent's
diff is applied to the reset sandbox by the harness (written with the test patch and a spec
into the root-owned verifier directory, run with `python3 -I`), the test patch's files are
reset to the base commit, the test patch is applied and the tests run; the env reads the log
on the host, and the reward is 1 only when every FAIL_TO_PASS and PASS_TO_PASS test passes.
The evaluation runner grades again in a fresh sandbox from the same diff.
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..task_types import BASE_IMAGE, VERIFIER_DIR, CodeTask
from .instance import DEFAULT_ENVIRONMENT, ENV_ROOT, SWEEnvironment, SWEInstance
from .package_layout import with_layout
from .repos import RepoFiles
from .wheels import UNPACK_WHEELS

HARNESS_PATH = Path(__file__).with_name("harness.py")
PARSERS_PATH = Path(__file__).with_name("log_parsers.py")
#: Where the portable form stages the environment's files in the repository before setup.
STAGE_DIR = ".arborl-env"
#: Where the portable form stages an environment's wheels before a setup step unpacks them.
WHEEL_DIR = ".arborl-wheels"
#: Where the portable form stages binary files, symlinks and file modes (base64, then decoded).
BIN_STAGE_DIR = ".arborl-bin"
_UNSTAGE = (
    "python3 -c \"import base64,json,os;m=json.load(open('" + BIN_STAGE_DIR + "/manifest.json'))\n"
    "for p,s in m['files'].items():\n"
    " os.makedirs(os.path.dirname(p) or '.',exist_ok=True);open(p,'wb').write(base64.b64decode(open(s).read()))\n"
    "for p,t in m['symlinks'].items():\n"
    " os.makedirs(os.path.dirname(p) or '.',exist_ok=True);os.path.lexists(p) and os.remove(p);os.symlink(t,p)\n"
    "for p in m['executable']:\n"
    ' os.chmod(p,os.stat(p).st_mode|0o111)" && rm -rf ' + BIN_STAGE_DIR
)
WORKDIR = "/workspace"


def harness_source() -> str:
    return HARNESS_PATH.read_text(encoding="utf-8")


def harness_files() -> dict[str, str]:
    """The harness and the log parsers it imports: file name → source (they go side by side)."""
    return {"harness.py": harness_source(), "log_parsers.py": PARSERS_PATH.read_text(encoding="utf-8")}


def harness_spec(
    instance: SWEInstance,
    environment: SWEEnvironment,
    *,
    test_patch: str,
    model_patch: str | None = None,
) -> dict[str, Any]:
    """The harness's spec.json (paths as the sandbox sees them)."""
    return {
        "base_commit": instance.base_commit,
        "test_patch": test_patch,
        "model_patch": model_patch,
        "test_cmd": environment.eval_test_cmd,
        "test_files": instance.test_files,
        "test_directives": environment.test_directives,
        "log_parser": environment.log_parser,
        "FAIL_TO_PASS": list(instance.FAIL_TO_PASS),
        "PASS_TO_PASS": list(instance.PASS_TO_PASS),
        "timeout_s": environment.test_timeout_s,
    }


def verifier_files(instance: SWEInstance, environment: SWEEnvironment) -> dict[str, str]:
    """The verifier's files (names in `VERIFIER_DIR`): the harness, the test patch, its spec.
    The diff being scored is put beside them as `model.patch`."""
    spec = harness_spec(
        instance,
        environment,
        test_patch=f"{VERIFIER_DIR}/test.patch",
        model_patch=f"{VERIFIER_DIR}/model.patch",
    )
    return {**harness_files(), "test.patch": instance.test_patch, "spec.json": json.dumps(spec, indent=1)}


#: The command that runs the harness: isolated Python (no user site, no environment, no
#: script or working directory on sys.path) from the directory only root writes.
VERIFY_COMMAND = f"python3 -I {VERIFIER_DIR}/harness.py {VERIFIER_DIR}/spec.json"


def _portable_setup(environment: SWEEnvironment, has_wheels: bool) -> tuple[str, ...]:
    if environment.pip and not has_wheels:
        why = (
            f"this environment installs {len(environment.pip)} pip requirement(s) as wheels and none were "
            "given: pass wheels=fetch_wheels(environment.pip) to to_code_task, or use instance images"
        )
        return (f"echo {shlex.quote(why)} >&2; exit 1",)
    cmds: list[str] = []
    if environment.files or environment.install:
        cmds.append(f"mkdir -p {ENV_ROOT}")
    if environment.files:
        cmds.append(f"cp -a {STAGE_DIR}/. {ENV_ROOT}/ && rm -rf {STAGE_DIR}")
    cmds += [f"cd {ENV_ROOT} && {c}" for c in environment.install]
    cmds += list(environment.instance_install)
    return tuple(cmds)


def _text_and_staged(
    repo_files: Mapping[str, str | bytes] | RepoFiles,
) -> tuple[dict[str, str], tuple[str, ...]]:
    """Text files as they are; binary files, symlinks and executable bits through a staging
    directory that one setup command unpacks (a sandbox spec carries text files only)."""
    raw: dict[str, str | bytes]
    if isinstance(repo_files, RepoFiles):
        raw, executable, symlinks = (
            dict(repo_files.files),
            sorted(repo_files.executable),
            dict(repo_files.symlinks),
        )
    else:
        raw, executable, symlinks = dict(repo_files), [], {}
    text: dict[str, str] = {}
    staged: dict[str, str] = {}
    for path, data in raw.items():
        if isinstance(data, str):
            text[path] = data
            continue
        try:
            decoded = data.decode("utf-8")
            if "\r" in decoded:  # written back as text it could lose its line ends
                raise UnicodeDecodeError("utf-8", data, 0, 1, "carriage returns")
            text[path] = decoded
        except UnicodeDecodeError:
            stage = f"{BIN_STAGE_DIR}/{len(staged)}.b64"
            text[stage] = base64.b64encode(data).decode()
            staged[path] = stage
    if not (staged or symlinks or executable):
        return text, ()
    manifest = {"files": staged, "symlinks": symlinks, "executable": executable}
    text[f"{BIN_STAGE_DIR}/manifest.json"] = json.dumps(manifest)
    return text, (_UNSTAGE,)


def to_code_task(
    instance: SWEInstance,
    environment: SWEEnvironment | None = None,
    *,
    image: str | None = None,
    repo_files: Mapping[str, str | bytes] | RepoFiles | None = None,
    metadata: dict[str, Any] | None = None,
    wheels: Mapping[str, bytes] | None = None,
) -> CodeTask:
    """The CodeTask of `instance`: give an instance `image`, or the `repo_files` at base_commit
    (path → text or bytes, or the `RepoFiles` of `repos.find_repository(...).files_at(commit)`;
    binary files, symlinks and executable bits are restored by a setup step). In that form an
    environment's `pip` requirements need their `wheels` (`wheels.fetch_wheels`), unpacked by a
    setup step run as root, and an environment that leaves `python_path` open gets the
    repository's package dirs (`layout.with_layout`); the task keeps the environment it ran with."""
    env = environment or DEFAULT_ENVIRONMENT
    if (image is None) == (repo_files is None):
        raise ValueError(f"{instance.instance_id}: give exactly one of image= or repo_files=")
    files: dict[str, str] = {}
    setup: tuple[str, ...] = ()
    if repo_files is not None:
        env = with_layout(env, repo_files)  # a src layout's package dir goes on PYTHONPATH
        names = repo_files.files if isinstance(repo_files, RepoFiles) else repo_files
        clash = [p for p in names if p.split("/")[0] in (STAGE_DIR, BIN_STAGE_DIR, WHEEL_DIR)]
        if clash:
            raise ValueError(
                f"{instance.instance_id}: the repository has arborl's reserved paths {clash[:3]}"
            )
        staged: Mapping[str, str | bytes] | RepoFiles = repo_files
        install_wheels: tuple[str, ...] = ()
        if env.pip and wheels:
            extra: dict[str, bytes] = {f"{WHEEL_DIR}/{name}": data for name, data in wheels.items()}
            extra[f"{WHEEL_DIR}/unpack.py"] = UNPACK_WHEELS.encode()
            if isinstance(repo_files, RepoFiles):
                staged = RepoFiles({**repo_files.files, **extra}, repo_files.executable, repo_files.symlinks)
            else:
                staged = {**repo_files, **extra}
            install_wheels = (f"python3 {WHEEL_DIR}/unpack.py {WHEEL_DIR} && rm -rf {WHEEL_DIR}",)
        files, unstage = _text_and_staged(staged)
        files.update({f"{STAGE_DIR}/{p}": text for p, text in env.files.items()})
        setup = (*unstage, *install_wheels, *_portable_setup(env, bool(install_wheels)))
    return CodeTask(
        id=instance.instance_id,
        problem_statement=instance.problem_statement,
        image=image or BASE_IMAGE,
        workdir=WORKDIR,
        repo_files=files,
        setup=setup,
        test_command=env.run_tests_cmd,
        verify_command=VERIFY_COMMAND,
        verify_timeout_s=env.test_timeout_s + 60,
        verifier_files=verifier_files(instance, env),
        verifier_applies_patch=True,
        metadata={
            **(metadata or {}),
            "swe": {"instance": instance.model_dump(), "environment": env.model_dump()},
        },
    )


def swe_parts(task: Any) -> tuple[SWEInstance, SWEEnvironment] | None:
    """The instance and environment a CodeTask was made from (None for other tasks)."""
    meta = getattr(task, "metadata", None) or {}
    swe = meta.get("swe") if isinstance(meta, dict) else None
    if not isinstance(swe, dict) or "instance" not in swe:
        return None
    return SWEInstance.model_validate(swe["instance"]), SWEEnvironment.model_validate(
        swe.get("environment") or {}
    )


def apply_command(patch: str, path: str = "/tmp/arborl.patch") -> str:
    """A bash command writing `patch` to `path` and applying it with git (a scripted fix)."""
    delim = "ARBORL_PATCH_EOF"
    while delim in patch:
        delim += "_"
    body = patch if patch.endswith("\n") else patch + "\n"
    return f"cat > {shlex.quote(path)} <<'{delim}'\n{body}{delim}\ngit apply --whitespace=nowarn {shlex.quote(path)}"
