"""What expressions compute: operators, functions, missing values and coalesce."""

from __future__ import annotations

import math
from typing import Any

import pytest

from stages.expr import FUNCTIONS, ExprType, compile_expression, dependencies

N, INT, S, B = ExprType.NUMBER, ExprType.INTEGER, ExprType.STRING, ExprType.BOOLEAN
ENV = {"x": N, "y": N, "n": INT, "m": INT, "s": S, "flag": B}
VALUES: dict[str, Any] = {"x": 2.5, "y": -4.0, "n": 7, "m": 2, "s": " Hi ", "flag": True}


def run(source: str, result: ExprType, **overrides: Any) -> Any:
    return compile_expression(source, ENV, result_type=result).evaluate({**VALUES, **overrides})


@pytest.mark.parametrize(
    ("source", "result", "expected"),
    [
        ("x * 9 / 5 + 32", N, 36.5),
        ("n // m", INT, 3),
        ("n % m", INT, 1),
        ("-n", INT, -7),
        ("n / m", N, 3.5),
        ("n ** 2", INT, 49),
        ("m ** n", N, 128.0),
        ("2 ** -1", N, 0.5),
        ("x ** 2", N, 6.25),
        ("1 < x <= 2.5", B, True),
        ("x == 2.5 and not flag", B, False),
        ("flag or x > 100", B, True),
        ("'hot' if x > 2 else 'cold'", S, "hot"),
        ("s + '!'", S, " Hi !"),
        ("s < 'z'", B, True),
        ("flag != false", B, True),
        ("true", B, True),
        ("abs(y)", N, 4.0),
        ("abs(-n)", INT, 7),
        ("min(x, y, 0)", N, -4.0),
        ("max(n, m)", INT, 7),
        ("clamp(x, 0, 1)", N, 1.0),
        ("clamp(n, 10, 20)", INT, 10),
        ("sign(y)", INT, -1),
        ("round(x)", INT, 2),
        ("round(3.14159, 2)", N, 3.14),
        ("floor(y / 3)", INT, -2),
        ("ceil(x)", INT, 3),
        ("trunc(-x)", INT, -2),
        ("sqrt(16)", N, 4.0),
        ("exp(0)", N, 1.0),
        ("log(exp(2))", N, 2.0),
        ("log(8, 2)", N, 3.0),
        ("log10(1000)", N, 3.0),
        ("log2(8)", N, 3.0),
        ("degrees(pi)", N, 180.0),
        ("radians(180)", N, math.pi),
        ("atan2(1, 1)", N, math.pi / 4),
        ("hypot(3, 4)", N, 5.0),
        ("sin(0) + cos(0) + tan(0)", N, 1.0),
        ("asin(1) + acos(1) + atan(0)", N, math.pi / 2),
        ("number('12.5') + 1", N, 13.5),
        ("integer('42') + integer(9.9) + integer(true)", INT, 52),
        ("string(n) + string(flag) + string(x)", S, "7true2.5"),
        ("len(trim(s))", INT, 2),
        ("upper(s) + lower(s)", S, " HI  hi "),
        ("coalesce(n, 0)", INT, 7),
    ],
)
def test_evaluates(source: str, result: ExprType, expected: Any) -> None:
    value = run(source, result)
    if isinstance(expected, float):
        assert value == pytest.approx(expected)
        assert isinstance(value, float)
    else:
        assert value == expected
        assert type(value) is type(expected)


def test_number_results_are_floats_even_from_integer_expressions() -> None:
    assert run("n + 1", N) == 8.0
    assert isinstance(run("n + 1", N), float)


def test_every_documented_function_is_exercised() -> None:
    exercised = {
        "abs", "min", "max", "clamp", "sign", "round", "floor", "ceil", "trunc", "sqrt", "exp",
        "log", "log10", "log2", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "hypot",
        "degrees", "radians", "coalesce", "number", "integer", "string", "len", "lower", "upper",
        "trim",
    }
    assert set(FUNCTIONS) == exercised


def test_missing_input_makes_the_result_missing() -> None:
    assert run("x * 2", N, x=None) is None
    assert run("n + m", INT, m=None) is None


def test_coalesce_supplies_a_default_and_skips_missing_arguments() -> None:
    assert run("coalesce(x, 0)", N, x=None) == 0.0
    assert run("coalesce(x * 2, y, 1)", N, x=None) == -4.0
    assert run("coalesce(x, y)", N, x=None, y=None) is None
    assert run("coalesce(x, y) + 1", N, x=None, y=None) is None


def test_coalesce_does_not_evaluate_later_arguments() -> None:
    # The second argument would divide by zero; it is never reached.
    assert run("coalesce(x, 1 / y)", N, y=0.0) == 2.5


def test_conditional_needs_only_the_branch_it_takes() -> None:
    assert run("x if flag else y", N, y=None) == 2.5
    assert run("x if flag else y", N, x=None) is None
    assert run("x if flag else y", N, flag=None) is None


def test_and_or_need_only_what_they_evaluate() -> None:
    assert run("flag or x > 1", B, x=None) is True
    assert run("flag and x > 1", B, x=None) is None


def test_expression_may_span_lines_and_carry_comments() -> None:
    assert run("x +\n  1  # add one\n", N) == 3.5


def test_dependencies_are_the_names_used() -> None:
    assert dependencies("temp_f if temp_f < 80 else humidity + max(a, 1)") == {
        "temp_f", "humidity", "a",
    }
    assert dependencies("sqrt(2) + pi") == frozenset()


def test_value_reads_the_parameters_own_key() -> None:
    compiled = compile_expression("value / 1000", {"value": N}, result_type=N,
                                  keys={"value": "battery_v"})
    assert compiled.reads == {"battery_v"}
    assert compiled.evaluate({"battery_v": 12000.0}) == 12.0


def test_constant_parts_are_computed_once_at_compile_time() -> None:
    compiled = compile_expression("x * (9 / 5)", ENV, result_type=N)
    assert "1.8" in compiled.python
    assert compiled.evaluate(VALUES) == pytest.approx(4.5)


def test_compile_error_reports_the_column() -> None:
    from stages.expr import ExprCompileError

    with pytest.raises(ExprCompileError) as caught:
        compile_expression("x + tmep", {**ENV, "temp": N}, result_type=N)
    assert caught.value.column == 5
    assert "did you mean 'temp'" in caught.value.message


def test_reference_documents_every_function() -> None:
    from pathlib import Path

    reference = (Path(__file__).resolve().parents[4] / "docs" / "expressions.md").read_text()
    for function in FUNCTIONS.values():
        assert f"| `{function.signature}` | {function.doc} |" in reference, function.name
