"""Text → expression tree, by a strict whitelist over Python's own expression grammar.

Theory of operation: the text is parsed with ``ast.parse(mode="eval")`` (so the grammar and its
precedence are Python's, which operators already read fluently), wrapped in one pair of
parentheses so an expression may span several lines of a YAML block. The resulting syntax tree
is then walked once; every node kind outside the language (attributes, subscripts, lambdas,
comprehensions, ``:=``, f-strings, starred arguments, keyword arguments, collection literals,
bitwise operators, ``is``/``in``...) is rejected with ``EXPR_FORBIDDEN``, and the walk never
recurses deeper than ``MAX_DEPTH`` or visits more than ``MAX_NODES`` nodes. Nothing of Python's
tree survives: the walk builds the language's own nodes (:mod:`stages.expr.nodes`), and the
code generator only ever sees those.
"""

from __future__ import annotations

import ast
import io
import math
import tokenize
from collections.abc import Callable

from stages.expr import errors
from stages.expr.errors import ExprCompileError
from stages.expr.limits import INT_MAX, MAX_CALL_ARGS, MAX_DEPTH, MAX_NODES, MAX_SOURCE_LENGTH
from stages.expr.nodes import Binary, Call, Compare, Conditional, Const, Logic, Name, Node, Unary

CONSTANTS: dict[str, bool | float] = {"true": True, "false": False, "pi": math.pi}
"""Names that are literals (``True``/``False`` work too, as Python spells them)."""

_BINARY = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/",
    ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
}
_UNARY = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not"}
_COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_LOGIC = {ast.And: "and", ast.Or: "or"}

_OPERATOR_HINTS = {
    ast.BitXor: "'^' is not an operator here; use '**' for powers",
    ast.BitAnd: "'&' is not an operator here; use 'and'",
    ast.BitOr: "'|' is not an operator here; use 'or'",
    ast.LShift: "'<<' is not supported",
    ast.RShift: "'>>' is not supported",
    ast.MatMult: "'@' is not supported",
    ast.Invert: "'~' is not supported; use 'not' for booleans",
    ast.Is: "'is' is not supported; use '=='",
    ast.IsNot: "'is not' is not supported; use '!='",
    ast.In: "'in' is not supported",
    ast.NotIn: "'not in' is not supported",
}

_FORBIDDEN_KINDS: dict[type[ast.AST], str] = {
    ast.Attribute: "attribute access ('.')",
    ast.Subscript: "indexing and slicing ('[...]')",
    ast.Slice: "slicing",
    ast.Lambda: "lambda",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "generator expressions",
    ast.NamedExpr: "assignment expressions (':=')",
    ast.JoinedStr: "f-strings",
    ast.FormattedValue: "f-strings",
    ast.Starred: "starred arguments",
    ast.List: "list literals",
    ast.Tuple: "tuples",
    ast.Set: "set literals",
    ast.Dict: "dict literals",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
}


def parse(source: str) -> Node:
    """Parse ``source`` into the language's tree or raise :class:`ExprCompileError`."""
    if not isinstance(source, str):
        raise ExprCompileError("an expression must be a string", code=errors.SYNTAX)
    if len(source) > MAX_SOURCE_LENGTH:
        raise ExprCompileError(
            f"expression is {len(source)} characters long; the limit is {MAX_SOURCE_LENGTH}",
            code=errors.TOO_LONG,
        )
    if not source.strip():
        raise ExprCompileError("expression is empty", code=errors.SYNTAX)
    wrapped = "(" + source + "\n)"
    try:
        tree = ast.parse(wrapped, mode="eval")
    except SyntaxError as exc:
        column = _offset(source, exc.lineno or 1, (exc.offset or 1) - 1, in_bytes=False)
        raise ExprCompileError(f"syntax error: {exc.msg}", code=errors.SYNTAX,
                               column=column) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        # Python's parser reports some limits (null bytes, pathological nesting) this way.
        raise ExprCompileError(f"syntax error: {exc}", code=errors.SYNTAX) from None
    _require_balanced(wrapped)
    return _Walker(source).visit(tree.body, 1)


def _require_balanced(wrapped: str) -> None:
    """Reject text such as ``1) + (2`` that only parses because of the wrapping parentheses."""
    depth = 0
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(wrapped).readline))
    except (tokenize.TokenError, SyntaxError) as exc:  # pragma: no cover - parse succeeded first
        raise ExprCompileError(f"syntax error: {exc}", code=errors.SYNTAX) from None
    closers = [t for t in tokens if t.type == tokenize.OP and t.string in "()[]{}"]
    for index, token in enumerate(closers):
        depth += 1 if token.string in "([{" else -1
        if depth == 0 and index != len(closers) - 1:
            raise ExprCompileError("syntax error: unbalanced parentheses", code=errors.SYNTAX)


def _offset(source: str, lineno: int, col: int, *, in_bytes: bool) -> int:
    """1-based character offset in ``source`` of a position in the wrapped text."""
    lines = source.split("\n")
    line_index = min(max(lineno - 1, 0), len(lines) - 1)
    line = ("(" + lines[0]) if line_index == 0 else lines[line_index]
    if in_bytes:
        col = len(line.encode("utf-8")[:col].decode("utf-8", errors="ignore"))
    start = sum(len(text) + 1 for text in lines[:line_index])
    shift = 1 if line_index == 0 else 0
    return max(start + col - shift, 0) + 1


