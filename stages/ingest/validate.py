"""The ``validate`` stage: extract each measured parameter from an envelope and check it.

For every measured parameter, in file order: read its source (a key, or a dotted path through
nested objects), coerce it to the declared type, and check ``min``/``max``. What each outcome
means for the envelope:

=====================  ==============================  ===================================
outcome                issue code                      fails the envelope when
=====================  ==============================  ===================================
absent or null         ``MISSING_REQUIRED``            the parameter is ``required``
wrong type / too long  ``WRONG_TYPE`` / ``TOO_LONG``   the parameter is required or critical
beyond float64         ``NUMBER_TOO_LARGE``            the parameter is required or critical
outside min/max        ``OUT_OF_RANGE``                the parameter is ``critical``
=====================  ==============================  ===================================

A value with the wrong type is extracted as ``None`` (missing), and so is a number too large
in magnitude for a 64-bit float (``1e309``; the decoder hands it over as a
:class:`~schemas.envelope.HugeNumber`) read by a ``number`` or ``integer`` parameter; an
out-of-range value is kept as measured and flagged. Coercion is strict: ``number`` takes
JSON numbers (stored as finite floats), ``integer`` takes integers and integral floats within
64 bits, ``boolean`` takes ``true``/``false`` and ``0``/``1``, ``string`` takes strings up to
65,536 characters; nothing is parsed from strings. The stage never raises for bad data; it
reports.

An issue's message names the parameter, its source and the kind of problem (the JSON type
found, the bound crossed, the length), never the value: messages are stored and shown where
values are not meant to be (any value may be a coordinate, spec 000 §15), and the value is
in the envelope for whoever may read that.

Specialised form. Almost every envelope a device sends is clean: every parameter present (or
an optional one absent), of the exact JSON type, inside its range. :func:`specialise` turns a
program's extractors into one generated Python function for that case, compiled once per
topic with the program: each parameter's read, coercion and range check become a few inline
lines with the key, path and bounds as literals, and the result is one ``dict`` display. It
answers ``None`` (or, for a malformed program, raises) at the first sign of anything else —
a missing required value, another type, a non-finite float, a value out of range, a long
string — and the caller then runs :func:`validate`, the reference. So it never reports an
issue itself: when it returns a mapping, :func:`validate` would have returned the same
``extracted`` values with no issues. A test compares the two on many random envelopes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from schemas import error_codes as codes
from schemas.envelope import HugeNumber
from stages.expr.limits import INT_MAX, INT_MIN, MAX_STRING_LENGTH
from stages.ingest.topic_program import Extractor, FastValidate, TopicProgram

MISSING_REQUIRED = codes.MISSING_REQUIRED
WRONG_TYPE = codes.WRONG_TYPE
TOO_LONG = codes.TOO_LONG
OUT_OF_RANGE = codes.OUT_OF_RANGE
NUMBER_TOO_LARGE = codes.NUMBER_TOO_LARGE
NOT_AN_OBJECT = codes.NOT_AN_OBJECT


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
    if isinstance(raw, int | float | HugeNumber):
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
        raise _Rejected(WRONG_TYPE, "expected a finite number, got a non-finite one")
    if kind is not bool and isinstance(raw, float):
        if math.isfinite(raw):
            return float(raw)
        raise _Rejected(WRONG_TYPE, "expected a finite number, got a non-finite one")
    if kind is int or (kind is not bool and isinstance(raw, int)):
        try:
            return float(raw)
        except OverflowError:
            raise _Rejected(WRONG_TYPE, "number is too large") from None
    if kind is HugeNumber:
        raise _too_large(raw)
    raise _Rejected(WRONG_TYPE, f"expected a number, got {_kind(raw)}")


def coerce_integer(raw: Any) -> int:
    """A 64-bit integer from an integer or an integral float."""
    kind = type(raw)
    if kind is bool or not isinstance(raw, int | float):
        if kind is HugeNumber:
            raise _too_large(raw)
        raise _Rejected(WRONG_TYPE, f"expected an integer, got {_kind(raw)}")
    if isinstance(raw, float):
        if not (math.isfinite(raw) and raw.is_integer()):
            raise _Rejected(WRONG_TYPE, "expected an integer, got a number with a fraction"
                            if math.isfinite(raw) else
                            "expected an integer, got a non-finite number")
        raw = int(raw)
    if not INT_MIN <= raw <= INT_MAX:
        raise _Rejected(WRONG_TYPE, "integer does not fit in 64 bits")
    return int(raw)


def _too_large(raw: HugeNumber) -> _Rejected:
    return _Rejected(NUMBER_TOO_LARGE, "number is outside the range of a 64-bit float (±1.8e308)")


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
                                message=f"'{name}' (source '{key}'): {rejected.message}"))
            continue
        extracted[name] = value
        if (low is not None and value < low) or (high is not None and value > high):
            ok = ok and not critical
            issues.append(Issue(parameter=name, code=OUT_OF_RANGE, critical=critical,
                                message=f"'{name}' (source '{key}') is "
                                        f"{_outside(value, low, high)}"))
    return ValidationResult(extracted=extracted, issues=tuple(issues), ok=ok)


def _outside(value: float, low: float | None, high: float | None) -> str:
    """Which bound ``value`` crossed, in words; the bounds are the schema's, not the data."""
    below = low is not None and value < low
    if low is None or high is None:
        return f"below the minimum {low:g}" if below else f"above the maximum {high:g}"
    return f"outside [{low:g}, {high:g}] ({'below' if below else 'above'} it)"


