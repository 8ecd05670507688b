"""Tideway's expression language for ``mutate`` and ``derived`` parameters.

Expressions are data written by operators in schema files, never code: they are parsed with a
strict whitelist over Python's expression grammar, type checked against the schema's
parameters, and compiled once per schema version into a small Python function that runs with no
builtins and only the helpers in :mod:`stages.expr.runtime`.

The language (full reference in ``docs/expressions.md``):

* literals: integers (64-bit), numbers (finite floats), strings, ``true``/``false``, ``pi``;
* names: the topic's parameters, and ``value`` (the parameter's own extracted value) in
  ``mutate``;
* arithmetic ``+ - * / // % **``, comparison ``== != < <= > >=`` (chains allowed), ``and``,
  ``or``, ``not``, and ``x if condition else y``;
* the functions in :data:`FUNCTIONS` (``abs, min, max, clamp, sign, round, floor, ceil, trunc,
  sqrt, exp, log, log10, log2, sin, cos, tan, asin, acos, atan, atan2, hypot, degrees,
  radians, coalesce, number, integer, string, len, lower, upper, trim``).

A missing value (absent, null or invalid) makes every operation that needs it missing, so a
derived parameter over an absent input is itself absent rather than an error; ``coalesce``
supplies defaults. Errors carry stable codes (``EXPR_*`` when compiling, ``EVAL_*`` when
evaluating); see :mod:`stages.expr.errors`.
"""

from __future__ import annotations

from stages.expr.compiler import (
    CompiledExpression,
    compile_expression,
    dependencies,
    parse_expression,
)
from stages.expr.errors import ExprCompileError, ExprError, ExprEvalError, translate_eval_error
from stages.expr.functions import FUNCTIONS, Function
from stages.expr.parser import CONSTANTS
from stages.expr.types import ExprType

__all__ = [
    "CONSTANTS",
    "FUNCTIONS",
    "CompiledExpression",
    "ExprCompileError",
    "ExprError",
    "ExprEvalError",
    "ExprType",
    "Function",
    "compile_expression",
    "dependencies",
    "parse_expression",
    "translate_eval_error",
]
