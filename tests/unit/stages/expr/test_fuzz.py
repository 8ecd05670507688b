"""Property-based fuzzing: no input escapes, crashes, hangs or yields an ill-typed value.

Whatever the text, ``compile_expression`` either returns or raises ``ExprCompileError``; a
compiled expression evaluated on any values of the declared types either returns a value of its
declared type (or ``None`` for missing) or raises ``ExprEvalError``. Hypothesis' deadline turns a
slow case (an unbounded power, a runaway string) into a failure.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stages.expr import FUNCTIONS, ExprCompileError, ExprEvalError, ExprType, compile_expression
from stages.expr.limits import INT_MAX, INT_MIN, MAX_STRING_LENGTH

ENV = {"x": ExprType.NUMBER, "y": ExprType.NUMBER, "n": ExprType.INTEGER,
       "s": ExprType.STRING, "flag": ExprType.BOOLEAN}
FUZZ = settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.too_slow])

names = st.sampled_from([*ENV, "value", "unknown", "__class__", "__import__", "pi", "true"])
literals = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["1e308", "1e-320", "0", "0.0", "9" * 30, "'a'", "''", "\"x\" * 3",
                     "None", "b''", "1j", "...", "True", "False"]),
)
binary_ops = st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "==", "!=", "<", "<=", ">",
                              ">=", "and", "or", "^", "&", "|", "<<", "is", "in", "@"])
unary_ops = st.sampled_from(["-", "+", "not ", "~"])
functions = st.sampled_from([*FUNCTIONS, "eval", "open", "getattr", "type", "__import__"])


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, binary_ops, children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(unary_ops, children).map(lambda t: f"({t[0]}{t[1]})"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        st.tuples(functions, st.lists(children, max_size=4)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"),
        st.tuples(children, st.sampled_from(["real", "__class__", "__globals__"])).map(
            lambda t: f"{t[0]}.{t[1]}"),
        children.map(lambda c: f"{c}[0]"),
        children.map(lambda c: f"(lambda: {c})()"),
        children.map(lambda c: f"[{c} for _ in (1, 2)]"),
        children.map(lambda c: f"(n := {c})"),
    )


expressions = st.recursive(st.one_of(names, literals), _combine, max_leaves=25)

# A typed generator: mostly well-typed expressions, so evaluation itself gets fuzzed.
num: st.SearchStrategy[str] = st.deferred(lambda: st.one_of(
    st.sampled_from(["x", "y", "value", "pi", "0.0", "1e308", "-1e-300", "2.5"]),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    integer,
    st.tuples(num, st.sampled_from(["+", "-", "*", "/", "//", "%", "**"]), num).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})"),
    num.map(lambda a: f"(-{a})"),
    st.tuples(st.sampled_from(["sqrt", "exp", "log", "log10", "log2", "sin", "cos", "tan",
                               "asin", "acos", "atan", "degrees", "radians", "abs"]), num).map(
        lambda t: f"{t[0]}({t[1]})"),
    st.tuples(st.sampled_from(["min", "max", "atan2", "hypot", "log", "coalesce"]), num, num).map(
        lambda t: f"{t[0]}({t[1]}, {t[2]})"),
    st.tuples(num, num, num).map(lambda t: f"clamp({t[0]}, {t[1]}, {t[2]})"),
    st.tuples(num, boolean, num).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
    st.tuples(num, integer).map(lambda t: f"round({t[0]}, {t[1]})"),
    text.map(lambda a: f"number({a})"),
))
integer: st.SearchStrategy[str] = st.deferred(lambda: st.one_of(
    st.sampled_from(["n", "0", "1", "9223372036854775807", "-1"]),
    st.integers(min_value=-(2**63), max_value=2**63).map(str),
    st.tuples(integer, st.sampled_from(["+", "-", "*", "//", "%"]), integer).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})"),
    st.tuples(integer, st.integers(min_value=0, max_value=40)).map(lambda t: f"({t[0]} ** {t[1]})"),
    st.tuples(st.sampled_from(["round", "floor", "ceil", "trunc", "sign", "integer"]), num).map(
        lambda t: f"{t[0]}({t[1]})"),
    text.map(lambda a: f"len({a})"),
    text.map(lambda a: f"integer({a})"),
))
boolean: st.SearchStrategy[str] = st.deferred(lambda: st.one_of(
    st.sampled_from(["flag", "true", "false"]),
    st.tuples(num, st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), num).map(" ".join),
    st.tuples(text, st.sampled_from(["<", "==", "!="]), text).map(" ".join),
    boolean.map(lambda a: f"(not {a})"),
    st.tuples(boolean, st.sampled_from(["and", "or"]), boolean).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})"),
))
text: st.SearchStrategy[str] = st.deferred(lambda: st.one_of(
    st.sampled_from(["s", "'abc'", "''", "'12'", "' 3.5 '"]),
    st.tuples(text, text).map(lambda t: f"({t[0]} + {t[1]})"),
    st.one_of(num, integer, boolean).map(lambda a: f"string({a})"),
    st.tuples(st.sampled_from(["lower", "upper", "trim"]), text).map(lambda t: f"{t[0]}({t[1]})"),
    st.tuples(text, boolean, text).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
    st.tuples(text, text).map(lambda t: f"coalesce({t[0]}, {t[1]})"),
))
typed = {ExprType.NUMBER: num, ExprType.INTEGER: integer, ExprType.BOOLEAN: boolean,
         ExprType.STRING: text}

values = st.fixed_dictionaries({
    "x": st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)),
    "y": st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)),
    "n": st.one_of(st.none(), st.integers(min_value=INT_MIN, max_value=INT_MAX)),
    "s": st.one_of(st.none(), st.text(max_size=50)),
    "flag": st.one_of(st.none(), st.booleans()),
})
result_types = st.sampled_from(list(ExprType))


def _assert_well_typed(value: Any, declared: ExprType) -> None:
    if value is None:
        return
    if declared is ExprType.NUMBER:
        assert type(value) is float and math.isfinite(value)
    elif declared is ExprType.INTEGER:
        assert type(value) is int and INT_MIN <= value <= INT_MAX
    elif declared is ExprType.BOOLEAN:
        assert type(value) is bool
    else:
        assert type(value) is str and len(value) <= MAX_STRING_LENGTH


def _compile_and_run(source: str, declared: ExprType, data: dict[str, Any]) -> None:
    try:
        compiled = compile_expression(source, {**ENV, "value": declared}, result_type=declared,
                                      keys={"value": "x"})
    except ExprCompileError as exc:
        assert exc.code.startswith("EXPR_")
        return
    try:
        result = compiled.evaluate(data)
    except ExprEvalError as exc:
        assert exc.code.startswith("EVAL_")
        return
    _assert_well_typed(result, declared)


@FUZZ
@given(source=expressions, declared=result_types, data=values)
def test_random_expression_trees_never_escape(source: str, declared: ExprType,
                                              data: dict[str, Any]) -> None:
    _compile_and_run(source, declared, data)


@FUZZ
@given(data=values, pair=result_types.flatmap(lambda t: st.tuples(st.just(t), typed[t])))
def test_random_well_typed_expressions_evaluate_safely(data: dict[str, Any],
                                                       pair: tuple[ExprType, str]) -> None:
    declared, source = pair
    _compile_and_run(source, declared, data)


_TOKEN_CHARS = "xyns flag value_.()[]{}'\"+-*/%<>=!&|^~@:,;#\\\n\t0123456789eE jlambdaif else"


@FUZZ
@given(source=st.text(alphabet=_TOKEN_CHARS, max_size=120), declared=result_types, data=values)
def test_random_token_soup_never_escapes(source: str, declared: ExprType,
                                         data: dict[str, Any]) -> None:
    _compile_and_run(source, declared, data)


@FUZZ
@given(source=st.text(max_size=300), declared=result_types, data=values)
def test_random_unicode_never_escapes(source: str, declared: ExprType,
                                      data: dict[str, Any]) -> None:
    _compile_and_run(source, declared, data)


@settings(max_examples=200, deadline=2000)
@given(data=values)
def test_well_formed_numeric_expression_agrees_with_python(data: dict[str, Any]) -> None:
    compiled = compile_expression("x * 2 + y / 4 - 1", ENV, result_type=ExprType.NUMBER)
    if data["x"] is None or data["y"] is None:
        assert compiled.evaluate(data) is None
        return
    expected = data["x"] * 2 + data["y"] / 4 - 1
    try:
        got = compiled.evaluate(data)
    except ExprEvalError as exc:
        assert exc.code == "EVAL_NOT_FINITE" and not math.isfinite(expected)
        return
    assert got == expected
