"""A schema file compiled into one ready-to-run program per topic.

``compile_schema`` does all the work that does not depend on an envelope, once per schema
version: it resolves each measured parameter's source path and type coercion, compiles every
``mutate`` and ``derived`` expression (names, types, safety), orders derived parameters so each
runs after the ones it reads, and refuses the whole schema if anything is wrong, listing every
problem with the file, topic and parameter it belongs to. The resulting
:class:`~stages.ingest.topic_program.TopicProgram` (its shape lives in
:mod:`stages.ingest.topic_program`, which the stages read without importing this compiler) is
immutable and holds only plain tuples and compiled functions, so the per-envelope stages
(:mod:`validate`, :mod:`mutate`, :mod:`derive`) are tight loops over precomputed data, and a
program can be cached and shared freely (by schema version id).

Each program also carries a :class:`~stages.ingest.topic_program.FastPath`: the three stages
specialised for the topic, as generated functions for the clean envelope that almost every
device sends (see :func:`stages.ingest.validate.specialise`). Validate's builds the extracted
values or declines; mutate's and derive's then update that same dict in place, calling the
compiled expressions directly with the names and order fixed here, instead of looping over
tuples and copying the dict at every stage. ``evaluate`` uses it when it can and the general
stages otherwise; the general stages stay the reference, and a test checks the two agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas import error_codes as codes
from schemas.device_schema import ParameterDef, SchemaFile, TopicDef
from stages.errors import StageError
from stages.expr import (
    CONSTANTS,
    CompiledExpression,
    ExprCompileError,
    ExprType,
    compile_expression,
    dependencies,
)
from stages.expr import errors as expr_errors
from stages.ingest.topic_program import Extractor, FastPath, ParameterSpec, Step, TopicProgram
from stages.ingest.validate import COERCERS, specialise

RESERVED_NAMES = frozenset({"value", *CONSTANTS})
"""Names a parameter cannot take: ``value`` (a mutation's own input) and the literal names."""

RESERVED = codes.SCHEMA_RESERVED_NAME

@dataclass(frozen=True, kw_only=True)
class SchemaProblem:
    """One reason a schema was refused, located in the file."""

    filename: str
    topic: str
    parameter: str
    field: str
    code: str
    message: str

    def __str__(self) -> str:
        return (f"{self.filename}: topic '{self.topic}', parameter '{self.parameter}' "
                f"({self.field}): {self.message} [{self.code}]")


class SchemaCompileError(StageError):
    """The schema cannot be compiled; ``problems`` lists every reason (at least one).

    ``code`` is the first problem's code (``EXPR_*`` or ``SCHEMA_RESERVED_NAME``).
    """

    def __init__(self, problems: list[SchemaProblem]):
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in problems), code=problems[0].code)


def compile_schema(schema: SchemaFile, *, filename: str = "<schema>") -> dict[str, TopicProgram]:
    """Compile every topic of ``schema``; raises :class:`SchemaCompileError` listing problems."""
    problems: list[SchemaProblem] = []
    programs: dict[str, TopicProgram] = {}
    content_hash = schema.content_hash()
    for topic in schema.topics:
        compiler = _TopicCompiler(topic, filename)
        program = compiler.compile(schema, content_hash)
        problems += compiler.problems
        if program is not None:
            programs[topic.name] = program
    if problems:
        raise SchemaCompileError(problems)
    return programs


