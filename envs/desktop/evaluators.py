"""OSWorld evaluation in a desktop sandbox: getters read the sandbox, metrics score it.

    score, details = await evaluate(task.evaluator, ctx, last_action)

As OSWorld's `DesktopEnv.evaluate`: the `postconfig` steps run first; an `infeasible` task
scores 1 only when the agent's last action was FAIL, and a feasible one scores 0 when it was;
several metrics combine with `conj` "and" (any 0 → 0, else the mean) or "or" (any 1 → 1,
else the best). A getter that finds no file gives None (file metrics score it 0). A metric
that raises scores 0 with the error in `details`, so an odd agent output cannot crash training.

Getters read the sandbox out of the agent's reach (`trusted`): the harness's own Python for
listings and file tests, root for the window list, task commands as the desktop user (as in
OSWorld) with no user site; every read is bounded (`bounds`), and a read past its bound, the
agent's doing, scores 0 with the reason (`OutputTooLarge`), in `postconfig` too.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections import Counter
from typing import Any, Literal

from arborl.sandboxes import SandboxCrashed, SandboxFileNotFound, SandboxOpError, SandboxUnresponsive
from arborl.tasks.osworld import OSWorldEvaluator, OSWorldGetter, cached_cloud_file, getter_files

from . import commands
from .a11y import read_tree, terminal_output
from .bounds import OutputTooLarge, bounded_stream
from .osworld_metrics import METRIC_FUNCS
from .steps import StepContext, run_steps
from .trusted import run_python

log = logging.getLogger(__name__)
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_COMMAND_OUTPUT = 8 << 20  # per stream, a `vm_command_line` / `vm_command_error` getter's
MAX_LISTING_ENTRIES = 100_000  # a `list_directory` tree's files and directories


def _given(p: dict[str, Any], local: list[str | None]) -> Any:
    """The files a `vm_file` / `cloud_file` getter gives: those its `gives` names (default the
    first), one as itself, several as a list."""
    out = [local[i] for i in sorted(set(p.get("gives", [0]))) if i < len(local)]
    return out[0] if len(out) == 1 else out


async def _vm_file(ctx: StepContext, p: dict[str, Any]) -> Any:
    local: list[str | None] = []
    for path, dest in getter_files(p):
        try:
            data = await ctx.sandbox.read_file(path, max_bytes=MAX_FILE_BYTES)
        except SandboxFileNotFound:
            data = None
        except SandboxOpError as e:
            if "is larger than" in str(e):  # the server's refusal of a file past max_bytes
                raise OutputTooLarge(f"vm_file {path} is larger than {MAX_FILE_BYTES} bytes") from None
            log.info("vm_file %s: %s", path, e)  # a directory, unreadable: as OSWorld, "no file"
            data = None
        target = ctx.cache_dir / dest
        if data is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        local.append(str(target) if data is not None else None)
    return _given(p, local)


def _cloud_file(ctx: StepContext, p: dict[str, Any]) -> Any:
    """OSWorld's `cloud_file` from the download cache (`<root>/<task id>/<dest>`, checked at
    load), copied to the episode's cache dir beside the `vm_file` results. A file gone since
    the load gives None."""
    local: list[str | None] = []
    for _, dest in getter_files(p):
        cached = cached_cloud_file(ctx.download_cache or "", ctx.task_id, dest)
        target = ctx.cache_dir / dest
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cached, target)
            local.append(str(target))
        except OSError as e:
            log.info("cloud_file %s: %s", cached, e)
            local.append(None)
    return _given(p, local)


async def _command(ctx: StepContext, p: dict[str, Any], stream: Literal["stdout", "stderr"]) -> str:
    r = await ctx.sandbox.exec(
        timeout=ctx.command_timeout_s,
        max_output=MAX_COMMAND_OUTPUT,
        **commands.exec_args(p["command"], bool(p.get("shell", False)), ctx.display.env),
    )
    return bounded_stream(r, stream, MAX_COMMAND_OUTPUT, "the getter's command")


#: OSWorld's directory tree ({"type": "directory", "name", "children": [...]}) of the task's
#: path, walked without following the symbolic links in it (a link is listed as a file: the
#: agent's links cannot lead the walk elsewhere), at most `MAX_LISTING_ENTRIES` entries
#: (exit 3 past them).
_LIST_SCRIPT = """
import json, os, sys
left = int(sys.argv[2])
def tree(p, name):
    global left
    kids = []
    for e in sorted(os.scandir(p), key=lambda e: e.name):
        left -= 1
        if left < 0:
            sys.exit(3)
        d = e.is_dir(follow_symlinks=False)
        kids.append(tree(e.path, e.name) if d else {"type": "file", "name": e.name})
    return {"type": "directory", "name": name, "children": kids}