class _Walker:
    """One walk over Python's tree; counts nodes and depth as it goes."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.count = 0
        self.handlers: dict[type[ast.AST], Callable[[ast.AST, int, int], Node]] = {
            ast.Constant: self._constant,  # type: ignore[dict-item]
            ast.Name: self._name,  # type: ignore[dict-item]
            ast.UnaryOp: self._unary,  # type: ignore[dict-item]
            ast.BinOp: self._binary,  # type: ignore[dict-item]
            ast.BoolOp: self._logic,  # type: ignore[dict-item]
            ast.Compare: self._compare,  # type: ignore[dict-item]
            ast.IfExp: self._conditional,  # type: ignore[dict-item]
            ast.Call: self._call,  # type: ignore[dict-item]
        }

    def where(self, node: ast.AST) -> int:
        return _offset(self.source, getattr(node, "lineno", 1), getattr(node, "col_offset", 0),
                       in_bytes=True)

    def visit(self, node: ast.AST, depth: int) -> Node:
        if depth > MAX_DEPTH:
            raise ExprCompileError(
                f"expression is nested more than {MAX_DEPTH} levels deep", code=errors.TOO_DEEP,
                column=self.where(node),
            )
        self.count += 1
        if self.count > MAX_NODES:
            raise ExprCompileError(
                f"expression has more than {MAX_NODES} parts", code=errors.TOO_MANY_NODES
            )
        handler = self.handlers.get(type(node))
        if handler is None:
            kind = _FORBIDDEN_KINDS.get(type(node), f"'{type(node).__name__}' expressions")
            raise ExprCompileError(f"{kind} not allowed", code=errors.FORBIDDEN,
                                   column=self.where(node))
        return handler(node, depth, self.where(node))

    def _operator(self, op: ast.AST, table: dict[type[ast.AST], str], at: int) -> str:
        symbol = table.get(type(op))
        if symbol is None:
            hint = _OPERATOR_HINTS.get(type(op), f"operator {type(op).__name__} is not supported")
            raise ExprCompileError(hint, code=errors.FORBIDDEN, column=at)
        return symbol

    def _constant(self, node: ast.Constant, depth: int, at: int) -> Node:
        value = node.value
        if isinstance(value, bool | str):
            return Const(offset=at, value=value)
        if isinstance(value, int):
            if value > INT_MAX + 1:
                raise ExprCompileError("integer literal does not fit in 64 bits",
                                       code=errors.LITERAL, column=at)
            return Const(offset=at, value=value)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ExprCompileError("number literal is not finite", code=errors.LITERAL,
                                       column=at)
            return Const(offset=at, value=value)
        if value is None:
            raise ExprCompileError("None/null literals are not supported; use coalesce()",
                                   code=errors.LITERAL, column=at)
        raise ExprCompileError(f"{type(value).__name__} literals are not supported",
                               code=errors.LITERAL, column=at)

    def _name(self, node: ast.Name, depth: int, at: int) -> Node:
        if "__" in node.id:
            raise ExprCompileError(f"name '{node.id}' is not allowed (double underscores)",
                                   code=errors.DUNDER, column=at)
        if node.id in CONSTANTS:
            return Const(offset=at, value=CONSTANTS[node.id])
        return Name(offset=at, name=node.id)

    def _unary(self, node: ast.UnaryOp, depth: int, at: int) -> Node:
        op = self._operator(node.op, _UNARY, at)  # type: ignore[arg-type]
        return Unary(offset=at, op=op, operand=self.visit(node.operand, depth + 1))

    def _binary(self, node: ast.BinOp, depth: int, at: int) -> Node:
        op = self._operator(node.op, _BINARY, at)  # type: ignore[arg-type]
        left = self.visit(node.left, depth + 1)
        return Binary(offset=at, op=op, left=left, right=self.visit(node.right, depth + 1))

    def _logic(self, node: ast.BoolOp, depth: int, at: int) -> Node:
        op = self._operator(node.op, _LOGIC, at)  # type: ignore[arg-type]
        operands = tuple(self.visit(value, depth + 1) for value in node.values)
        return Logic(offset=at, op=op, operands=operands)

    def _compare(self, node: ast.Compare, depth: int, at: int) -> Node:
        ops = tuple(self._operator(op, _COMPARE, at) for op in node.ops)  # type: ignore[arg-type]
        operands = tuple(self.visit(value, depth + 1) for value in (node.left, *node.comparators))
        return Compare(offset=at, ops=ops, operands=operands)

    def _conditional(self, node: ast.IfExp, depth: int, at: int) -> Node:
        test = self.visit(node.test, depth + 1)
        body = self.visit(node.body, depth + 1)
        orelse = self.visit(node.orelse, depth + 1)
        return Conditional(offset=at, test=test, body=body, orelse=orelse)

    def _call(self, node: ast.Call, depth: int, at: int) -> Node:
        if not isinstance(node.func, ast.Name):
            if isinstance(node.func, ast.Attribute):
                raise ExprCompileError("attribute access ('.') not allowed", code=errors.FORBIDDEN,
                                       column=at)
            raise ExprCompileError("only named functions can be called", code=errors.FORBIDDEN,
                                   column=at)
        func = node.func.id
        if "__" in func:
            raise ExprCompileError(f"name '{func}' is not allowed (double underscores)",
                                   code=errors.DUNDER, column=at)
        if node.keywords:
            raise ExprCompileError("keyword arguments not allowed", code=errors.FORBIDDEN,
                                   column=at)
        if len(node.args) > MAX_CALL_ARGS:
            raise ExprCompileError(f"a call takes at most {MAX_CALL_ARGS} arguments",
                                   code=errors.ARITY, column=at)
        args = tuple(self.visit(arg, depth + 1) for arg in node.args)
        return Call(offset=at, func=func, args=args)
