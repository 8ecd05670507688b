"""What a compiled topic is: :class:`TopicProgram` and the shapes it is made of.

:func:`stages.ingest.program.compile_schema` builds these once per schema version; the
per-envelope stages (:mod:`validate`, :mod:`mutate`, :mod:`derive`) only read them. They live
apart from the compiler so that the stages and the compiler both depend on this module and not
on each other: the compiler calls :func:`stages.ingest.validate.specialise` to build a
:class:`FastPath`, and validate reads a :class:`TopicProgram`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from stages.expr import CompiledExpression, ExprType

Extractor = tuple[str, str, tuple[str, ...] | None, Callable[[Any], Any], float | None,
                  float | None, bool, bool]
"""``(name, key, path, coerce, min, max, required, critical)`` — one measured parameter."""

Step = tuple[str, Callable[[Mapping[str, Any]], Any]]
"""``(parameter name, compiled function)`` — one mutation or derivation."""


FastValidate = Callable[[Mapping[str, Any]], dict[str, Any] | None]
"""A specialised validate: the extracted values of a clean envelope, or ``None``."""


class FastPath(NamedTuple):
    """One topic's stages specialised for a clean envelope (see the module docstring).

    ``validate(values)`` returns a new dict of the extracted values, and does so only when
    :func:`validate` would find no issue at all (it may still decline such an envelope, say an
    integral float for an integer parameter); otherwise ``None``. ``mutate(extracted)`` then
    applies the mutations to that dict in place (each reading the values as extracted, as
    :func:`mutate` does), and ``derive(mutated)`` adds the derived parameters to it in place,
    in dependency order, leaving the final values. ``mutate`` and ``derive`` raise when an
    expression fails; the caller then evaluates the envelope with the general stages, which
    report the failure.
    """

    validate: FastValidate
    mutate: Callable[[dict[str, Any]], None]
    derive: Callable[[dict[str, Any]], None]


@dataclass(frozen=True, kw_only=True)
class ParameterSpec:
    """The compiled view of one parameter (for callers that describe or display it)."""

    name: str
    type: ExprType
    unit: str | None
    source: str | None
    required: bool
    critical: bool
    min: float | None
    max: float | None
    mutate: CompiledExpression | None
    derived: CompiledExpression | None

    @property
    def depends_on(self) -> frozenset[str]:
        """Parameters a derived parameter reads (empty for measured ones)."""
        return self.derived.reads if self.derived is not None else frozenset()


@dataclass(frozen=True, kw_only=True)
class TopicProgram:
    """Everything needed to validate, mutate and derive one topic's envelopes."""

    schema: str
    tenant: str
    topic: str
    filename: str
    content_hash: str
    parameters: tuple[ParameterSpec, ...]
    """All parameters in file order."""
    extractors: tuple[Extractor, ...]
    """Measured parameters in file order (see :data:`Extractor`)."""
    mutations: tuple[Step, ...]
    """Measured parameters with a ``mutate`` expression, in file order."""
    derivations: tuple[Step, ...]
    """Derived parameters, each after every parameter it reads."""
    fast: FastPath | None = field(default=None, compare=False, repr=False)
    """The specialised stages (``None``: this program always runs the general ones)."""

    @property
    def measured_names(self) -> tuple[str, ...]:
        """Names of the measured parameters (the keys of ``extracted``)."""
        return tuple(e[0] for e in self.extractors)

    @property
    def derived_names(self) -> tuple[str, ...]:
        """Names of the derived parameters, in evaluation order."""
        return tuple(step[0] for step in self.derivations)

    def parameter(self, name: str) -> ParameterSpec:
        """The parameter called ``name`` (``KeyError`` if there is none)."""
        for spec in self.parameters:
            if spec.name == name:
                return spec
        raise KeyError(name)
