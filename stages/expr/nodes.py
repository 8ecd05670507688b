"""The expression tree the parser builds and the checker annotates.

Only these eight node kinds exist in the language; anything else in Python's grammar is
rejected by the parser before a tree is built. ``offset`` is the 1-based character position in
the expression text (for error messages); ``type`` is filled in by the checker.
"""

from __future__ import annotations

from dataclasses import dataclass

from stages.expr.types import ExprType

Literal = int | float | bool | str


@dataclass(frozen=True, kw_only=True)
class Node:
    """Common fields of every node."""

    offset: int
    type: ExprType | None = None


@dataclass(frozen=True, kw_only=True)
class Const(Node):
    """A literal number, boolean or string."""

    value: Literal


@dataclass(frozen=True, kw_only=True)
class Name(Node):
    """A parameter name (or ``value`` inside a mutation)."""

    name: str


@dataclass(frozen=True, kw_only=True)
class Unary(Node):
    """``-x``, ``+x`` or ``not x``."""

    op: str
    operand: Node


@dataclass(frozen=True, kw_only=True)
class Binary(Node):
    """Arithmetic: ``+ - * / // % **``."""

    op: str
    left: Node
    right: Node


@dataclass(frozen=True, kw_only=True)
class Compare(Node):
    """A comparison chain: ``a < b <= c`` has two ops and three operands."""

    ops: tuple[str, ...]
    operands: tuple[Node, ...]


@dataclass(frozen=True, kw_only=True)
class Logic(Node):
    """``a and b and ...`` or ``a or b or ...`` (booleans only)."""

    op: str
    operands: tuple[Node, ...]


@dataclass(frozen=True, kw_only=True)
class Conditional(Node):
    """``body if test else orelse``."""

    test: Node
    body: Node
    orelse: Node


@dataclass(frozen=True, kw_only=True)
class Call(Node):
    """A call of one of the documented functions, positional arguments only."""

    func: str
    args: tuple[Node, ...]


def names_in(node: Node) -> frozenset[str]:
    """Every name the expression reads (its dependencies)."""
    found: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, Name):
            found.add(current.name)
        else:
            stack.extend(children(current))
    return frozenset(found)


def children(node: Node) -> tuple[Node, ...]:
    """The direct sub-expressions of ``node``, left to right."""
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Compare | Logic):
        return node.operands
    if isinstance(node, Conditional):
        return (node.test, node.body, node.orelse)
    if isinstance(node, Call):
        return node.args
    return ()
