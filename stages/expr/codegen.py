"""Checked tree → Python source of one small function, compiled once.

Theory of operation. The generated function takes the values mapping ``v`` and returns the
expression's value, or ``None`` when a value it needs is missing. Every parameter name becomes a
local ``_nK`` read once from ``v`` (user text never becomes an identifier; literals are emitted
with ``repr``). Missing values follow one rule: an operator or function whose operand is missing
has a missing result. To keep the common path free of checks, each node has *eager
requirements* — the names that must be present for it to be evaluated at all — and the function
returns ``None`` up front when one of the root's is missing. Parts evaluated only sometimes (the
branches of ``if``, the right operands of ``and``/``or``, ``coalesce`` arguments) test their own
extra requirements where they run; when one is missing they raise ``_Missing``, which the
function turns into ``None`` (``coalesce`` instead moves on to its next argument). Finally the
result is checked against the parameter's declared type (finite float, 64-bit integer, bounded
string) before it is returned, so no parameter ever holds an oversized value.
"""

from __future__ import annotations

from collections.abc import Mapping

from stages.expr.limits import INT_MAX, INT_MIN, MAX_STRING_LENGTH
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
    children,
    names_in,
)
from stages.expr.types import ExprType

FUNCTION_NAME = "_expr"


def generate(node: Node, *, result: ExprType, keys: Mapping[str, str] | None = None) -> str:
    """Python source defining ``_expr(v)`` for the checked tree ``node``.

    ``keys`` maps a name in the expression to the key it reads from ``v`` (a mutation's
    ``value`` reads the parameter's own key); other names read their own key.
    """
    return _Generator(node, keys or {}).source(result)


def requirements(node: Node) -> frozenset[str]:
    """Names that must be present before ``node`` is evaluated at all (its eager part)."""
    if isinstance(node, Name):
        return frozenset((node.name,))
    if isinstance(node, Conditional):
        return requirements(node.test)
    if isinstance(node, Logic):
        return requirements(node.operands[0])
    if isinstance(node, Call) and node.func == "coalesce":
        return frozenset()
    found: frozenset[str] = frozenset()
    for child in children(node):
        found |= requirements(child)
    return found


