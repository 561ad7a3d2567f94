"""`ToolCallingEnv`: the step loop shared by the code and tool envs.

One step: parse the reply with the configured parser → check each call against its schema
→ run the calls in order → one role-"tool" message per call (result or readable error).
A call whose result is terminal (submit, final answer) ends the episode; calls after it
are skipped. A reply with no call goes to `on_no_tool_call` (a nudge, or a final answer).

Per-step `info`:
    tool_calls      [{"name", "ok", "error", "duration_s"}, ...] in call order
    n_tool_calls, n_tool_errors
    parse_errors    what the parser could not read (list of str)
    format_error    True when the reply broke the format (parse errors, or no call where one is needed)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Step
from .parsers import ToolCall, ToolCallParser, get_parser
from .sandboxed import SandboxEnv
from .toolbox import ToolBox, ToolResult


class ToolCallingEnv(SandboxEnv):
    """A SandboxEnv whose actions are tool calls. Subclasses set `self.toolbox` in on_reset."""

    def __init__(
        self,
        *,
        parser: str | ToolCallParser = "hermes",
        max_calls_per_step: int = 8,
        tools_in_prompt: bool = False,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            parser: a registered parser name (`hermes`, `qwen3_coder`, `json`) or an instance.
            max_calls_per_step: calls beyond this in one reply are not run (an error says so).
            tools_in_prompt: also describe the tools in the system message, for models served
                without a chat template that renders `info["tools"]`.
        """
        super().__init__(**kwargs)
        self.parser = get_parser(parser)
        self.max_calls_per_step = max_calls_per_step
        self.tools_in_prompt = tools_in_prompt
        self.toolbox = ToolBox()

    def reset_info(self) -> dict[str, Any]:
        return {"tools": self.toolbox.schemas(), "parser": self.parser.name}

    def system_message(self, prompt: str) -> dict[str, str]:
        if self.tools_in_prompt:
            prompt = f"{prompt}\n\n{self.parser.instructions(self.toolbox.schemas())}"
        return {"role": "system", "content": prompt}

    async def on_no_tool_call(self, content: str) -> Step:
        """The reply had no tool call (default: say how to make one; the episode goes on)."""
        return Step(
            "Error: no tool call found in your reply. Call a tool, formatted like this:\n"
            f"{self.parser.format_hint()}\nAvailable tools: {', '.join(self.toolbox.tools)}.",
            info={"format_error": True},
        )

    def on_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        """Called after each call ran (e.g. to keep what the state hash needs)."""

    async def on_step(self, action: str) -> Step:
        parsed = self.parser.parse(action, self.toolbox.parameter_schemas())
        base_info: dict[str, Any] = {
            "tool_calls": [],
            "n_tool_calls": 0,
            "n_tool_errors": 0,
            "parse_errors": list(parsed.errors),
            "format_error": bool(parsed.errors),
        }
        if not parsed.calls and not parsed.errors:
            step = await self.on_no_tool_call(parsed.content)
            step.info = {**base_info, **step.info}
            return step
        messages: list[Mapping[str, Any]] = []
        records: list[dict[str, Any]] = []
        ending: ToolResult | None = None
        for i, call in enumerate(parsed.calls):
            if ending is not None:
                result = ToolResult(
                    "Skipped: the episode already ended with an earlier call.", ok=False, error="skipped"
                )
            elif i >= self.max_calls_per_step:
                result = ToolResult(
                    f"Skipped: at most {self.max_calls_per_step} tool calls run per reply.",
                    ok=False,
                    error="skipped",
                )
            else:
                result = await self.toolbox.run(call)
                self.on_tool_result(call, result)
                if result.terminal:
                    ending = result
            messages.append({"role": "tool", "content": result.content})
            records.append(
                {
                    "name": call.name[:80],
                    "ok": result.ok,
                    "error": result.error,
                    "duration_s": result.duration_s,
                }
            )
        messages += [
            {
                "role": "tool",
                "content": f"Error: could not read a tool call: {e}\nExpected format:\n"
                f"{self.parser.format_hint()}",
            }
            for e in parsed.errors
        ]
        info = {
            **base_info,
            "tool_calls": records,
            "n_tool_calls": len(records),
            "n_tool_errors": sum(not r["ok"] for r in records) + len(parsed.errors),
        }
        if ending is not None:
            info.update(ending.info)
        return Step(
            messages,
            reward=float(ending.reward or 0.0) if ending else 0.0,
            terminated=ending is not None,
            info=info,
            role="tool",
        )
