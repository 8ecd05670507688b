"""The four value types of the expression language and their promotion rule.

``integer`` promotes to ``number`` wherever a number is expected; nothing else converts
implicitly (use ``number()``, ``integer()`` or ``string()``).
"""

from __future__ import annotations

from enum import StrEnum


class ExprType(StrEnum):
    """A value type; the names match the ``type`` field of a schema parameter."""

    NUMBER = "number"
    INTEGER = "integer"
    BOOLEAN = "boolean"
    STRING = "string"

    @property
    def numeric(self) -> bool:
        """True for ``integer`` and ``number``."""
        return self is ExprType.NUMBER or self is ExprType.INTEGER

    def accepts(self, other: ExprType) -> bool:
        """Whether a value of type ``other`` may be stored where ``self`` is declared."""
        return self is other or (self is ExprType.NUMBER and other is ExprType.INTEGER)


def numeric_join(*types: ExprType) -> ExprType:
    """``integer`` when every operand is an integer, else ``number`` (all must be numeric)."""
    return ExprType.INTEGER if all(t is ExprType.INTEGER for t in types) else ExprType.NUMBER
