"""The type checker refuses what cannot be computed, with EXPR_TYPE and a useful message."""

from __future__ import annotations

import pytest

from stages.expr import ExprCompileError, ExprType, compile_expression

N, INT, S, B = ExprType.NUMBER, ExprType.INTEGER, ExprType.STRING, ExprType.BOOLEAN
ENV = {"x": N, "n": INT, "s": S, "flag": B}


@pytest.mark.parametrize(
    ("source", "result", "fragment"),
    [
        ("x + s", N, "cannot combine number and string"),
        ("s - s", S, "cannot combine string and string"),
        ("flag + 1", N, "cannot combine boolean and integer"),
        ("-s", S, "unary '-' needs a number"),
        ("not x", B, "'not' needs a boolean"),
        ("x and flag", B, "'and' needs a boolean"),
        ("x if n else 0", N, "condition of 'if' needs a boolean"),
        ("x if flag else s", N, "same type"),
        ("x < s", B, "cannot compare number < string"),
        ("flag < true", B, "cannot compare boolean < boolean"),
        ("flag == 1", B, "cannot compare boolean == integer"),
        ("sqrt(s)", N, "argument 1 must be a number"),
        ("len(x)", INT, "argument 1 must be a string"),
        ("round(x, 1.5)", N, "digits must be an integer"),
        ("coalesce(x, s)", N, "same type"),
        ("x / 2", INT, "type number but the parameter is integer; wrap it in round()"),
        ("x > 1", N, "type boolean but the parameter is number"),
        ("n", S, "type integer but the parameter is string"),
    ],
)
def test_type_errors(source: str, result: ExprType, fragment: str) -> None:
    with pytest.raises(ExprCompileError) as caught:
        compile_expression(source, ENV, result_type=result)
    assert caught.value.code == "EXPR_TYPE"
    assert fragment in caught.value.message


def test_integer_is_accepted_where_a_number_is_declared() -> None:
    compiled = compile_expression("n * 2", ENV, result_type=N)
    assert compiled.inferred_type is INT
    assert compiled.evaluate({"n": 3}) == 6.0


def test_arity_errors_name_the_signature() -> None:
    with pytest.raises(ExprCompileError) as caught:
        compile_expression("clamp(x, 1)", ENV, result_type=N)
    assert caught.value.code == "EXPR_ARITY"
    assert "clamp(x, lo, hi) takes 3 arguments, got 2" in caught.value.message
