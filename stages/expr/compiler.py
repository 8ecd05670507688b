"""Parse, check and compile one expression into a fast, safe callable.

``compile_expression`` is the only entry point the rest of Tideway needs: it runs the parser
(whitelist), the checker (types and names), the code generator, and Python's ``compile`` on the
generated source — once. The result's ``function`` is then called per envelope with no parsing
and no per-call allocation beyond Python's own frame.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from stages.expr import errors
from stages.expr.checker import check
from stages.expr.codegen import FUNCTION_NAME, generate
from stages.expr.errors import ExprCompileError, translate_eval_error
from stages.expr.functions import function_globals
from stages.expr.nodes import (
    Binary,
    Call,
    Compare,
    Conditional,
    Const,
    Logic,
    Name,
    Node,
    Unary,
    names_in,
)
from stages.expr.parser import parse
from stages.expr.runtime import GLOBALS
from stages.expr.types import ExprType

_NAMESPACE: dict[str, Any] = {**GLOBALS, **function_globals()}


@dataclass(frozen=True, kw_only=True)
class CompiledExpression:
    """A checked expression and its compiled evaluator.

    ``function(values)`` reads the keys in ``reads`` from ``values`` and returns the result (or
    ``None`` when a needed value is missing); it may raise arithmetic exceptions, which
    :meth:`evaluate` (and the ingest stages) translate into :class:`ExprEvalError`.
    """

    source: str
    result_type: ExprType
    inferred_type: ExprType
    names: frozenset[str]
    """Names the expression uses, as written (``value`` included)."""
    reads: frozenset[str]
    """Keys of the values mapping it reads (``value`` replaced by its parameter's key)."""
    python: str
    function: Callable[[Mapping[str, Any]], Any]

    def evaluate(self, values: Mapping[str, Any]) -> Any:
        """Evaluate on ``values``; failures raise :class:`ExprEvalError` with a stable code."""
        try:
            return self.function(values)
        except Exception as exc:  # every failure becomes a coded error, never a traceback
            raise translate_eval_error(exc) from None


def parse_expression(source: str) -> Node:
    """Parse (without type checking); raises :class:`ExprCompileError`."""
    return parse(source)


def dependencies(source: str) -> frozenset[str]:
    """The names an expression uses (parses it; raises :class:`ExprCompileError`)."""
    return names_in(parse(source))


def compile_expression(
    source: str,
    env: Mapping[str, ExprType],
    *,
    result_type: ExprType,
    keys: Mapping[str, str] | None = None,
) -> CompiledExpression:
    """Compile ``source`` for names typed by ``env``, producing a ``result_type`` value.

    ``keys`` renames what a name reads from the values mapping (a mutation maps ``value`` to
    its parameter's key). Raises :class:`ExprCompileError` for every rejected expression.
    """
    checked = fold_constants(check(parse(source), env))
    inferred = checked.type
    assert inferred is not None
    if not result_type.accepts(inferred):
        hint = ""
        if result_type is ExprType.INTEGER and inferred is ExprType.NUMBER:
            hint = "; wrap it in round(), floor(), ceil(), trunc() or integer()"
        raise ExprCompileError(
            f"expression has type {inferred.value} but the parameter is {result_type.value}{hint}",
            code=errors.TYPE,
        )
    python = generate(checked, result=result_type, keys=keys)
    names = names_in(checked)
    mapping = keys or {}
    return CompiledExpression(
        source=source,
        result_type=result_type,
        inferred_type=inferred,
        names=names,
        reads=frozenset(mapping.get(n, n) for n in names),
        python=python,
        function=_load(python),
    )


def _load(python: str) -> Callable[[Mapping[str, Any]], Any]:
    namespace = dict(_NAMESPACE)
    try:
        code = compile(python, "<tideway-expression>", "exec")
    except (SyntaxError, RecursionError, MemoryError, ValueError) as exc:  # pragma: no cover
        raise ExprCompileError(f"expression is too complex to compile ({exc})",
                               code=errors.TOO_DEEP) from None
    exec(code, namespace)  # the source was generated from the whitelisted, checked tree
    function: Callable[[Mapping[str, Any]], Any] = namespace[FUNCTION_NAME]
    return function


def fold_constants(node: Node) -> Node:
    """Replace every sub-expression without names by its value, computed once now.

    Besides sparing the work per envelope, this rejects constant parts that can never succeed
    (``9 ** 9 ** 9``, ``1 / 0``, a constant that overflows) when the schema is applied, with
    ``EXPR_CONSTANT``, instead of on every envelope.
    """
    if isinstance(node, Const | Name):
        return node
    if not names_in(node):
        assert node.type is not None
        try:
            value = _load(generate(node, result=node.type))({})
        except Exception as exc:  # a constant that cannot be computed is a schema error
            failure = translate_eval_error(exc)
            raise ExprCompileError(f"constant part cannot be computed: {failure.message}",
                                   code=errors.CONSTANT, column=node.offset) from None
        return Const(offset=node.offset, value=value, type=node.type)
    if isinstance(node, Unary):
        return replace(node, operand=fold_constants(node.operand))
    if isinstance(node, Binary):
        return replace(node, left=fold_constants(node.left), right=fold_constants(node.right))
    if isinstance(node, Compare | Logic):
        return replace(node, operands=tuple(fold_constants(o) for o in node.operands))
    if isinstance(node, Conditional):
        return replace(node, test=fold_constants(node.test), body=fold_constants(node.body),
                       orelse=fold_constants(node.orelse))
    if isinstance(node, Call):
        return replace(node, args=tuple(fold_constants(a) for a in node.args))
    return node  # pragma: no cover - every node kind is handled above
