"""The calculator: tool-mini's trusted host tool (and its declaration, which tasks carry).

An `ast` walk over numbers and arithmetic operators (never `eval`), with bounds on size and
exponents.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from ..task_types import ToolDecl

CALCULATOR = ToolDecl(
    name="calculator",
    description="Evaluate an arithmetic expression, e.g. 37 * 12.",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "numbers, + - * / ( )"}},
        "required": ["expression"],
        "additionalProperties": False,
    },
    handler="arborl.tasks.toy.calculator:calculator",
)


class CalculatorError(ValueError):
    """An expression the calculator refuses; the message tells the model what it accepts."""


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
MAX_EXPRESSION_CHARS = 200
MAX_MAGNITUDE = 10**15
MAX_DEPTH = 32


def calculator(expression: str) -> str:
    """The value of an arithmetic expression (numbers, + - * / // % **, parentheses).

    Hand-written over `ast` rather than a library because it must be small, dependency-free
    and safe: only number literals and those operators are walked; names, calls, attributes
    and everything else are refused, and operands, results and exponents are bounded so no
    expression can take long or use much memory.
    """
    text = str(expression).strip().replace("×", "*").replace("÷", "/")
    if not text:
        raise CalculatorError("empty expression; write e.g. 37 * 12")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError) as e:
        raise CalculatorError(f"cannot parse {text!r}: use numbers, + - * / ( )") from e
    value = _evaluate(tree.body, 0)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CalculatorError("the result is not a finite number")
        return str(int(value)) if value.is_integer() and abs(value) < 2**53 else f"{value:.10g}"
    return str(value)


def _evaluate(node: ast.AST, depth: int) -> int | float:
    if depth > MAX_DEPTH:
        raise CalculatorError("expression nested too deeply")
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _bounded(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _bounded(_UNARY[type(node.op)](_evaluate(node.operand, depth + 1)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, depth + 1), _evaluate(node.right, depth + 1)
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or (abs(left) > 1 and abs(right) > 50)):
            raise CalculatorError("exponent too large")
        try:
            return _bounded(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError as e:
            raise CalculatorError("division by zero") from e
        except (OverflowError, TypeError) as e:
            raise CalculatorError(f"cannot compute: {e}") from e
    what = type(node).__name__
    raise CalculatorError(f"unsupported element ({what}): only numbers, + - * / // % ** and parentheses")


def _bounded(value: Any) -> int | float:
    if isinstance(value, complex):
        raise CalculatorError("the result is not a real number")
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError(f"number too large (limit {MAX_MAGNITUDE:.0e})")
    return value
