"""Errors of the expression language, with stable codes.

Two families: :class:`ExprCompileError` when a schema is applied (the expression is rejected and
never runs) and :class:`ExprEvalError` when one evaluation fails on one envelope's data (division
by zero, a math domain error, a result that does not fit its declared type). Both are
:class:`~stages.errors.StageError`, so the runtime treats them like any other stage failure.
"""

from __future__ import annotations

from schemas import error_codes as codes
from schemas.errors import unexpected
from stages.errors import StageError

# Compile-time codes (the expression is rejected when the schema is applied).
SYNTAX = codes.EXPR_SYNTAX
TOO_LONG = codes.EXPR_TOO_LONG
TOO_DEEP = codes.EXPR_TOO_DEEP
TOO_MANY_NODES = codes.EXPR_TOO_MANY_NODES
FORBIDDEN = codes.EXPR_FORBIDDEN
DUNDER = codes.EXPR_DUNDER
UNKNOWN_NAME = codes.EXPR_UNKNOWN_NAME
UNKNOWN_FUNCTION = codes.EXPR_UNKNOWN_FUNCTION
ARITY = codes.EXPR_ARITY
TYPE = codes.EXPR_TYPE
LITERAL = codes.EXPR_LITERAL
CYCLE = codes.EXPR_CYCLE
CONSTANT = codes.EXPR_CONSTANT

# Evaluation codes (one evaluation on one envelope failed).
DIVISION_BY_ZERO = codes.EVAL_DIVISION_BY_ZERO
DOMAIN = codes.EVAL_DOMAIN
OVERFLOW = codes.EVAL_OVERFLOW
NOT_FINITE = codes.EVAL_NOT_FINITE
CONVERSION = codes.EVAL_CONVERSION
STRING_TOO_LONG = codes.EVAL_STRING_TOO_LONG
MISSING_INPUT = codes.EVAL_MISSING_INPUT
EVAL_FAILED = codes.EVAL_FAILED


class ExprError(StageError):
    """Root of the expression language's errors."""

    code = codes.EXPR_ERROR


class ExprCompileError(ExprError):
    """The expression text is not a valid, safe, well-typed expression.

    ``column`` is the 1-based column in the expression text where the problem was found, when
    known.
    """

    code = SYNTAX

    def __init__(self, message: str, *, code: str, column: int | None = None):
        if column is not None:
            message = f"{message} (column {column})"
        super().__init__(message, code=code)
        self.column = column


class ExprEvalError(ExprError):
    """One evaluation failed on the given data; the expression itself is fine."""

    code = EVAL_FAILED


def translate_eval_error(exc: BaseException) -> ExprEvalError:
    """Map an exception raised while evaluating generated code to a stable-coded error.

    The generated code only calls whitelisted helpers and operators on values of checked types,
    so the Python exceptions that can reach here are the arithmetic ones; anything else is still
    reported (never re-raised) so one hostile envelope cannot crash a consumer.

    The exception's own text is not kept: it can quote the operand (Python 3.14's ``math``
    says ``expected a nonnegative input, got -51.5``), and an operand is envelope data.
    """
    if isinstance(exc, ExprEvalError):
        return exc
    if isinstance(exc, ZeroDivisionError):
        return ExprEvalError("division by zero", code=DIVISION_BY_ZERO)
    if isinstance(exc, OverflowError):
        return ExprEvalError("numeric overflow", code=OVERFLOW)
    if isinstance(exc, ValueError):
        return ExprEvalError("math domain error (an argument outside the function's domain)",
                             code=DOMAIN)
    if isinstance(exc, KeyError):  # generated code looks up parameter names only
        return ExprEvalError(f"input {exc} is not present", code=MISSING_INPUT)
    return ExprEvalError(f"evaluation failed ({unexpected(exc)})", code=EVAL_FAILED)
