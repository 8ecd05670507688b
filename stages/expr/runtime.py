"""The only callables generated code can reach, and the checks on every result.

Generated code runs with ``{"__builtins__": {}}`` and the names in :data:`GLOBALS`, nothing
else. Each helper here is total on its checked input types: it returns a value or raises one of
the arithmetic exceptions (translated by :func:`stages.expr.errors.translate_eval_error`) or an
:class:`~stages.expr.errors.ExprEvalError` with its own code. Integer powers are bounded before
they are computed, so no ``**`` can run for long. Messages say what went wrong, never with
which value (it is an envelope's, and may be a coordinate: spec 000 §15).
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

from stages.expr import errors
from stages.expr.errors import ExprEvalError
from stages.expr.limits import INT_MAX, INT_MIN, MAX_POW_BITS, MAX_STRING_LENGTH


class Missing(Exception):
    """Raised inside generated code when a value it needs is absent; the result is ``None``."""


def missing() -> NoReturn:
    """Signal that a lazily needed value (an ``if`` branch, a ``coalesce``) is absent."""
    raise Missing


def pow_integer(base: int, exponent: int) -> int | float:
    """``base ** exponent`` for integers, refusing results beyond ``MAX_POW_BITS`` bits."""
    if exponent < 0:
        return math.pow(base, exponent) if base else _zero_power()
    if base in (0, 1, -1) or exponent <= 1:
        return int(base**exponent)
    if (abs(base).bit_length() - 1) * exponent > MAX_POW_BITS:
        raise ExprEvalError(
            f"integer power too large (the limit is {MAX_POW_BITS} bits)", code=errors.OVERFLOW
        )
    return int(base**exponent)


def pow_number(base: float, exponent: float) -> float:
    """``base ** exponent`` as a float; overflow and complex results become errors."""
    return math.pow(base, exponent)


def _zero_power() -> NoReturn:
    raise ZeroDivisionError("0 cannot be raised to a negative power")


def round_to(x: float, digits: int) -> float:
    """``round(x, digits)`` on a float, with ``digits`` clamped to a harmless range."""
    return round(float(x), max(-400, min(400, digits)))


def clamp(x: float, low: float, high: float) -> float:
    """``x`` limited to ``[low, high]`` (``low`` wins when ``low > high``)."""
    return max(min(x, high), low)


def sign(x: float) -> int:
    """-1, 0 or 1."""
    return (x > 0) - (x < 0)


def to_number(x: Any) -> float:
    """Convert a number, boolean or numeric string to a float."""
    if isinstance(x, str):
        try:
            return float(x.strip())
        except ValueError:
            raise ExprEvalError("cannot convert a string that is not a number",
                                code=errors.CONVERSION) from None
    return float(x)


def to_integer(x: Any) -> int:
    """Convert (truncating toward zero) a number, boolean or numeric string to an integer."""
    if isinstance(x, str):
        text = x.strip()
        try:
            x = int(text)
        except ValueError:
            x = to_number(text)
    if isinstance(x, float) and math.isnan(x):
        raise ExprEvalError("cannot convert NaN to an integer", code=errors.CONVERSION)
    result = int(x)
    if not INT_MIN <= result <= INT_MAX:
        raise ExprEvalError("integer() result does not fit in 64 bits", code=errors.OVERFLOW)
    return result


def concat(left: str, right: str) -> str:
    """``left + right``, refusing to build a string over ``MAX_STRING_LENGTH``."""
    if len(left) + len(right) > MAX_STRING_LENGTH:
        raise ExprEvalError(f"string would be {len(left) + len(right)} characters; the limit is "
                            f"{MAX_STRING_LENGTH}", code=errors.STRING_TOO_LONG)
    return left + right


def to_string(x: Any) -> str:
    """Text of a value: booleans as ``true``/``false``, numbers as Python prints them."""
    if x is True:
        return "true"
    if x is False:
        return "false"
    try:
        return str(x)
    except ValueError:  # more digits than int→str allows
        raise ExprEvalError("number has too many digits to convert to a string",
                            code=errors.CONVERSION) from None


def check_number(r: Any) -> float:
    """Coerce a result to a finite float (the stored form of ``number``)."""
    number = float(r)
    if not math.isfinite(number):
        raise ExprEvalError("result is not a finite number", code=errors.NOT_FINITE)
    return number


def fail_integer(r: int) -> NoReturn:
    """Report an integer result that does not fit in 64 bits."""
    raise ExprEvalError(f"integer result does not fit in 64 bits ({r.bit_length()} bits)",
                        code=errors.OVERFLOW)


def fail_string(r: str) -> NoReturn:
    """Report a string result longer than ``MAX_STRING_LENGTH``."""
    raise ExprEvalError(f"string result is {len(r)} characters; the limit is {MAX_STRING_LENGTH}",
                        code=errors.STRING_TOO_LONG)


def coalesce(*values: Any) -> Any:  # pragma: no cover - generated code inlines coalesce
    """The first value that is not missing."""
    for value in values:
        if value is not None:
            return value
    return None


GLOBALS: dict[str, Any] = {
    "__builtins__": {},
    "_Missing": Missing,
    "_missing": missing,
    "_pow_i": pow_integer,
    "_pow_f": pow_number,
    "_concat": concat,
    "_float": float,
    "_len": len,
    "_isfinite": math.isfinite,
    "_check_number": check_number,
    "_fail_integer": fail_integer,
    "_fail_string": fail_string,
    "_INT_MIN": INT_MIN,
    "_INT_MAX": INT_MAX,
    "_MAX_STRING": MAX_STRING_LENGTH,
}
"""The namespace of generated code; functions add ``_f_<name>`` entries (see FUNCTIONS)."""