_FAST_NAMESPACE: dict[str, Any] = {
    "__builtins__": {}, "type": type, "int": int, "float": float, "str": str, "dict": dict,
    "len": len, "_walk": _walk,
}


def specialise(extractors: tuple[Extractor, ...]) -> FastValidate | None:
    """One function doing ``validate``'s work for clean envelopes (see the module docstring).

    ``None`` when an extractor is not one this knows how to specialise (a coercion other than
    the four in :data:`COERCERS`, a bound that is not a finite number); the caller then always
    uses :func:`validate`. Only keys, paths and bounds from the compiled schema reach the
    generated source, each as a ``repr`` literal; nothing from an envelope ever does.
    """
    lines = ["def _validate(v):"]
    names: list[str] = []
    for index, (name, key, path, coerce, low, high, required, _critical) in enumerate(extractors):
        if not all(b is None or (type(b) in (int, float) and math.isfinite(b))
                   for b in (low, high)):
            return None
        x = f"_{index}"
        names.append(f"{name!r}: {x}")
        lines += _read(x, key, path)
        if coerce is coerce_number:
            # Both bounds: the range check also turns away NaN and the infinities.
            finite = [] if low is not None and high is not None else [f"if {x} - {x}:"]
            checks = _range(x, low, high)
            lines += [f"    if type({x}) is float:",
                      *(_indent(finite + checks, "return None") or ["        pass"]),
                      f"    elif type({x}) is int:", f"        {x} = float({x})",
                      *_indent(checks, "return None")]
        elif coerce is coerce_integer:
            # Python compares ints and floats exactly, so one chained comparison checks both
            # the 64-bit range and the parameter's own.
            bounds = _range(x, INT_MIN if low is None else max(low, INT_MIN),
                            INT_MAX if high is None else min(high, INT_MAX))
            lines += [f"    if type({x}) is int:", *_indent(bounds, "return None")]
        elif coerce is coerce_boolean:
            lines += [f"    if {x} is True or {x} is False:", "        pass",
                      f"    elif type({x}) is int and ({x} == 0 or {x} == 1):",
                      f"        {x} = {x} == 1"]
            if low is not None or high is not None:  # the schema refuses this; stay general
                return None
        elif coerce is coerce_string:
            lines += [f"    if type({x}) is str:", f"        if len({x}) > {MAX_STRING_LENGTH}:",
                      "            return None"]
            if low is not None or high is not None:
                return None
        else:
            return None
        # Anything else: absent is fine for an optional parameter, the rest is validate's.
        lines += ["    else:", "        return None"] if required else [
            f"    elif {x} is not None:", "        return None"]
    lines.append(f"    return {{{', '.join(names)}}}")
    namespace = dict(_FAST_NAMESPACE)
    exec(compile("\n".join(lines) + "\n", "<tideway-validate>", "exec"), namespace)
    function: FastValidate = namespace["_validate"]
    return function


def _read(x: str, key: str, path: tuple[str, ...] | None) -> list[str]:
    """Source reading one parameter's raw value into ``x``, exactly as :func:`validate`."""
    lines = [f"    {x} = v.get({key!r})"]
    if path is None:
        return lines
    if len(path) != 2:  # deeper paths are rare enough to take the general walk
        return [f"    {x} = _walk(v, {key!r}, {path!r})"]
    return [*lines, f"    if {x} is None:", f"        {x} = v.get({path[0]!r})",
            f"        if type({x}) is dict:", f"            {x} = {x}.get({path[1]!r})",
            f"        elif {x} is not None:",
            f"            {x} = _walk(v, {key!r}, {path!r})"]


def _range(x: str, low: float | None, high: float | None) -> list[str]:
    """The test that ``x`` is outside ``[low, high]`` (no lines when there are no bounds)."""
    if low is not None and high is not None:
        return [f"if not {low!r} <= {x} <= {high!r}:"]
    if low is not None:
        return [f"if {x} < {low!r}:"]
    if high is not None:
        return [f"if {x} > {high!r}:"]
    return []


def _indent(tests: list[str], action: str) -> list[str]:
    """Each ``if`` test in ``tests`` as lines of a branch, taking ``action``."""
    lines = []
    for test in tests:
        lines += [f"        {test}", f"            {action}"]
    return lines
