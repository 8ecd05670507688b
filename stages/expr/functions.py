"""The documented function set: one row per function, with its typing rule and implementation.

``FUNCTIONS`` is the single source of truth: the checker reads the typing rules, the code
generator binds the implementations as ``_f_<name>`` in generated code's namespace, and the
README / ``docs/expressions.md`` list the signatures and descriptions from here. Every function
takes positional arguments only; a missing (null) argument makes the call's result missing,
except for ``coalesce``, which exists to supply defaults.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stages.expr import runtime
from stages.expr.types import ExprType, numeric_join

N = ExprType.NUMBER
I = ExprType.INTEGER  # noqa: E741 - reads like the type letter in signatures
B = ExprType.BOOLEAN
S = ExprType.STRING


class TypeRuleError(Exception):
    """A typing rule refused the argument types (the checker adds the position)."""


TypeRule = Callable[[tuple[ExprType, ...]], ExprType]


@dataclass(frozen=True, kw_only=True)
class Function:
    """One callable of the language."""

    name: str
    signature: str
    doc: str
    min_args: int
    max_args: int
    rule: TypeRule
    impl: Callable[..., Any] | None
    """``None`` for ``coalesce``, which the code generator inlines (it must be lazy)."""


def _numeric(args: tuple[ExprType, ...]) -> None:
    for position, arg in enumerate(args, 1):
        if not arg.numeric:
            raise TypeRuleError(f"argument {position} must be a number, got {arg.value}")


def _same_numeric(args: tuple[ExprType, ...]) -> ExprType:
    _numeric(args)
    return numeric_join(*args)


def _to_number(args: tuple[ExprType, ...]) -> ExprType:
    _numeric(args)
    return N


def _to_integer(args: tuple[ExprType, ...]) -> ExprType:
    _numeric(args)
    return I


def _round(args: tuple[ExprType, ...]) -> ExprType:
    _numeric(args)
    if len(args) == 1:
        return I
    if args[1] is not I:
        raise TypeRuleError("the number of digits must be an integer")
    return N


def _coalesce(args: tuple[ExprType, ...]) -> ExprType:
    if all(arg.numeric for arg in args):
        return numeric_join(*args)
    if len(set(args)) != 1:
        raise TypeRuleError("all arguments must have the same type, got "
                            + ", ".join(arg.value for arg in args))
    return args[0]


def _convertible(result: ExprType) -> TypeRule:
    def rule(args: tuple[ExprType, ...]) -> ExprType:
        return result

    return rule


def _strings(result: ExprType) -> TypeRule:
    def rule(args: tuple[ExprType, ...]) -> ExprType:
        for position, arg in enumerate(args, 1):
            if arg is not S:
                raise TypeRuleError(f"argument {position} must be a string, got {arg.value}")
        return result

    return rule


_MANY = 16


def _fn(name: str, signature: str, doc: str, arity: tuple[int, int], rule: TypeRule,
        impl: Callable[..., Any] | None) -> Function:
    return Function(name=name, signature=signature, doc=doc, min_args=arity[0],
                    max_args=arity[1], rule=rule, impl=impl)


FUNCTIONS: dict[str, Function] = {f.name: f for f in (
    _fn("abs", "abs(x)", "absolute value; integer stays integer", (1, 1), _same_numeric, abs),
    _fn("min", "min(a, b, ...)", "smallest argument", (2, _MANY), _same_numeric, min),
    _fn("max", "max(a, b, ...)", "largest argument", (2, _MANY), _same_numeric, max),
    _fn("clamp", "clamp(x, lo, hi)", "x limited to [lo, hi] (lo wins if lo > hi)", (3, 3),
        _same_numeric, runtime.clamp),
    _fn("sign", "sign(x) -> integer", "-1, 0 or 1", (1, 1), _to_integer, runtime.sign),
    _fn("round", "round(x) -> integer; round(x, digits) -> number",
        "round half to even (banker's rounding), as Python does", (1, 2), _round, None),
    _fn("floor", "floor(x) -> integer", "largest integer <= x", (1, 1), _to_integer, math.floor),
    _fn("ceil", "ceil(x) -> integer", "smallest integer >= x", (1, 1), _to_integer, math.ceil),
    _fn("trunc", "trunc(x) -> integer", "x with its fraction dropped (toward zero)", (1, 1),
        _to_integer, math.trunc),
    _fn("sqrt", "sqrt(x)", "square root (x >= 0)", (1, 1), _to_number, math.sqrt),
    _fn("exp", "exp(x)", "e raised to x", (1, 1), _to_number, math.exp),
    _fn("log", "log(x); log(x, base)", "natural logarithm, or logarithm to base", (1, 2),
        _to_number, math.log),
    _fn("log10", "log10(x)", "base-10 logarithm", (1, 1), _to_number, math.log10),
    _fn("log2", "log2(x)", "base-2 logarithm", (1, 1), _to_number, math.log2),
    _fn("sin", "sin(x)", "sine of x radians", (1, 1), _to_number, math.sin),
    _fn("cos", "cos(x)", "cosine of x radians", (1, 1), _to_number, math.cos),
    _fn("tan", "tan(x)", "tangent of x radians", (1, 1), _to_number, math.tan),
    _fn("asin", "asin(x)", "arc sine, radians", (1, 1), _to_number, math.asin),
    _fn("acos", "acos(x)", "arc cosine, radians", (1, 1), _to_number, math.acos),
    _fn("atan", "atan(x)", "arc tangent, radians", (1, 1), _to_number, math.atan),
    _fn("atan2", "atan2(y, x)", "angle of the point (x, y), radians", (2, 2), _to_number,
        math.atan2),
    _fn("hypot", "hypot(x, y)", "sqrt(x*x + y*y) without overflow", (2, 2), _to_number,
        math.hypot),
    _fn("degrees", "degrees(x)", "radians to degrees", (1, 1), _to_number, math.degrees),
    _fn("radians", "radians(x)", "degrees to radians", (1, 1), _to_number, math.radians),
    _fn("coalesce", "coalesce(a, b, ...)",
        "first argument that is not missing (all of one type); later ones are not evaluated",
        (2, _MANY), _coalesce, None),
    _fn("number", "number(x) -> number", "convert a number, boolean or numeric string",
        (1, 1), _convertible(N), runtime.to_number),
    _fn("integer", "integer(x) -> integer",
        "convert a number (truncating), boolean or numeric string", (1, 1), _convertible(I),
        runtime.to_integer),
    _fn("string", "string(x) -> string", "text of any value (booleans as true/false)",
        (1, 1), _convertible(S), runtime.to_string),
    _fn("len", "len(s) -> integer", "number of characters", (1, 1), _strings(I), len),
    _fn("lower", "lower(s) -> string", "lower case", (1, 1), _strings(S), str.lower),
    _fn("upper", "upper(s) -> string", "upper case", (1, 1), _strings(S), str.upper),
    _fn("trim", "trim(s) -> string", "without leading and trailing whitespace", (1, 1),
        _strings(S), str.strip),
)}
"""Every function of the language, by name."""


def function_globals() -> dict[str, Any]:
    """The ``_f_<name>`` bindings generated code calls."""
    bound: dict[str, Any] = {f"_f_{f.name}": f.impl for f in FUNCTIONS.values() if f.impl}
    bound["_f_round"] = round
    bound["_f_round_to"] = runtime.round_to
    return bound
