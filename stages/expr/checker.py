"""Type checking: every node gets one of the four types, or the expression is rejected.

Rules (also in ``docs/expressions.md``): arithmetic is numeric only, except ``+`` which also
joins two strings; ``integer`` op ``integer`` stays ``integer`` except ``/`` (always ``number``)
and ``**`` (``integer`` only with a non-negative integer literal exponent). Comparisons need two
numbers, two strings, or (for ``==``/``!=`` only) two booleans. ``and``/``or``/``not`` and the
condition of ``if`` need booleans — there is no truthiness. Both branches of ``if`` must have the
same type (``integer`` and ``number`` meet at ``number``). Strings cannot be repeated or
formatted, so string results only grow by concatenation and are capped at run time.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import replace

from stages.expr import errors
from stages.expr.errors import ExprCompileError
from stages.expr.functions import FUNCTIONS, TypeRuleError
from stages.expr.nodes import Binary, Call, Compare, Conditional, Const, Logic, Name, Node, Unary
from stages.expr.types import ExprType, numeric_join

_ORDERING = {"<", "<=", ">", ">="}


def check(node: Node, env: Mapping[str, ExprType]) -> Node:
    """Return ``node`` with a type on every node; ``env`` maps visible names to their types."""
    return _Checker(env).visit(node)


def _fail(message: str, node: Node, code: str = errors.TYPE) -> ExprCompileError:
    return ExprCompileError(message, code=code, column=node.offset)


class _Checker:
    def __init__(self, env: Mapping[str, ExprType]) -> None:
        self.env = env

    def visit(self, node: Node) -> Node:
        if isinstance(node, Const):
            return replace(node, type=_literal_type(node.value))
        if isinstance(node, Name):
            return self._name(node)
        if isinstance(node, Unary):
            return self._unary(node)
        if isinstance(node, Binary):
            return self._binary(node)
        if isinstance(node, Compare):
            return self._compare(node)
        if isinstance(node, Logic):
            operands = tuple(self._boolean(o, f"'{node.op}'") for o in node.operands)
            return replace(node, operands=operands, type=ExprType.BOOLEAN)
        if isinstance(node, Conditional):
            return self._conditional(node)
        if isinstance(node, Call):
            return self._call(node)
        raise _fail(f"unsupported expression {type(node).__name__}", node, errors.FORBIDDEN)

    def _name(self, node: Name) -> Node:
        declared = self.env.get(node.name)
        if declared is not None:
            return replace(node, type=declared)
        if node.name in FUNCTIONS:
            raise _fail(f"function '{node.name}' must be called, e.g. {node.name}(...)", node)
        message = f"unknown name '{node.name}'"
        close = difflib.get_close_matches(node.name, list(self.env), n=1)
        if close:
            message += f"; did you mean '{close[0]}'?"
        raise _fail(message, node, errors.UNKNOWN_NAME)

    def _boolean(self, node: Node, where: str) -> Node:
        checked = self.visit(node)
        if checked.type is not ExprType.BOOLEAN:
            raise _fail(f"{where} needs a boolean, got {_t(checked)} "
                        "(there is no truthiness; compare explicitly)", checked)
        return checked

    def _unary(self, node: Unary) -> Node:
        if node.op == "not":
            return replace(node, operand=self._boolean(node.operand, "'not'"),
                           type=ExprType.BOOLEAN)
        operand = self.visit(node.operand)
        if operand.type is None or not operand.type.numeric:
            raise _fail(f"unary '{node.op}' needs a number, got {_t(operand)}", operand)
        return replace(node, operand=operand, type=operand.type)

    def _binary(self, node: Binary) -> Node:
        left, right = self.visit(node.left), self.visit(node.right)
        lt, rt = left.type, right.type
        assert lt is not None and rt is not None
        if node.op == "+" and lt is ExprType.STRING and rt is ExprType.STRING:
            return replace(node, left=left, right=right, type=ExprType.STRING)
        if not (lt.numeric and rt.numeric):
            hint = " (strings can only be joined with '+')" if ExprType.STRING in (lt, rt) else ""
            raise _fail(f"operator '{node.op}' cannot combine {lt.value} and {rt.value}{hint}",
                        node)
        if node.op == "/":
            result = ExprType.NUMBER
        elif node.op == "**":
            literal_exponent = isinstance(right, Const) and right.type is ExprType.INTEGER
            result = (ExprType.INTEGER if lt is ExprType.INTEGER and literal_exponent
                      else ExprType.NUMBER)
        else:
            result = numeric_join(lt, rt)
        return replace(node, left=left, right=right, type=result)

    def _compare(self, node: Compare) -> Node:
        operands = tuple(self.visit(o) for o in node.operands)
        for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
            lt, rt = left.type, right.type
            assert lt is not None and rt is not None
            if lt.numeric and rt.numeric:
                continue
            if lt is rt and (lt is ExprType.STRING or op not in _ORDERING):
                continue
            raise _fail(f"cannot compare {lt.value} {op} {rt.value}", node)
        return replace(node, operands=operands, type=ExprType.BOOLEAN)

    def _conditional(self, node: Conditional) -> Node:
        test = self._boolean(node.test, "the condition of 'if'")
        body, orelse = self.visit(node.body), self.visit(node.orelse)
        bt, ot = body.type, orelse.type
        assert bt is not None and ot is not None
        if bt.numeric and ot.numeric:
            result = numeric_join(bt, ot)
        elif bt is ot:
            result = bt
        else:
            raise _fail(f"both branches of 'if' must have the same type, got {bt.value} "
                        f"and {ot.value}", node)
        return replace(node, test=test, body=body, orelse=orelse, type=result)

    def _call(self, node: Call) -> Node:
        function = FUNCTIONS.get(node.func)
        if function is None:
            message = f"unknown function '{node.func}'"
            close = difflib.get_close_matches(node.func, list(FUNCTIONS), n=1)
            if close:
                message += f"; did you mean '{close[0]}'?"
            raise _fail(message, node, errors.UNKNOWN_FUNCTION)
        count = len(node.args)
        if not function.min_args <= count <= function.max_args:
            expected = (str(function.min_args) if function.min_args == function.max_args
                        else f"{function.min_args} to {function.max_args}")
            raise _fail(f"{function.signature} takes {expected} arguments, got {count}", node,
                        errors.ARITY)
        args = tuple(self.visit(arg) for arg in node.args)
        try:
            result = function.rule(tuple(arg.type for arg in args if arg.type is not None))
        except TypeRuleError as exc:
            raise _fail(f"{node.func}(): {exc}", node) from None
        return replace(node, args=args, type=result)


def _literal_type(value: object) -> ExprType:
    if isinstance(value, bool):
        return ExprType.BOOLEAN
    if isinstance(value, int):
        return ExprType.INTEGER
    if isinstance(value, float):
        return ExprType.NUMBER
    return ExprType.STRING


def _t(node: Node) -> str:
    return node.type.value if node.type is not None else "unknown"