class _Generator:
    def __init__(self, root: Node, keys: Mapping[str, str]) -> None:
        self.root = root
        names = sorted(names_in(root))
        self.locals = {name: f"_n{index}" for index, name in enumerate(names)}
        self.keys = {name: keys.get(name, name) for name in names}
        self.temps = 0
        self.uses_missing = False

    def source(self, result: ExprType) -> str:
        required = requirements(self.root)
        body = self.expr(self.root, required)
        lines = [f"def {FUNCTION_NAME}(v):"]
        lines += [f"    {local} = v[{self.keys[name]!r}]" for name, local in self.locals.items()]
        if required:
            lines.append(f"    if {self.any_missing(required)}:")
            lines.append("        return None")
        if self.uses_missing:
            lines += ["    try:", f"        _r = {body}", "    except _Missing:",
                      "        return None"]
        else:
            lines.append(f"    _r = {body}")
        lines += _result_check(result)
        return "\n".join(lines) + "\n"

    def any_missing(self, names: frozenset[str]) -> str:
        return " or ".join(f"{self.locals[n]} is None" for n in sorted(names))

    def all_present(self, names: frozenset[str]) -> str:
        return " and ".join(f"{self.locals[n]} is not None" for n in sorted(names))

    def guarded(self, node: Node, have: frozenset[str], needs: frozenset[str],
                fallback: str) -> str:
        """``node`` evaluated only when ``needs`` are present, else ``fallback``."""
        extra = needs - have
        if not extra:
            return self.expr(node, have)
        if fallback == "None" and isinstance(node, Name):
            return self.locals[node.name]  # a missing name already reads as None
        if fallback == "_missing()":
            self.uses_missing = True
        return f"({self.expr(node, have | extra)} if {self.all_present(extra)} else {fallback})"

    def expr(self, node: Node, have: frozenset[str]) -> str:
        """Source for ``node``, given that the names in ``have`` are known to be present."""
        if isinstance(node, Const):
            return repr(node.value)
        if isinstance(node, Name):
            return self.locals[node.name]
        if isinstance(node, Binary):
            left, right = self.expr(node.left, have), self.expr(node.right, have)
            if node.op == "+" and node.type is ExprType.STRING:
                return f"_concat({left}, {right})"  # checked before the copy is made
            if node.op == "**" and _small_literal(node.right) and isinstance(node.left, Name):
                # A parameter is bounded (64-bit integer or finite float), so a small literal
                # power of it is too; any other base goes through the size check in _pow_*.
                return f"({left} ** {right})"
            if node.op == "**":
                helper = "_pow_i" if node.type is ExprType.INTEGER else "_pow_f"
                return f"{helper}({left}, {right})"
            return f"({left} {node.op} {right})"
        if isinstance(node, Compare):
            parts = [self.expr(node.operands[0], have)]
            for op, operand in zip(node.ops, node.operands[1:], strict=True):
                parts += [op, self.expr(operand, have)]
            return "(" + " ".join(parts) + ")"
        if isinstance(node, Logic):
            first = self.expr(node.operands[0], have)
            rest = [self.guarded(o, have, requirements(o), "_missing()") for o in node.operands[1:]]
            return "(" + f" {node.op} ".join([first, *rest]) + ")"
        if isinstance(node, Conditional):
            test = self.expr(node.test, have)
            body = self.guarded(node.body, have, requirements(node.body), "_missing()")
            orelse = self.guarded(node.orelse, have, requirements(node.orelse), "_missing()")
            return f"({body} if {test} else {orelse})"
        if isinstance(node, Call):
            return self.call(node, have)
        assert isinstance(node, Unary)
        op = "not " if node.op == "not" else node.op
        return f"({op}{self.expr(node.operand, have)})"

    def call(self, node: Call, have: frozenset[str]) -> str:
        if node.func == "coalesce":
            return self.coalesce(node.args, have)
        args = [self.expr(arg, have) for arg in node.args]
        if node.func == "round" and len(args) == 2:
            digits = node.args[1]
            if isinstance(digits, Const) and type(digits.value) is int and abs(digits.value) <= 400:
                return f"_f_round(_float({args[0]}), {args[1]})"  # builtin round, digits safe
            return f"_f_round_to({args[0]}, {args[1]})"
        if node.func == "clamp":
            return f"_f_max(_f_min({args[0]}, {args[2]}), {args[1]})"  # builtins, no frame
        return f"_f_{node.func}({', '.join(args)})"

    def coalesce(self, args: tuple[Node, ...], have: frozenset[str]) -> str:
        # An argument counts as missing when any name in it is missing, so nothing inside an
        # argument can raise _Missing; once an argument needs no check, later ones are dead.
        first, rest = args[0], args[1:]
        needs = names_in(first)
        if needs <= have:
            return self.expr(first, have)
        if not rest:
            return self.guarded(first, have, needs, "_missing()")
        temp = f"_t{self.temps}"
        self.temps += 1
        value = self.guarded(first, have, needs, "None")
        return f"({temp} if ({temp} := {value}) is not None else {self.coalesce(rest, have)})"


def _small_literal(node: Node) -> bool:
    return (isinstance(node, Const) and type(node.value) is int and 0 <= node.value <= 16)


def _result_check(result: ExprType) -> list[str]:
    if result is ExprType.NUMBER:
        # x - x is 0.0 for every finite float and NaN (truthy) for inf and NaN.
        return ["    _r = _float(_r)", "    if _r - _r:", "        return _check_number(_r)",
                "    return _r"]
    if result is ExprType.INTEGER:
        return [f"    if {INT_MIN} <= _r <= {INT_MAX}:", "        return _r",
                "    _fail_integer(_r)"]
    if result is ExprType.STRING:
        return [f"    if _len(_r) > {MAX_STRING_LENGTH}:", "        _fail_string(_r)",
                "    return _r"]
    return ["    return _r"]