p = sys.argv[1]
print(json.dumps(tree(p, os.path.basename(p.rstrip("/")) or p) if os.path.isdir(p) else None))
"""


async def _list_directory(ctx: StepContext, p: dict[str, Any]) -> dict[str, Any] | None:
    """OSWorld's directory tree: {"type": "directory", "name", "children": [...]}."""
    args = [str(p["path"]), str(MAX_LISTING_ENTRIES)]
    r = await run_python(ctx.sandbox, _LIST_SCRIPT, args, what="the directory listing", timeout=60)
    if r.exit_code == 3:
        raise OutputTooLarge(f"{p['path']} holds more than {MAX_LISTING_ENTRIES} files and directories")
    return json.loads(r.stdout) if r.exit_code == 0 and r.stdout.strip() else None


async def _file_exists(ctx: StepContext, path: str) -> bool:
    code = "import os, sys; sys.exit(0 if os.path.exists(sys.argv[1]) else 1)"
    r = await run_python(ctx.sandbox, code, [path], what="a file test", timeout=10, max_output=4096)
    return r.exit_code == 0


#: The video MIME types (video/...) whose default app OSWorld's `default_video_player` asks
#: `xdg-mime` for; the answer is the app named most often.
_VIDEO_TYPES = (
    "3gp 3gpp 3gpp2 avi divx dv fli flv mp2t mp4 mp4v-es mpeg mpeg-system msvideo ogg quicktime "
    "vnd.divx vnd.mpegurl vnd.rn-realvideo webm x-anim x-avi x-flc x-fli x-flv x-m4v x-matroska "
    "x-mpeg x-mpeg-system x-mpeg2 x-ms-asf x-ms-asf-plugin x-ms-asx x-ms-wm x-ms-wmv x-ms-wmx "
    "x-ms-wvx x-msvideo x-nsv x-ogm x-ogm+ogg x-theora x-theora+ogg"
)
VIDEO_TYPES = tuple(_VIDEO_TYPES.split())
_END = "@@arborl-end@@"


async def _default_video_player(ctx: StepContext) -> str:
    """The desktop user's default app for video files, as OSWorld's getter: `xdg-mime query
    default video/T` for each type (its stdout, newline included), the most frequent non-empty
    answer (the first seen on a tie), or "unknown"."""
    loop = (
        f"for t in {' '.join(VIDEO_TYPES)}; do xdg-mime query default video/$t 2>/dev/null; echo {_END}; done"
    )
    r = await ctx.sandbox.exec(timeout=120, **commands.exec_args(loop, True, ctx.display.env))
    if r.truncated:
        raise OutputTooLarge("xdg-mime's answers are larger than the harness reads")
    apps = [a.lstrip("\n") for a in r.stdout.split(_END)[: len(VIDEO_TYPES)]]
    apps = [a for a in apps if a]
    return Counter(apps).most_common(1)[0][0] if apps else "unknown"


#: Getters that read the accessibility tree: the display runs AT-SPI for tasks that use them.
A11Y_GETTERS = frozenset({"vm_terminal_output", "accessibility_tree"})


def uses_a11y(ev: OSWorldEvaluator) -> bool:
    """Whether the evaluator reads the accessibility tree."""
    return any(g is not None and g.type in A11Y_GETTERS for g in (*ev.result, *ev.expected))


