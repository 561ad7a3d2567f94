"""Importing bfcl-eval's own checker (installed `--no-deps`, scripts/setup.sh).

bfcl-eval's `ast_checker` module imports its model table (`constants.model_config`), and that
table imports some sixty vendor handlers and their SDKs (Cohere, Bedrock, Gemini, Qwen-Agent,
...); bfcl-eval's declared dependencies would also move numpy. The checker reads one field
of the table: `underscore_to_dot`, whether the model saw `math.factorial` as
`math_factorial` (OpenAI-style APIs forbid dots in names). arborl shows the model the names
unchanged, so the answer is False, as bfcl-eval's table says for its local FC models. When
the table is not already loaded, a stand-in module holding that one entry takes its place;
when it is, the entry is added to it. Nothing else of bfcl-eval is replaced.

Re-scoring bfcl-eval result files of a model that saw the names mangled
(`arborl.tasks.bfcl.rescoring`), the checker is given `UNDERSCORED_MODEL_NAME`, a second entry
whose `underscore_to_dot` is True: bfcl-eval's `convert_func_name` then maps the possible
answer's `math.gcd` to `math_gcd` before comparing, exactly as for such a model of its own.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Any

#: The model name arborl passes to bfcl-eval's checkers.
MODEL_NAME = "arborl"
#: The same, for a model that saw dotted function names with "." turned into "_" (no "_" in
#: it: bfcl-eval looks the name up with every "_" turned into "/").
UNDERSCORED_MODEL_NAME = "arborl-underscore-to-dot"
PIN = "bfcl-eval==2026.3.23"


class BfclUnavailable(ImportError):
    """bfcl-eval is not installed; the message says how to install it."""


@dataclass(frozen=True)
class _ModelConfig:
    """The fields of bfcl-eval's `ModelConfig` its checkers read for arborl's model."""

    model_name: str = MODEL_NAME
    display_name: str = MODEL_NAME
    is_fc_model: bool = True
    underscore_to_dot: bool = False


def _install_model_table() -> None:
    name = "bfcl_eval.constants.model_config"
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(
            name, "arborl's stand-in for bfcl-eval's model table (see arborl.tasks.bfcl.official)"
        )
        module.MODEL_CONFIG_MAPPING = {}  # type: ignore[attr-defined]
        sys.modules[name] = module
    module.MODEL_CONFIG_MAPPING.setdefault(MODEL_NAME, _ModelConfig())
    module.MODEL_CONFIG_MAPPING.setdefault(
        UNDERSCORED_MODEL_NAME,
        _ModelConfig(UNDERSCORED_MODEL_NAME, UNDERSCORED_MODEL_NAME, underscore_to_dot=True),
    )


def bfcl() -> types.SimpleNamespace:
    """bfcl-eval's checker functions, loaders and backend table."""
    try:
        import bfcl_eval  # noqa: F401
    except ImportError as e:
        raise BfclUnavailable(
            f"bfcl-eval is not installed: run `pip install --no-deps '{PIN}' overrides tenacity` "
            "(scripts/setup.sh does)"
        ) from e
    _install_model_table()
    from bfcl_eval.constants import executable_backend_config as backends
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker as mt

    return types.SimpleNamespace(
        ast_checker=ast_checker,
        Language=Language,
        state_checker=mt.state_checker,
        response_checker=mt.response_checker,
        is_empty_execute_response=mt.is_empty_execute_response,
        CLASS_FILE_PATH_MAPPING=backends.CLASS_FILE_PATH_MAPPING,
        STATELESS_CLASSES=backends.STATELESS_CLASSES,
    )


def bfcl_decoders() -> types.SimpleNamespace:
    """bfcl-eval's decoding of stored model output (its handlers' shared helpers) and the
    shape checks its runner applies to what they return."""
    bfcl()
    from bfcl_eval.constants.enums import ReturnFormat
    from bfcl_eval.model_handler import utils as handler_utils
    from bfcl_eval.utils import (
        extract_test_category,
        extract_test_category_from_id,
        is_empty_output,
        is_function_calling_format_output,
    )

    return types.SimpleNamespace(
        ReturnFormat=ReturnFormat,
        decode_ast_prompting=handler_utils.default_decode_ast_prompting,
        decode_execute_prompting=handler_utils.default_decode_execute_prompting,
        convert_to_function_call=handler_utils.convert_to_function_call,
        is_function_calling_format_output=is_function_calling_format_output,
        is_empty_output=is_empty_output,
        category_of_file=extract_test_category,
        category_of_id=extract_test_category_from_id,
    )


def bfcl_utils() -> Any:
    """bfcl-eval's dataset loaders (`load_dataset_entry`, `load_ground_truth_entry`)."""
    bfcl()
    from bfcl_eval import utils

    return utils
