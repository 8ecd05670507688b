"""Hard limits that keep hostile expressions and hostile data cheap to reject.

Compile-time limits bound the work of parsing and checking; run-time limits bound the size of
every value an expression can produce, so no chain of derived parameters can grow a number or a
string without bound (each parameter's result is checked against these before the next one
reads it).
"""

from __future__ import annotations

MAX_SOURCE_LENGTH = 2000
"""Characters in one expression."""

MAX_NODES = 256
"""Syntax-tree nodes in one expression (names, literals, operators, calls)."""

MAX_DEPTH = 48
"""Nesting depth of the syntax tree."""

MAX_CALL_ARGS = 16
"""Arguments in one function call."""

MAX_STRING_LENGTH = 65_536
"""Characters in any string a parameter holds (input or result)."""

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
"""Integer parameters and integer results are 64-bit signed, like Postgres ``bigint``."""

MAX_POW_BITS = 1024
"""Largest integer ``**`` result (in bits) computed exactly; larger raises EVAL_OVERFLOW.

Together with 64-bit integer inputs and integer conversions, this keeps every integer inside an
expression small enough that even a worst-case expression of ``MAX_NODES`` parts multiplies and
divides numbers of a few thousand digits at most."""
