"""The ``validate`` stage: extract each measured parameter from an envelope and check it.

For every measured parameter, in file order: read its source (a key, or a dotted path through
nested objects), coerce it to the declared type, and check ``min``/``max``. What each outcome
means for the envelope:

=====================  ==============================  ===================================
outcome                issue code                      fails the envelope when
=====================  ==============================  ===================================
absent or null         ``MISSING_REQUIRED``            the parameter is ``required``
wrong type / too long  ``WRONG_TYPE`` / ``TOO_LONG``   the parameter is required or critical
outside min/max        ``OUT_OF_RANGE``                the parameter is ``critical``
=====================  ==============================  ===================================

A value with the wrong type is extracted as ``None`` (missing); an out-of-range value is kept
as measured and flagged. Coercion is strict: ``number`` takes JSON numbers (stored as finite
floats), ``integer`` takes integers and integral floats within 64 bits, ``boolean`` takes
``true``/``false`` and ``0``/``1``, ``string`` takes strings up to 65,536 characters; nothing
is parsed from strings. The stage never raises for bad data; it reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stages.expr.limits import INT_MAX, INT_MIN, MAX_STRING_LENGTH

if TYPE_CHECKING:
    from stages.ingest.program import TopicProgram

MISSING_REQUIRED = "MISSING_REQUIRED"
WRONG_TYPE = "WRONG_TYPE"
TOO_LONG = "TOO_LONG"
OUT_OF_RANGE = "OUT_OF_RANGE"
NOT_AN_OBJECT = "NOT_AN_OBJECT"


@dataclass(frozen=True, kw_only=True, slots=True)
class Issue:
    """One finding about one parameter; ``critical`` issues fail the envelope."""

    parameter: str
    code: str
    message: str
    critical: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidationResult:
    """What ``validate`` found: every measured parameter's value (``None`` when missing)."""

    extracted: dict[str, Any]
    issues: tuple[Issue, ...]
    ok: bool


class _Rejected(Exception):
    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message


def _kind(raw: Any) -> str:
    if isinstance(raw, bool):
        return "a boolean"
    if isinstance(raw, int | float):
        return "a number"
    if isinstance(raw, str):
        return "a string"
    if isinstance(raw, Mapping):
        return "an object"
    if isinstance(raw, list | tuple):
        return "an array"
    return type(raw).__name__


def coerce_number(raw: Any) -> float:
    """A finite float from a JSON number (not a boolean)."""
    kind = type(raw)
    if kind is float:
        if raw - raw == 0.0:  # finite (inf - inf and nan - nan are NaN)
            return raw  # type: ignore[no-any-return]
        raise _Rejected(WRONG_TYPE, f"expected a finite number, got {raw}")
    if kind is not bool and isinstance(raw, float):
        if math.isfinite(raw):
            return float(raw)
        raise _Rejected(WRONG_TYPE, f"expected a finite number, got {raw}")
    if kind is int or (kind is not bool and isinstance(raw, int)):
        try:
            return float(raw)
        except OverflowError:
            raise _Rejected(WRONG_TYPE, "number is too large") from None
    raise _Rejected(WRONG_TYPE, f"expected a number, got {_kind(raw)}")


def coerce_integer(raw: Any) -> int:
    """A 64-bit integer from an integer or an integral float."""
    kind = type(raw)
    if kind is bool or not isinstance(raw, int | float):
        raise _Rejected(WRONG_TYPE, f"expected an integer, got {_kind(raw)}")
    if isinstance(raw, float):
        if not (math.isfinite(raw) and raw.is_integer()):
            raise _Rejected(WRONG_TYPE, f"expected an integer, got {raw}")
        raw = int(raw)
    if not INT_MIN <= raw <= INT_MAX:
        raise _Rejected(WRONG_TYPE, "integer does not fit in 64 bits")
    return int(raw)


def coerce_boolean(raw: Any) -> bool:
    """``true``/``false``, or ``0``/``1`` as many devices send them."""
    if raw is True or raw is False:
        return raw
    if type(raw) is int and raw in (0, 1):
        return raw == 1
    raise _Rejected(WRONG_TYPE, f"expected a boolean, got {_kind(raw)}")


def coerce_string(raw: Any) -> str:
    """A string of at most ``MAX_STRING_LENGTH`` characters."""
    if not isinstance(raw, str):
        raise _Rejected(WRONG_TYPE, f"expected a string, got {_kind(raw)}")
    if len(raw) > MAX_STRING_LENGTH:
        raise _Rejected(TOO_LONG, f"string is {len(raw)} characters; the limit is "
                                  f"{MAX_STRING_LENGTH}")
    return str(raw)


COERCERS: dict[str, Callable[[Any], Any]] = {
    "number": coerce_number,
    "integer": coerce_integer,
    "boolean": coerce_boolean,
    "string": coerce_string,
}
"""The coercion for each parameter type (bound into each program's extractors)."""


def _walk(values: Mapping[str, Any], key: str, path: tuple[str, ...]) -> Any:
    # A key that itself contains dots wins over the path it spells; a path through
    # anything but an object finds nothing.
    found = values.get(key)
    if found is not None:
        return found
    node: Any = values
    for part in path:
        if type(node) is not dict and not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def validate(program: TopicProgram, values: Any) -> ValidationResult:
    """Extract and check every measured parameter of ``program`` from ``values``."""
    if type(values) is not dict and not isinstance(values, Mapping):
        return ValidationResult(
            extracted=dict.fromkeys(program.measured_names),
            issues=(Issue(parameter="", code=NOT_AN_OBJECT, critical=True,
                          message=f"values must be an object, got {_kind(values)}"),),
            ok=False,
        )
    extracted: dict[str, Any] = {}
    issues: list[Issue] = []
    ok = True
    for name, key, path, coerce, low, high, required, critical in program.extractors:
        raw = values.get(key) if path is None else _walk(values, key, path)
        if raw is None:
            extracted[name] = None
            if required:
                ok = False
                issues.append(Issue(
                    parameter=name, code=MISSING_REQUIRED, critical=True,
                    message=f"required parameter '{name}' (source '{key}') is missing"))
            continue
        try:
            value = coerce(raw)
        except _Rejected as rejected:
            extracted[name] = None
            fails = required or critical
            ok = ok and not fails
            issues.append(Issue(parameter=name, code=rejected.code, critical=fails,
                                message=f"'{name}': {rejected.message}"))
            continue
        extracted[name] = value
        if (low is not None and value < low) or (high is not None and value > high):
            ok = ok and not critical
            issues.append(Issue(parameter=name, code=OUT_OF_RANGE, critical=critical,
                                message=f"'{name}' = {value} is {_outside(low, high)}"))
    return ValidationResult(extracted=extracted, issues=tuple(issues), ok=ok)


def _outside(low: float | None, high: float | None) -> str:
    if low is None:
        return f"above the maximum {high:g}"
    if high is None:
        return f"below the minimum {low:g}"
    return f"outside [{low:g}, {high:g}]"
