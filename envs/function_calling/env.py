"""`arborl/Tool-v0`: function calling with JSON-schema tools, scored by a verifier.

Tools of an episode: the task's own (`ToolTask.tools`: Python run in the sandbox, or a
trusted host function; a host function with a parameter named `episode` gets the episode's
`ToolEpisode`, for tools with state), the tools of the configured MCP servers (`mcp.py`:
stdio ones start in the episode's sandbox, which is then leased at reset), plus built-ins:
`python` (runs code in a sandbox, leased on first use, so tasks that never run code never
take one), `search` (BM25 over the corpus shipped
with the task suite) and `final_answer`. The episode ends when the model calls
`final_answer` or replies without a tool call (that reply, or its `<answer>...</answer>`
part, is the answer); the task's verifier scores it: `exact`, `numeric`, `contains`, or a
user function.

Pictures (`obs_type`, `pictures`): a suite whose observations hold what only a picture should
tell (a vision-language policy's task) names a function ``pictures(text, task) -> (text,
images)`` that draws part of an observation's text as pictures (uint8 [H, W, 3]) and returns
the text without it. With ``obs_type="image"`` each user or tool message the function draws
from becomes image parts followed by the remaining text (the Qwen2-VL content format of
`arborl.envs.images`); ``"both"`` keeps the full text beside the pictures; ``"text"`` (the
default) shows the text as it is. Messages with nothing to draw stay strings. The state hash
does not change with it: what the world is does not depend on how it is shown.

The state hash is what the agent observes of the world: the task id, the episode's
`ToolEpisode.state` (where host tools with state keep the world: the room a door led to),
and the set of (tool, arguments, result) triples of the calls to tools without episode
state (python, search, MCP, stateless host and sandboxed tools), whose world is what the
agent has learned from them: that history, whatever its order. A call to a tool with state
is in the state it left, not in the history, so a room reached by two paths is one state
(GiGPO's anchors meet there); a call that never ran (an unknown tool, invalid arguments)
is in neither.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from pydantic import Field

from arborl.sandboxes import Sandbox, SandboxSpec
from arborl.tasks import ToolDecl, ToolTask
from arborl.tasks.common import load_entry_point

from ..base import Step, TaskError, stable_hash
from ..images import (
    OBS_TYPES,
    ImageBounds,
    ObsType,
    check_image_count,
    image_part,
    multimodal_observation_space,
    text_part,
)
from ..parsers import ToolCall
from ..tool_calling_env import ToolCallingEnv
from ..toolbox import Tool, ToolBox, ToolResult, format_exec, function_tool
from .mcp import MCPServerConfig, MCPSession, as_configs, close_sessions, open_sessions
from .search import BM25, index_for_docs, index_for_path
from .verifiers import score

SYSTEM_PROMPT = (
    "Answer the user's question. Call the tools when they help. When you know the answer, "
    "reply without a tool call, giving the final answer inside <answer></answer>."
)

DEFAULT_TASK = ToolTask(
    id="arborl/multiply",
    question="What is 1234 * 5678?",
    answer=7006652,
    verifier="numeric",
)

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_RUNNER = """import json, sys
req = json.loads(sys.stdin.read())
ns = {"__name__": "__arborl_tool__"}
exec(compile(req["source"], "<tool %s>" % req["name"], "exec"), ns)
result = ns[req["name"]](**req["args"])
if result is not None:
    print(result if isinstance(result, str) else json.dumps(result, default=str))