class _TopicCompiler:
    def __init__(self, topic: TopicDef, filename: str) -> None:
        self.topic = topic
        self.filename = filename
        self.problems: list[SchemaProblem] = []
        self.types = {p.name: ExprType(p.type) for p in topic.parameters}
        self.derived_names = {p.name for p in topic.parameters if p.is_derived}

    def problem(self, param: ParameterDef, field: str, code: str, message: str) -> None:
        self.problems.append(SchemaProblem(filename=self.filename, topic=self.topic.name,
                                           parameter=param.name, field=field, code=code,
                                           message=message))

    def compile(self, schema: SchemaFile, content_hash: str) -> TopicProgram | None:
        specs = [self.parameter(p) for p in self.topic.parameters]
        order = self.derivation_order(specs)
        if self.problems or order is None:
            return None
        by_name = {s.name: s for s in specs}
        extractors = tuple(_extractor(p, by_name[p.name]) for p in self.topic.parameters
                           if not p.is_derived)
        mutations = tuple((s.name, s.mutate.function) for s in specs if s.mutate is not None)
        derivations = tuple((name, by_name[name].derived.function)  # type: ignore[union-attr]
                            for name in order)
        return TopicProgram(
            schema=schema.name, tenant=schema.tenant, topic=self.topic.name,
            filename=self.filename, content_hash=content_hash, parameters=tuple(specs),
            extractors=extractors, mutations=mutations, derivations=derivations,
            fast=fast_path(extractors, mutations, derivations),
        )

    def parameter(self, param: ParameterDef) -> ParameterSpec:
        if param.name in RESERVED_NAMES:
            self.problem(param, "name", RESERVED,
                         f"'{param.name}' is reserved in expressions; choose another name")
        declared = self.types[param.name]
        mutate = derived = None
        if param.mutate is not None:
            env = {n: t for n, t in self.types.items() if n not in self.derived_names}
            env["value"] = declared
            mutate = self.expression(param, "mutate", param.mutate, env, {"value": param.name})
        if param.derived is not None:
            derived = self.expression(param, "derived", param.derived, self.types, None)
        return ParameterSpec(
            name=param.name, type=declared, unit=param.unit, source=param.source,
            required=param.required, critical=param.critical, min=param.min, max=param.max,
            mutate=mutate, derived=derived,
        )

    def expression(self, param: ParameterDef, field: str, source: str,
                   env: Mapping[str, ExprType], keys: Mapping[str, str] | None,
                   ) -> CompiledExpression | None:
        shown = source if len(source) <= 80 else source[:77] + "..."
        try:
            if field == "mutate":
                late = sorted(dependencies(source) & self.derived_names)
                if late:
                    raise ExprCompileError(
                        f"'{late[0]}' is a derived parameter; a mutation sees only measured "
                        "values (use a derived parameter instead)", code=expr_errors.UNKNOWN_NAME)
            return compile_expression(source, env, result_type=self.types[param.name], keys=keys)
        except ExprCompileError as exc:
            self.problem(param, field, exc.code, f"{exc.message} in {shown!r}")
            return None

    def derivation_order(self, specs: list[ParameterSpec]) -> list[str] | None:
        """Derived parameters in dependency order (file order breaks ties), or None on a cycle."""
        graph = {s.name: sorted(s.depends_on & self.derived_names) for s in specs
                 if s.derived is not None}
        if len(graph) != len(self.derived_names):
            return None  # an expression failed to compile; already reported
        done: list[str] = []
        pending = [s.name for s in specs if s.name in graph]
        while pending:
            # The first parameter in file order whose dependencies are all placed goes next,
            # so the order is the file's wherever the dependencies allow it.
            ready = next((n for n in pending if all(d in done for d in graph[n])), None)
            if ready is None:
                self.report_cycle(graph, pending)
                return None
            done.append(ready)
            pending.remove(ready)
        return done

    def report_cycle(self, graph: dict[str, list[str]], pending: list[str]) -> None:
        # Walk from the first stuck parameter along unplaced dependencies until a name repeats.
        path = [pending[0]]
        while True:
            following = next(d for d in graph[path[-1]] if d in pending)
            if following in path:
                cycle = [*path[path.index(following):], following]
                break
            path.append(following)
        param = next(p for p in self.topic.parameters if p.name == cycle[0])
        self.problem(param, "derived", expr_errors.CYCLE,
                     "dependency cycle: " + " -> ".join(cycle))


def _extractor(param: ParameterDef, spec: ParameterSpec) -> Extractor:
    source = param.source or param.name
    path = tuple(source.split(".")) if "." in source else None
    return (param.name, source, path, COERCERS[param.type], spec.min, spec.max,
            param.required, param.critical)


def fast_path(extractors: tuple[Extractor, ...], mutations: tuple[Step, ...],
              derivations: tuple[Step, ...]) -> FastPath | None:
    """The :class:`FastPath` for a topic (``None`` when validate cannot be specialised).

    The mutate and derive functions are generated from parameter names (as ``repr`` literals)
    and call the already compiled expressions, bound as ``_m<i>``/``_d<i>``; for the demo
    schema they read::

        def _mutate(x):
            _a0 = _m0(x)
            _a1 = _m1(x)
            if _a0 != x['pressure_hpa']:
                x['pressure_hpa'] = _a0
            if _a1 != x['battery_v']:
                x['battery_v'] = _a1

        def _derive(x):
            x['temp_f'] = _d0(x)
            x['heat_index'] = _d1(x)

    Every mutation runs before any result is stored, so each sees the extracted values; a
    result equal to the extracted value leaves that value as it was, like :func:`mutate`.
    """
    validate = specialise(extractors)
    if validate is None:
        return None
    namespace: dict[str, Any] = {"__builtins__": {}}
    lines = ["def _mutate(x):"]
    for index, (_, function) in enumerate(mutations):
        namespace[f"_m{index}"] = function
        lines.append(f"    _a{index} = _m{index}(x)")
    for index, (name, _) in enumerate(mutations):
        lines += [f"    if _a{index} != x[{name!r}]:", f"        x[{name!r}] = _a{index}"]
    lines += ["    return None", "def _derive(x):"]
    for index, (name, function) in enumerate(derivations):
        namespace[f"_d{index}"] = function
        lines.append(f"    x[{name!r}] = _d{index}(x)")
    lines.append("    return None")
    exec(compile("\n".join(lines) + "\n", "<tideway-stages>", "exec"), namespace)
    return FastPath(validate, namespace["_mutate"], namespace["_derive"])
