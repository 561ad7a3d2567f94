"""The code env's tools: bash, str_replace_editor, run_tests, submit.

File operations run inside the sandbox as the agent user (a shell script piping base64),
so they obey the same permissions as the agent's own commands and carry bytes exactly.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
from typing import Annotated, Any, ClassVar, Literal, Protocol

from pydantic import Field

from arborl.tasks import CodeTask

from ..toolbox import Tool, ToolResult, format_exec, function_tool

MAX_EDIT_BYTES = 2 * 1024 * 1024
MAX_VIEW_LINES = 1000
SNIPPET_LINES = 4

_READ = r"""f=$1
[ -d "$f" ] && exit 21
[ -e "$f" ] || exit 2
[ -r "$f" ] || exit 13
size=$(stat -c %s -- "$f") || exit 1
[ "$size" -gt "$2" ] && { echo "$size"; exit 27; }
base64 -w0 -- "$f" """
# Drains stdin before refusing: the sandbox server fails the whole exec if the command
# exits before reading what it was sent (BrokenPipeError on closing the pipe).
_WRITE = r"""f=$1
refuse() { cat > /dev/null; exit "$1"; }
[ "$2" = new ] && [ -e "$f" ] && refuse 17
[ -d "$f" ] && refuse 21
mkdir -p -- "$(dirname -- "$f")" 2>/dev/null || { cat > /dev/null; mkdir -p -- "$(dirname -- "$f")"; exit 1; }
base64 -d > "$f" || { cat > /dev/null; exit 1; }"""
_LIST = r"""find "$1" -maxdepth 2 -not -path '*/.*' 2>/dev/null | sort | head -n 400"""


class CodeWorkspace(Protocol):
    """What the code tools use of their env (`CodeEnv` is one): the task, its sandbox,
    command limits and the verifier. The tools depend on this, not on the env class."""

    @property
    def task(self) -> CodeTask: ...

    @property
    def sandbox(self) -> Any: ...

    command_timeout_s: float
    max_command_timeout_s: float
    max_output_bytes: int

    async def verify(self) -> tuple[float, dict[str, Any]]: ...


class EditError(Exception):
    """A file operation that cannot be done; the message is shown to the model."""


class _Files:
    """File access in the sandbox as the agent user."""

    def __init__(self, env: CodeWorkspace) -> None:
        self.env = env

    def abspath(self, path: str) -> str:
        if "\x00" in path or not path.strip():
            raise EditError("the path is empty or contains a NUL byte")
        return posixpath.normpath(posixpath.join(self.env.task.workdir, path))

    async def read(self, path: str) -> str:
        r = await self.env.sandbox.exec(
            ["bash", "-c", _READ, "read", path, str(MAX_EDIT_BYTES)],
            max_output=MAX_EDIT_BYTES * 2,
            timeout=60,
        )
        reasons = {
            2: f"{path} does not exist",
            13: f"{path} is not readable (permission denied)",
            21: f"{path} is a directory",
            27: f"{path} is too large to edit here ({r.stdout.strip()} bytes); use bash (sed, head, tail)",
        }
        if r.exit_code != 0 or r.truncated:
            raise EditError(reasons.get(r.exit_code, f"cannot read {path}: {r.stderr.strip()[:300]}"))
        try:
            data = base64.b64decode(r.stdout, validate=True)
        except (binascii.Error, ValueError) as e:
            raise EditError(f"cannot read {path}: {e}") from e
        if b"\x00" in data[:8192]:
            raise EditError(f"{path} is a binary file ({len(data)} bytes); inspect it with bash (xxd, file)")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise EditError(
                f"{path} is not UTF-8 text ({e.reason} at byte {e.start}); edit it with bash"
            ) from e

    async def write(self, path: str, text: str, new: bool = False) -> None:
        payload = base64.b64encode(text.encode("utf-8", "surrogatepass")).decode()
        r = await self.env.sandbox.exec(
            ["bash", "-c", _WRITE, "write", path, "new" if new else "edit"], stdin=payload, timeout=60
        )
        if r.exit_code == 17:
            raise EditError(f"{path} already exists; `create` only makes new files (use str_replace to edit)")
        if r.exit_code == 21:
            raise EditError(f"{path} is a directory")
        if r.exit_code != 0:
            raise EditError(f"cannot write {path}: {r.stderr.strip()[:300] or f'exit code {r.exit_code}'}")

    async def listing(self, path: str) -> str:
        r = await self.env.sandbox.exec(["bash", "-c", _LIST, "list", path], timeout=60)
        return r.stdout.rstrip("\n")


def numbered(text: str, start: int = 1) -> str:
    return "\n".join(f"{i:6}\t{line}" for i, line in enumerate(text.split("\n"), start))


def _snippet(text: str, line: int, extra: int) -> str:
    lines = text.split("\n")
    lo, hi = max(0, line - 1 - SNIPPET_LINES), min(len(lines), line + extra + SNIPPET_LINES)
    return numbered("\n".join(lines[lo:hi]), lo + 1)


class Editor:
    """`str_replace_editor`: view, create, str_replace, insert."""

    def __init__(self, env: CodeWorkspace) -> None:
        self.files = _Files(env)

    ARGS: ClassVar[dict[str, set[str]]] = {
        "view": {"view_range"},
        "create": {"file_text"},
        "str_replace": {"old_str", "new_str"},
        "insert": {"insert_line", "new_str"},
    }

    async def __call__(self, command: str, path: str, **kw: Any) -> ToolResult:
        extra = sorted(set(kw) - self.ARGS[command])
        if extra:
            return ToolResult(
                f"Error: `{command}` does not take {', '.join(extra)} "
                f"(it takes: path, {', '.join(sorted(self.ARGS[command]))}).",
                ok=False,
                error="invalid_arguments",
            )
        try:
            path = self.files.abspath(path)
            return ToolResult(await getattr(self, f"_{command}")(path, **kw))
        except EditError as e:
            return ToolResult(f"Error: {e}", ok=False, error="tool_error")

    async def _view(self, path: str, view_range: list[int] | None = None) -> str:
        try:
            text = await self.files.read(path)
        except EditError as e:
            if "is a directory" not in str(e):
                raise
            return f"Files in {path} (2 levels, hidden ones omitted):\n{await self.files.listing(path)}"
        lines = text.split("\n")
        if view_range is not None:
            first, last = view_range
            last = len(lines) if last == -1 else last
            if not (1 <= first <= len(lines)) or last < first or last > len(lines):
                raise EditError(f"invalid view_range {view_range}: {path} has {len(lines)} lines")
            return numbered("\n".join(lines[first - 1 : last]), first)
        if len(lines) > MAX_VIEW_LINES:
            shown = numbered("\n".join(lines[:MAX_VIEW_LINES]))
            return f"{shown}\n[{path} has {len(lines)} lines; showing {MAX_VIEW_LINES}: use view_range]"
        return numbered(text)

    async def _create(self, path: str, file_text: str | None = None) -> str:
        if file_text is None:
            raise EditError("`create` needs `file_text`")
        await self.files.write(path, file_text, new=True)
        return f"Created {path} ({len(file_text)} characters)."

    async def _str_replace(self, path: str, old_str: str | None = None, new_str: str = "") -> str:
        if not old_str:
            raise EditError("`str_replace` needs a non-empty `old_str`")
        text = await self.files.read(path)
        count = text.count(old_str)
        if count == 0:
            hint = ""
            if old_str.strip() and old_str.strip() in text:
                hint = " (it does occur with different leading/trailing whitespace)"
            raise EditError(
                f"no replacement was made: old_str does not occur verbatim in {path}{hint}. "
                "View the file and copy the exact text, indentation included."
            )
        if count > 1:
            lines: list[int] = []
            pos = text.find(old_str)
            while pos >= 0 and len(lines) < 10:
                line = text.count("\n", 0, pos) + 1
                if line not in lines:
                    lines.append(line)
                pos = text.find(old_str, pos + 1)
            raise EditError(
                f"no replacement was made: old_str occurs {count} times in {path} (at lines "
                f"{', '.join(map(str, lines))}). Include more surrounding lines to make it unique."
            )
        at = text.count("\n", 0, text.find(old_str)) + 1
        new_text = text.replace(old_str, new_str, 1)
        await self.files.write(path, new_text)
        snippet = _snippet(new_text, at, new_str.count("\n"))
        return f"Edited {path}. Lines around the change:\n{snippet}"

    async def _insert(self, path: str, insert_line: int | None = None, new_str: str | None = None) -> str:
        if insert_line is None or new_str is None:
            raise EditError("`insert` needs `insert_line` and `new_str`")
        text = await self.files.read(path)
        lines = text.split("\n")
        if insert_line > len(lines):
            raise EditError(f"insert_line {insert_line} is past the end of {path} ({len(lines)} lines)")
        new_text = "\n".join([*lines[:insert_line], *new_str.split("\n"), *lines[insert_line:]])
        await self.files.write(path, new_text)
        return f"Inserted into {path}. Lines around the change:\n{_snippet(new_text, insert_line + 1, new_str.count(chr(10)))}"


def code_tools(env: CodeWorkspace) -> list[Tool]:
    """The tools of one code-env episode (bound to `env`): bash, str_replace_editor,
    run_tests, submit."""
    bash, editor, submit = workspace_tools(env)

    @function_tool(description=f"Run the test command: `{env.task.test_command}`.")
    async def run_tests() -> ToolResult:
        task = env.task
        r = await env.sandbox.exec(
            task.test_command, timeout=task.test_timeout_s, max_output=env.max_output_bytes
        )
        return ToolResult(
            format_exec(r, task.test_timeout_s), ok=not r.timed_out, error="timeout" if r.timed_out else None
        )

    return [bash, editor, run_tests, submit]


def workspace_tools(env: CodeWorkspace, where: str = "the repository") -> list[Tool]:
    """bash, str_replace_editor and submit over `env`'s sandbox (its task's `workdir`, its
    `verify`): the code env's, and any env whose agent works on files in a sandbox (`where`
    is how bash's description names its working directory; the parameters' descriptions stay
    the code env's, which trained policies have seen)."""

    @function_tool(description=f"Run a bash command in {where} (non-interactive, no network).")
    async def bash(
        command: Annotated[str, Field(description="a bash command, run in the repository")],
        timeout: Annotated[int | None, Field(ge=1, le=3600, description="seconds")] = None,
    ) -> ToolResult:
        if "\x00" in command:
            return ToolResult("Error: the command contains a NUL byte.", ok=False, error="tool_error")
        if not command.strip():
            return ToolResult("Error: the command is empty.", ok=False, error="tool_error")
        limit = float(min(timeout or env.command_timeout_s, env.max_command_timeout_s))
        r = await env.sandbox.exec(command, timeout=limit, max_output=env.max_output_bytes)
        return ToolResult(
            format_exec(r, limit),
            ok=not r.timed_out,
            error="timeout" if r.timed_out else None,
            info={"exit_code": r.exit_code},
        )

    editor = Editor(env)

    @function_tool(
        description="View a file or directory, create a new file, replace an exact unique string in a file, "
        "or insert text after a line."
    )
    async def str_replace_editor(
        command: Literal["view", "create", "str_replace", "insert"],
        path: Annotated[str, Field(description="file or directory, absolute or relative to the repository")],
        file_text: Annotated[str | None, Field(description="create: the content of the new file")] = None,
        old_str: Annotated[
            str | None, Field(description="str_replace: exact text to replace; must occur once")
        ] = None,
        new_str: Annotated[
            str | None, Field(description="str_replace: replacement; insert: text to insert")
        ] = None,
        insert_line: Annotated[
            int | None, Field(ge=0, description="insert: after this line (0 = top)")
        ] = None,
        view_range: Annotated[
            list[int] | None,
            Field(
                min_length=2,
                max_length=2,
                description="view: [first, last] line, 1-based; last = -1 for the end",
            ),
        ] = None,
    ) -> ToolResult:
        given = {"file_text": file_text, "old_str": old_str, "new_str": new_str}
        given |= {"insert_line": insert_line, "view_range": view_range}
        return await editor(command, path, **{k: v for k, v in given.items() if v is not None})

    @function_tool(description="Submit your changes for grading. This ends the episode.")
    async def submit() -> ToolResult:
        reward, info = await env.verify()
        verdict = "passed" if reward > 0 else "did not pass"
        return ToolResult(f"Submitted. The verifier {verdict}.", terminal=True, reward=reward, info=info)

    return [bash, str_replace_editor, submit]