"""


_NEVER_RAN = ("unknown_tool", "invalid_arguments")


def _wants_episode(fn: Any) -> bool:
    """A host tool with state: it asks for the episode (a parameter named `episode`)."""
    return "episode" in inspect.signature(fn).parameters


def extract_answer(content: str) -> str:
    """The `<answer>` part of a reply (the last one), else the whole reply."""
    found = _ANSWER.findall(content)
    return (found[-1] if found else content).strip()


@dataclass
class ToolEpisode:
    """What a host tool that asks for it (a parameter named `episode`) is given: the task and
    a dict that lives as long as the episode. For tools with state, which a stateless
    function of the agent's arguments cannot be: a door that moves the agent to another
    room, a cart that fills. The env passes it after the agent's arguments, so an agent that
    sends an `episode` argument of its own does not reach it. Task code sees it as
    `arborl.tasks.HostToolEpisode` (tasks import nothing of envs).

    `step_label` is for oracles, not the agent: a tool may label the step its call is in
    (e.g. +1 a right door, -1 a locked one: tool-cues). The env clears it before each step
    and reports it as the step's ``info["step_label"]`` (the agent's `Turn.step_label`); it
    is no part of `state`.

    `answer` lets a tool end the episode as reaching a goal does (tool-cues: the last door
    opens on the code): the env scores it as the final answer (the task's verifier), in the
    step of that call. Only host tools hold the episode; the agent cannot set it."""

    task: ToolTask
    state: dict[str, Any] = field(default_factory=dict)
    step_label: float | None = None
    answer: str | None = None


class ToolEnv(ToolCallingEnv):
    """Question answering with task-declared and built-in tools."""

    task_type: ClassVar[type[ToolTask]] = ToolTask
    default_task: ClassVar[ToolTask] = DEFAULT_TASK
    eager_sandbox: ClassVar[bool] = False

    def __init__(
        self,
        *,
        system_prompt: str = SYSTEM_PROMPT,
        python_timeout_s: float = 30.0,
        max_output_bytes: int = 16 * 1024,
        mcp_servers: Sequence[MCPServerConfig | Mapping[str, Any]] = (),
        obs_type: ObsType = "text",
        pictures: str | None = None,
        image_bounds: ImageBounds | Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            system_prompt: used unless the task brings its own.
            python_timeout_s: time limit of one `python` call (and of sandboxed task tools).
            max_output_bytes: head+tail kept of each output stream of sandboxed code.
            mcp_servers: MCP servers whose tools every episode also gets (`mcp.py`).
            obs_type: text | image | both: what a message with pictures shows (module doc).
            pictures: 'module:function' drawing an observation's pictures (needed unless
                obs_type is "text").
            image_bounds: the pictures' largest side and count per observation.
            **kwargs: see `ToolCallingEnv` (parser, ...) and `SandboxEnv` (pool, backend, ...).
        """
        super().__init__(**kwargs)
        if obs_type not in OBS_TYPES:
            raise ValueError(f"obs_type must be one of {OBS_TYPES}, got {obs_type!r}")
        if obs_type != "text" and not pictures:
            raise ValueError(
                f"obs_type={obs_type!r} needs pictures='module:function' (a suite's function that "
                "draws an observation's pictures from its text); without one, use obs_type='text'"
            )
        self.obs_type = obs_type
        self._pictures = load_entry_point(pictures) if pictures and obs_type != "text" else None
        self.image_bounds = (
            image_bounds
            if isinstance(image_bounds, ImageBounds)
            else ImageBounds(**{"max_side": 512, "max_images": 2, **(image_bounds or {})})
        )
        if self._pictures is not None:
            self.observation_space = multimodal_observation_space(self.image_bounds)
        self.system_prompt = system_prompt
        self.python_timeout_s = python_timeout_s
        self.max_output_bytes = max_output_bytes
        self.mcp_servers = as_configs(mcp_servers)
        self._mcp: list[MCPSession] = []
        self._seen: list[str] = []
        self._stateful: set[str] = set()  # host tools with episode state

    def sandbox_spec(self, task: ToolTask) -> SandboxSpec:
        return SandboxSpec(image=task.image, network=False)

    async def on_reset(self, task: ToolTask) -> list[dict[str, str]]:
        self._mcp, served = await open_sessions(self.mcp_servers, self._raw_sandbox)
        try:
            self.toolbox = ToolBox([*self._tools(task), *served])
        except ValueError as e:
            raise TaskError(f"task {task.id}: {e}") from e
        self._seen = []
        self._stateful = {
            d.name for d in task.tools if d.handler and _wants_episode(load_entry_point(d.handler))
        }
        self._episode = ToolEpisode(task)
        return self._shown(
            [
                self.system_message(task.system_prompt or self.system_prompt),
                {"role": "user", "content": task.question},
            ]
        )

    def _shown(
        self, messages: list[dict[str, Any]], drawable: set[int] | None = None
    ) -> list[dict[str, Any]]:
        """`messages` as the policy is shown them: with pictures (module doc), each user or
        tool message the suite's function draws from gets them as image parts.

        Only the env's own texts are drawn (`drawable`: the indices of the question and of the
        results of calls that ran; an error message echoes the agent's own words, which must
        not become pictures). How many pictures a step shows is up to the agent (several
        calls in one reply), so past `image_bounds.max_images` the last ones are kept, the
        earlier messages keep their words without the drawn part (never the words the picture
        replaces), and nothing is raised: a reply can neither crash the env nor read a cue."""
        if self._pictures is None:
            return messages
        drawn: dict[int, tuple[str, list[Any]]] = {}
        for i, m in enumerate(messages):
            content = m.get("content")
            if m.get("role") not in ("user", "tool") or not isinstance(content, str):
                continue
            if drawable is not None and i not in drawable:
                continue
            text, images = self._pictures(content, self.task)
            if images:
                drawn[i] = (text, list(images))
        room = self.image_bounds.max_images
        out = list(messages)
        for i in sorted(drawn, reverse=True):  # the latest first: they show the world as it is now
            text, images = drawn[i]
            content = messages[i]["content"]
            kept, room = images[-room:] if room else [], max(0, room - len(images))
            if not kept:  # over the bound: the words without the drawn part, and say so
                out[i] = {**messages[i], "content": f"{text} (picture not shown: too many in one step)"}
                continue
            words = text if self.obs_type == "image" else content
            parts = [image_part(im, self.image_bounds) for im in kept]
            out[i] = {**messages[i], "content": [*parts, text_part(words)]}
        check_image_count(out, self.image_bounds)  # holds by construction; a broken bound fails loudly
        return out

    async def _raw_sandbox(self) -> Sandbox:
        return (await self.get_sandbox()).raw

    def _end_episode(self, broken: bool = False) -> None:
        close_sessions(getattr(self, "_mcp", []))  # before the sandbox goes back: nothing more reaches it
        self._mcp = []
        super()._end_episode(broken)

    async def on_no_tool_call(self, content: str) -> Step:
        return self._answered(extract_answer(content))

    async def on_step(self, action: str) -> Step:
        self._episode.step_label = None
        step = await super().on_step(action)
        if self._episode.step_label is not None:
            step.info["step_label"] = float(self._episode.step_label)
        if self._pictures is not None:
            messages = (
                [{"role": step.role, "content": step.observation}]
                if isinstance(step.observation, str)
                else [dict(m) for m in step.observation]
            )
            # the results of calls that ran (one message each, in call order, before any
            # parse error's); an answer's "Answer recorded." has no call and nothing to draw
            ran = {i for i, rec in enumerate(step.info.get("tool_calls", [])) if rec.get("ok")}
            shown = self._shown(messages, drawable=ran)
            if any(a is not b for a, b in zip(shown, messages, strict=True)):  # something drawn
                step.observation = shown
        return step

    def _answered(self, answer: str) -> Step:
        reward = score(answer, self.task)
        return Step(
            "Answer recorded.",
            reward=reward,
            terminated=True,
            info={"answer": answer[:4000], "verifier": {"name": self.task.verifier, "reward": reward}},
        )

    def on_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        if call.name in self._stateful or result.error in _NEVER_RAN:
            return  # its world is `self._episode.state` / it changed nothing and told nothing
        self._seen.append(stable_hash([call.name, call.arguments, result.content]))

    async def state_hash(self) -> str:
        """The task, the state host tools keep (any keys and values: `stable_hash` is total)
        and what the tools without state told (module docstring). An empty state adds
        nothing, so tasks without such tools hash their history as they always have."""
        state = self._episode.state
        return stable_hash([self.task_id, sorted(self._seen), *([state] if state else [])])

    # ---- tools --------------------------------------------------------------------------
    def _tools(self, task: ToolTask) -> list[Tool]:
        builtin = task.builtin_tools
        if builtin is None:
            builtin = ("python", "search") if (task.corpus or task.corpus_path) else ("python",)
        makers = {"python": self._python_tool, "search": self._search_tool}
        unknown = set(builtin) - set(makers)
        if unknown:
            raise ValueError(f"unknown built-in tools {sorted(unknown)}; built-in: {sorted(makers)}")
        tools = [makers[name](task) for name in builtin]
        tools += [self._declared(decl) for decl in task.tools]
        tools.append(self._final_answer_tool())
        return tools

    def _python_tool(self, task: ToolTask) -> Tool:
        @function_tool(description="Run Python 3 code in a fresh sandboxed interpreter; returns its output.")
        async def python(
            code: Annotated[str, Field(description="Python 3 source; print what you need")],
        ) -> ToolResult:
            sb = await self.get_sandbox()
            r = await sb.exec(
                ["python3", "-"], stdin=code, timeout=self.python_timeout_s, max_output=self.max_output_bytes
            )
            return ToolResult(
                format_exec(r, self.python_timeout_s),
                ok=not r.timed_out,
                error="timeout" if r.timed_out else None,
            )

        return python

    def _search_tool(self, task: ToolTask) -> Tool:
        @function_tool(description="Search the document collection; returns the best matching documents.")
        async def search(
            query: Annotated[str, Field(description="keywords")],
            # None rather than 3: the schema says the default in words, as the model has always seen it
            k: Annotated[int | None, Field(ge=1, le=10, description="results (default 3)")] = None,
        ) -> str:
            index: BM25 = (
                index_for_path(task.corpus_path) if task.corpus_path else index_for_docs(task.corpus)
            )
            hits = index.search(query, 3 if k is None else k)
            if not hits:
                return "No documents match the query."
            return "\n\n".join(
                f"[{i}] {d.title or d.id} (id: {d.id})\n{d.text[:1500]}" for i, (_, d) in enumerate(hits, 1)
            )

        return search

    def _final_answer_tool(self) -> Tool:
        @function_tool(description="Give your final answer. This ends the episode.")
        async def final_answer(answer: str) -> ToolResult:
            step = self._answered(answer)
            return ToolResult(str(step.observation), terminal=True, reward=step.reward, info=step.info)

        return final_answer

    def _declared(self, decl: ToolDecl) -> Tool:
        if decl.handler is not None:
            fn = load_entry_point(decl.handler)
            wants_episode = _wants_episode(fn)

            async def host(**args: Any) -> Any:
                if wants_episode:
                    args = {**args, "episode": self._episode}
                if asyncio.iscoroutinefunction(fn):
                    out = await fn(**args)
                else:
                    out = await asyncio.to_thread(fn, **args)
                if wants_episode and self._episode.answer is not None:  # the tool ended the episode
                    step = self._answered(self._episode.answer)
                    text = out.content if isinstance(out, ToolResult) else str(out)
                    return ToolResult(text, terminal=True, reward=step.reward, info=step.info)
                return out

            return Tool(decl.name, decl.description, decl.parameters, host)

        async def sandboxed(**args: Any) -> ToolResult:
            sb = await self.get_sandbox()
            request = json.dumps({"source": decl.python, "name": decl.name, "args": args})
            r = await sb.exec(
                ["python3", "-c", _RUNNER],
                stdin=request,
                timeout=self.python_timeout_s,
                max_output=self.max_output_bytes,
            )
            if r.ok:
                return ToolResult(r.stdout.rstrip("\n") or "(no output)")
            return ToolResult(format_exec(r, self.python_timeout_s), ok=False, error="tool_error")

        return Tool(decl.name, decl.description, decl.parameters, sandboxed)
