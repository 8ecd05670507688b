"""Hostile expressions: each is refused with a specific code, or fails cleanly at run time."""

from __future__ import annotations

import pytest

from stages.expr import ExprCompileError, ExprEvalError, ExprType, compile_expression
from stages.expr.errors import translate_eval_error
from stages.expr.limits import MAX_SOURCE_LENGTH

N, INT, S, B = ExprType.NUMBER, ExprType.INTEGER, ExprType.STRING, ExprType.BOOLEAN
ENV = {"temp_c": N, "count": INT, "label": S, "flag": B}

HOSTILE = [
    ("__import__('os').system('id')", "EXPR_FORBIDDEN"),
    ("__import__('os')", "EXPR_DUNDER"),
    ("__builtins__", "EXPR_DUNDER"),
    ("temp_c if flag else __loader__", "EXPR_DUNDER"),
    ("().__class__.__bases__[0].__subclasses__()", "EXPR_FORBIDDEN"),
    ("temp_c.__class__", "EXPR_FORBIDDEN"),
    ("temp_c.real", "EXPR_FORBIDDEN"),
    ("sqrt.__globals__", "EXPR_FORBIDDEN"),
    ("open('/etc/passwd')", "EXPR_UNKNOWN_FUNCTION"),
    ("eval('1 + 1')", "EXPR_UNKNOWN_FUNCTION"),
    ("exec('x = 1')", "EXPR_UNKNOWN_FUNCTION"),
    ("getattr(temp_c, 'real')", "EXPR_UNKNOWN_FUNCTION"),
    ("print(temp_c)", "EXPR_UNKNOWN_FUNCTION"),
    ("temp_c(1)", "EXPR_UNKNOWN_FUNCTION"),
    ("(lambda: 1)()", "EXPR_FORBIDDEN"),
    ("lambda: temp_c", "EXPR_FORBIDDEN"),
    ("[x for x in (1, 2)]", "EXPR_FORBIDDEN"),
    ("sum(x for x in (1, 2))", "EXPR_FORBIDDEN"),
    ("{k: 1 for k in 'ab'}", "EXPR_FORBIDDEN"),
    ("(count := 5)", "EXPR_FORBIDDEN"),
    ("f'{temp_c}'", "EXPR_FORBIDDEN"),
    ("max(*(1, 2))", "EXPR_FORBIDDEN"),
    ("max(**{'a': 1})", "EXPR_FORBIDDEN"),
    ("round(temp_c, ndigits=2)", "EXPR_FORBIDDEN"),
    ("temp_c[0]", "EXPR_FORBIDDEN"),
    ("label[::-1]", "EXPR_FORBIDDEN"),
    ("[1, 2]", "EXPR_FORBIDDEN"),
    ("(1, 2)", "EXPR_FORBIDDEN"),
    ("{1: 2}", "EXPR_FORBIDDEN"),
    ("(yield 1)", "EXPR_FORBIDDEN"),
    ("temp_c is None", "EXPR_FORBIDDEN"),
    ("'a' in label", "EXPR_FORBIDDEN"),
    ("count ^ 2", "EXPR_FORBIDDEN"),
    ("count << 62", "EXPR_FORBIDDEN"),
    ("~count", "EXPR_FORBIDDEN"),
    ("'a' * 10 ** 9", "EXPR_TYPE"),
    ("label * 1000000", "EXPR_TYPE"),
    ("'%s%s' % (label, label)", "EXPR_FORBIDDEN"),
    ("'%s' % label", "EXPR_TYPE"),
    ("9 ** 9 ** 9", "EXPR_CONSTANT"),
    ("((((2 ** 16) ** 16) ** 16) ** 16) ** 16 + count", "EXPR_CONSTANT"),
    ("10 ** 10 ** 10 + temp_c", "EXPR_CONSTANT"),
    ("1 / 0 + temp_c", "EXPR_CONSTANT"),
    ("exp(1000)", "EXPR_CONSTANT"),
    ("None", "EXPR_LITERAL"),
    ("1j * temp_c", "EXPR_LITERAL"),
    ("b'x'", "EXPR_LITERAL"),
    ("1e999", "EXPR_LITERAL"),
    ("99999999999999999999999 + count", "EXPR_LITERAL"),
    ("temp_c if 1 else 2", "EXPR_TYPE"),
    ("sqrt", "EXPR_TYPE"),
    ("1) + (2", "EXPR_SYNTAX"),
    ("temp_c +", "EXPR_SYNTAX"),
    ("temp_c\x00", "EXPR_SYNTAX"),
    ("import os", "EXPR_SYNTAX"),
    ("x = 1", "EXPR_SYNTAX"),
    ("temp_c; 1", "EXPR_SYNTAX"),
    ("", "EXPR_SYNTAX"),
    ("-" * 500 + "temp_c", "EXPR_TOO_DEEP"),
    ("1 + " * 300 + "1", "EXPR_TOO_DEEP"),
    ("max(" + ",".join(["max(" + ",".join(["1"] * 16) + ")"] * 16) + ")",
     "EXPR_TOO_MANY_NODES"),
    ("temp_c + " * (MAX_SOURCE_LENGTH // 8) + "1", "EXPR_TOO_LONG"),
    ("(" * 300 + "1" + ")" * 300, "EXPR_SYNTAX"),
    ("unknown_thing + 1", "EXPR_UNKNOWN_NAME"),
    ("max(1)", "EXPR_ARITY"),
]


@pytest.mark.parametrize(("source", "code"), HOSTILE, ids=[h[0][:40] for h in HOSTILE])
def test_hostile_expression_is_refused_with_its_code(source: str, code: str) -> None:
    with pytest.raises(ExprCompileError) as caught:
        compile_expression(source, ENV, result_type=N)
    assert caught.value.code == code, str(caught.value)


def test_there_are_at_least_twenty_hostile_cases() -> None:
    assert len({source for source, _ in HOSTILE}) >= 20


@pytest.mark.parametrize(
    ("source", "result", "values", "code"),
    [
        ("2 ** count", N, {"count": 10**6}, "EVAL_OVERFLOW"),
        ("((((count ** 16) ** 16) ** 16) ** 16) ** 16", INT, {"count": 3}, "EVAL_OVERFLOW"),
        ("(((((((count ** 2) ** 2) ** 2) ** 2) ** 2) ** 2) ** 2) * 0", INT, {"count": 2**62},
         "EVAL_OVERFLOW"),
        ("count ** count", N, {"count": 2**40}, "EVAL_OVERFLOW"),
        ("exp(temp_c)", N, {"temp_c": 1e6}, "EVAL_OVERFLOW"),
        ("floor(temp_c * 1e308)", INT, {"temp_c": 10.0}, "EVAL_OVERFLOW"),
        ("count * count * count", INT, {"count": 2**62}, "EVAL_OVERFLOW"),
        ("temp_c * 1e308", N, {"temp_c": 1e10}, "EVAL_NOT_FINITE"),
        ("label + label", S, {"label": "x" * 40_000}, "EVAL_STRING_TOO_LONG"),
        ("1 / temp_c", N, {"temp_c": 0.0}, "EVAL_DIVISION_BY_ZERO"),
        ("count // count", INT, {"count": 0}, "EVAL_DIVISION_BY_ZERO"),
        ("temp_c % 0", N, {"temp_c": 3.0}, "EVAL_DIVISION_BY_ZERO"),
        ("sqrt(temp_c)", N, {"temp_c": -1.0}, "EVAL_DOMAIN"),
        ("log(temp_c)", N, {"temp_c": 0.0}, "EVAL_DOMAIN"),
        ("temp_c ** 0.5", N, {"temp_c": -8.0}, "EVAL_DOMAIN"),
        ("integer(label)", INT, {"label": "twelve"}, "EVAL_CONVERSION"),
        ("integer(label) * 0", INT, {"label": "9" * 4000}, "EVAL_OVERFLOW"),
        ("integer(temp_c) * 0", INT, {"temp_c": 1e300}, "EVAL_OVERFLOW"),
        ("len(label + label + label + label)", INT, {"label": "y" * 20_000},
         "EVAL_STRING_TOO_LONG"),
        ("number(label)", N, {"label": "1" * 5000 + "x"}, "EVAL_CONVERSION"),
        ("count", INT, {}, "EVAL_MISSING_INPUT"),
    ],
)
def test_hostile_data_fails_with_a_stable_code(
    source: str, result: ExprType, values: dict[str, object], code: str
) -> None:
    compiled = compile_expression(source, ENV, result_type=result)
    with pytest.raises(ExprEvalError) as caught:
        compiled.evaluate(values)
    assert caught.value.code == code


@pytest.mark.parametrize(("source", "result", "values", "message"), [
    ("number(label)", N, {"label": "51.123456789N"},
     "cannot convert a string that is not a number"),
    ("integer(label)", INT, {"label": "-0.987654321W"},
     "cannot convert a string that is not a number"),
    ("sqrt(temp_c)", N, {"temp_c": -0.987654321}, "math domain error (an argument outside the "
     "function's domain)"),
    ("exp(temp_c)", N, {"temp_c": 987654321.0}, "numeric overflow"),
    ("temp_c * 1e308", N, {"temp_c": 51.123456789}, "result is not a finite number"),
])
def test_a_failing_evaluation_never_quotes_the_data(
    source: str, result: ExprType, values: dict[str, object], message: str
) -> None:
    """The data is an envelope's (maybe a coordinate, spec 000 §15): the message says what
    failed, not on which value."""
    compiled = compile_expression(source, ENV, result_type=result)
    with pytest.raises(ExprEvalError) as caught:
        compiled.evaluate(values)
    assert caught.value.message == message


def test_an_exception_text_quoting_the_operand_is_not_kept() -> None:
    """Python 3.14's ``math`` names the operand (``expected a nonnegative input, got -0.98``);
    whatever the interpreter says, the translated message does not."""
    for raised in (ValueError("expected a nonnegative input, got -0.987654321"),
                   OverflowError("51.123456789 is too large"),
                   RuntimeError("51.123456789")):
        translated = translate_eval_error(raised)
        assert "987654321" not in translated.message and "123456789" not in translated.message


def test_generated_code_has_no_builtins() -> None:
    compiled = compile_expression("temp_c + 1", ENV, result_type=N)
    namespace = compiled.function.__globals__
    assert namespace["__builtins__"] == {}
    assert not any(name.startswith("__") and name != "__builtins__" for name in namespace)
    assert all(name.startswith("_") for name in namespace)


def test_user_text_never_becomes_an_identifier() -> None:
    compiled = compile_expression("temp_c + count", ENV, result_type=N)
    assert "temp_c +" not in compiled.python
    assert "v['temp_c']" in compiled.python