async def get(getter: OSWorldGetter | None, ctx: StepContext) -> Any:
    """Run one getter (OSWorld's `get_<type>`)."""
    if getter is None:
        return None
    p, kind = getter.params, getter.type
    if kind == "vm_file":
        return await _vm_file(ctx, p)
    if kind == "cloud_file":
        return _cloud_file(ctx, p)
    if kind == "vm_command_line":
        return await _command(ctx, p, "stdout")
    if kind == "vm_command_error":
        return await _command(ctx, p, "stderr")
    if kind == "rule":
        return p["rules"]
    if kind == "cache_file":
        path = ctx.cache_dir / str(p["path"])
        return str(path) if path.exists() else None
    if kind == "list_directory":
        return await _list_directory(ctx, p)
    if kind == "vm_file_exists_in_vm_folder":
        return await _file_exists(ctx, f"{str(p['folder_name']).rstrip('/')}/{p['file_name']}")
    if kind == "default_video_player":
        return await _default_video_player(ctx)
    if kind == "vm_terminal_output":
        return terminal_output(await read_tree(ctx.sandbox, ctx.display.env))
    if kind == "accessibility_tree":  # the XML check_accessibility_tree reads ("" without AT-SPI)
        return await read_tree(ctx.sandbox, ctx.display.env)
    if kind == "vm_screen_size":
        return {"width": ctx.display.width, "height": ctx.display.height}
    windows = await ctx.display.windows(ctx.sandbox)
    if kind == "vm_window_size":
        name = str(p["app_class_name"]).lower()
        for w in windows:
            if name in w.wm_class.lower():
                return {"width": w.width, "height": w.height}
        return None
    if kind == "vm_active_window_title":
        return next((w.title for w in windows if w.active), None)
    if kind == "vm_window_titles":
        return [w.title for w in windows]
    raise ValueError(f"getter {kind!r} is not implemented")  # the loader refuses these


GETTER_TYPES = (
    "vm_file",
    "cloud_file",
    "vm_command_line",
    "vm_command_error",
    "rule",
    "cache_file",
    "list_directory",
    "vm_file_exists_in_vm_folder",
    "vm_screen_size",
    "vm_window_size",
    "default_video_player",
    "vm_terminal_output",
    "accessibility_tree",
    "vm_active_window_title",
    "vm_window_titles",
)


async def evaluate(
    ev: OSWorldEvaluator, ctx: StepContext, last_action: str | None
) -> tuple[float, dict[str, Any]]:
    """Score the sandbox's state: (score in [0, 1], details for `info["evaluation"]`)."""
    details: dict[str, Any] = {"metrics": [], "last_action": last_action}
    if ev.postconfig:
        try:
            await run_steps(ctx, ev.postconfig, "postconfig")
        except OutputTooLarge as e:  # after the agent acted: its doing, not the task's
            details["reason"] = f"postconfig: {e}"
            return 0.0, details
    if ev.infeasible:
        details["infeasible"] = True
        return (1.0 if last_action == "FAIL" else 0.0), details
    if last_action == "FAIL":
        details["reason"] = "the agent declared the task infeasible (FAIL), but it is feasible"
        return 0.0, details
    scores = []
    for i, name in enumerate(ev.func):
        entry: dict[str, Any] = {"func": name}
        try:
            result = await get(ev.result[i], ctx)
            expected = await get(ev.expected[i], ctx)
            score = float(METRIC_FUNCS[name](result, expected, **ev.options[i]))
            entry["result"] = _short(result)
        except (SandboxCrashed, SandboxUnresponsive):
            raise  # the sandbox is gone: no score can be read, the episode ends truncated
        except Exception as e:
            log.info("metric %s failed: %s: %s", name, type(e).__name__, e)
            score, entry["error"] = 0.0, f"{type(e).__name__}: {e}"
        entry["score"] = score
        details["metrics"].append(entry)
        if ev.conj == "and" and score == 0.0:
            return 0.0, details
        if ev.conj == "or" and score == 1.0:
            return 1.0, details
        scores.append(score)
    total = sum(scores) / len(scores) if ev.conj == "and" else max(scores)
    return total, details


def _short(value: Any) -> Any:
    text = repr(value)
    return value if len(text) <= 300 else text[:297] + "..."
