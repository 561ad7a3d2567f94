"""BFCL function docs as the tool schemas a chat template renders, by bfcl-eval's own
conversion (`convert_to_tool`: BFCL's `dict`/`float`/`tuple` types to JSON schema's)."""

from __future__ import annotations

from typing import Any

from arborl.tasks.bfcl.official import bfcl

#: bfcl-eval's step limit per user turn (`MAXIMUM_STEP_LIMIT`): a turn past it is force-quit.
MAX_STEPS_PER_TURN = 20
#: bfcl-eval's user message of a miss_func turn (`DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC`).
ADDED_FUNCTIONS_PROMPT = "I have updated some more functions you can choose from. What about now?"


def openai_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`[{"type": "function", "function": {...}}]`, names kept as BFCL writes them."""
    bfcl()
    from bfcl_eval.constants.enums import ModelStyle
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
    from bfcl_eval.model_handler.utils import convert_to_tool

    # an OpenAI-shaped style that keeps dotted names (arborl's checker model has
    # underscore_to_dot False); it folds each doc's `response` schema into its description
    tools: list[dict[str, Any]] = convert_to_tool(functions, GORILLA_TO_OPENAPI, ModelStyle.FIREWORK_AI)
    return tools
