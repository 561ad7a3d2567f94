"""`arborl/BFCL-v0`: BFCL v4 function calling, single- and multi-turn, scored by bfcl-eval.

Single-turn (simple, multiple, parallel, live_*, irrelevance): the first observation is
the entry's question, `info["tools"]` its function docs (converted to OpenAI tool schemas
by bfcl-eval's own `convert_to_tool`, names unchanged). One reply ends the episode: its
calls, read by arborl's tool-call parser (`parser=`, hermes by default), are scored by
bfcl-eval's checker (`arborl.tasks.bfcl.grading`). A reply the parser cannot read is a
failed decode, scored as bfcl-eval's runner scores one (wrong, or right on irrelevance).

Multi-turn (multi_turn_base, miss_func, miss_param, long_context): each reply with calls
runs them, in order, against the episode's own fresh instances of BFCL's backend classes
(file system, trading, travel, ...) and gets one role-"tool" message per call back; a reply
without calls (or one the parser cannot read: bfcl-eval skips a step it cannot decode) ends
the user turn and the next turn's message follows. After the last turn
the run is scored by bfcl-eval's state and response checks; more than 20 steps in one turn
(bfcl-eval's `MAXIMUM_STEP_LIMIT`) or a budget cut ends it at 0, like bfcl-eval's
force-termination. When a miss_func turn adds functions, they go to `info["tools"]` of that
step and, since a chat's tool block is rendered once, into the turn's message as JSON.

The state hash of a multi-turn run is the task, the user turn and the backends' state
(`state.py`: every attribute but constant text and random generators; the file system's
tree and working directory): equal backends in one turn are one GiGPO anchor.

The agent's text reaches a backend only as a parsed name and JSON arguments dispatched to
a public method of an involved class (`arborl.tasks.bfcl.backends`): nothing is eval-ed,
and private, dunder and unknown names are refused. A backend that fails to load raises
`BackendError` (an infrastructure error), never a 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from arborl.tasks.bfcl.backends import Backends
from arborl.tasks.bfcl.data import BfclTask
from arborl.tasks.bfcl.grading import Calls, Verdict, score_multi_turn, score_single

from ..base import Step, TextEnv, stable_hash
from ..parsers import ToolCallParser, get_parser
from .state import backend_state
from .tools import ADDED_FUNCTIONS_PROMPT, MAX_STEPS_PER_TURN, openai_tools

DEFAULT_TASK = BfclTask(
    id="simple_python_1",
    category="simple_python",
    entry={
        "id": "simple_python_1",
        "question": [[{"role": "user", "content": "Calculate the factorial of 5 using math functions."}]],
        "function": [
            {
                "name": "math.factorial",
                "description": "Calculate the factorial of a given number.",
                "parameters": {
                    "type": "dict",
                    "properties": {"number": {"type": "integer", "description": "The number."}},
                    "required": ["number"],
                },
            }
        ],
    },
    ground_truth=[{"math.factorial": {"number": [5]}}],
)


class BfclEnv(TextEnv):
    """BFCL v4 entries, single- and multi-turn, scored by bfcl-eval's own checker."""

    task_type: ClassVar[type[BfclTask]] = BfclTask
    default_task: ClassVar[Any] = DEFAULT_TASK

    def __init__(
        self, *, parser: str | ToolCallParser = "hermes", tools_in_prompt: bool = False, **kwargs: Any
    ) -> None:
        """
        Args:
            parser: a registered tool-call parser name (`hermes`, `qwen3_coder`, `json`) or one.
            tools_in_prompt: also describe the tools in a system message, for models served
                without a chat template that renders `info["tools"]`.
        """
        super().__init__(**kwargs)
        self.parser = get_parser(parser)
        self.tools_in_prompt = tools_in_prompt
        self._functions: list[dict[str, Any]] = []
        self._tools: list[dict[str, Any]] = []
        self._backends: Backends | None = None
        self._turns: list[list[Calls]] = []
        self._steps_in_turn = 0

    # ---- episode ----------------------------------------------------------------------
    async def on_reset(self, task: BfclTask) -> Sequence[Mapping[str, Any]]:
        self._functions = list(task.entry["function"])
        self._tools = openai_tools(self._functions)
        self._turns, self._steps_in_turn, self._backends = [], 0, None
        if task.scoring == "multi_turn":
            self._backends = Backends(task.entry, long_context="long_context" in task.category)
            self._turns = [[]]
        messages = self._turn_messages(0)
        if self.tools_in_prompt:
            prompt = self.parser.instructions(self._tools)
            messages = [{"role": "system", "content": prompt}, *messages]
        return messages

    def reset_info(self) -> dict[str, Any]:
        return {"tools": list(self._tools), "parser": self.parser.name, "bfcl_turn": 0}

    async def on_step(self, action: str) -> Step:
        task: BfclTask = self.task
        parsed = self.parser.parse(action, _parameter_schemas(self._tools))
        calls = None if parsed.errors else [(c.name, dict(c.arguments)) for c in parsed.calls]
        info: dict[str, Any] = {"parse_errors": list(parsed.errors), "format_error": bool(parsed.errors)}
        if task.scoring != "multi_turn":
            return _scored(score_single(task, calls), info)
        if calls:
            return self._run_calls(calls, info)
        return self._end_turn(info)

    async def on_finish(self) -> tuple[float, dict[str, Any]]:
        """A budget cut a run short: bfcl-eval counts a run that did not finish as wrong."""
        return 0.0, {"bfcl_valid": False, "bfcl_error_type": "multi_turn:force_terminated"}

    async def state_hash(self) -> str:
        if self._backends is None:
            return await super().state_hash()
        return stable_hash([self.task_id, len(self._turns), backend_state(self._backends)])

    # ---- multi-turn -------------------------------------------------------------------
    def _run_calls(self, calls: Calls, info: dict[str, Any]) -> Step:
        assert self._backends is not None
        self._steps_in_turn += 1
        if self._steps_in_turn > MAX_STEPS_PER_TURN:
            info.update(bfcl_valid=False, bfcl_error_type="multi_turn:force_terminated")
            return Step(
                f"Stopped: more than {MAX_STEPS_PER_TURN} steps in one turn.", terminated=True, info=info
            )
        self._turns[-1].append(calls)
        results = self._backends.run(calls)
        info.update(
            tool_calls=[
                {
                    "name": n[:80],
                    "ok": not r.startswith("Error during execution"),
                    "error": None,
                    "duration_s": 0.0,
                }
                for (n, _), r in zip(calls, results, strict=True)
            ],
            n_tool_calls=len(calls),
            bfcl_turn=len(self._turns) - 1,
        )
        return Step([{"role": "tool", "content": r} for r in results], info=info, role="tool")

    def _end_turn(self, info: dict[str, Any]) -> Step:
        task: BfclTask = self.task
        if len(self._turns) >= len(task.turns):
            return _scored(score_multi_turn(task, self._turns), info)
        self._turns.append([])
        self._steps_in_turn = 0
        index = len(self._turns) - 1
        info["bfcl_turn"] = index
        messages = self._turn_messages(index)
        if self._turn_adds_functions(index):
            info["tools"] = list(self._tools)
        return Step(messages, info=info)

    def _turn_adds_functions(self, index: int) -> bool:
        return str(index) in (self.task.entry.get("missed_function") or {})

    def _turn_messages(self, index: int) -> list[dict[str, Any]]:
        task: BfclTask = self.task
        messages = [dict(m) for m in task.turns[index]]
        added = (task.entry.get("missed_function") or {}).get(str(index))
        if added:
            # the held-out functions join the tool list; bfcl-eval's FC prompt announces them
            self._functions += list(added)
            self._tools = openai_tools(self._functions)
            listing = json.dumps(openai_tools(list(added)), ensure_ascii=False)
            messages = [{"role": "user", "content": f"{ADDED_FUNCTIONS_PROMPT}\n{listing}"}]
        return messages


def _scored(verdict: Verdict, info: dict[str, Any]) -> Step:
    info.update(bfcl_valid=verdict.valid, bfcl_error_type=verdict.error_type)
    text = "Correct." if verdict.valid else f"Incorrect ({verdict.error_type})."
    return Step(text, reward=verdict.reward, terminated=True, info=info)


def _parameter_schemas(tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {t["function"]["name"]: t["function"].get("parameters", {}) for t in tools}
