"""The device-schema file an operator writes, as strict pydantic models.

A schema file names a schema and its tenant and lists topics; each topic lists parameters::

    schema: weather-station
    tenant: acme
    topics:
      - name: state
        parameters:
          - {name: temp_c, source: temp, type: number, unit: degC, required: true, min: -60}
          - {name: battery_v, source: bat_mv, type: number, unit: V, mutate: "value / 1000"}
          - {name: temp_f, type: number, derived: "temp_c * 9 / 5 + 32"}

Measured parameters read ``source`` (a key, or a dotted path, into the envelope's ``values``;
by default the parameter's own name) and may carry ``required``, ``critical``, ``min``, ``max``
and a ``mutate`` expression; derived parameters have only a ``derived`` expression. The models
check the file's shape; the expressions themselves are checked when the schema is compiled
(:func:`stages.ingest.program.compile_schema`). ``content_hash`` identifies the content, not
the text: reformatting the YAML, reordering keys or spelling out defaults keeps the hash.
"""

from __future__ import annotations

import hashlib
import keyword
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from schemas.errors import TidewayError

MAX_FILE_BYTES = 1_048_576
SLUG_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
TOPIC_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
PARAMETER_PATTERN = r"^[A-Za-z][A-Za-z0-9_]{0,62}$"
SOURCE_PATTERN = r"^[^.\s][^.]*(\.[^.\s][^.]*)*$"

ParameterType = Literal["number", "integer", "boolean", "string"]
Bound = StrictFloat | StrictInt
Expression = Annotated[StrictStr, Field(min_length=1, max_length=4000)]


class SchemaFileError(TidewayError):
    """A schema file cannot be read or does not describe a valid schema.

    ``filename`` names the file; ``problems`` lists every problem found, one line each.
    """

    code = "SCHEMA_FILE_INVALID"

    def __init__(self, filename: str, problems: list[str], *, code: str | None = None):
        self.filename = filename
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{filename}: invalid schema file\n{lines}", code=code)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ParameterDef(_Strict):
    """One parameter of a topic: measured (has a source) or derived (has an expression)."""

    name: Annotated[StrictStr, Field(pattern=PARAMETER_PATTERN)]
    type: ParameterType
    source: Annotated[StrictStr, Field(max_length=256, pattern=SOURCE_PATTERN)] | None = None
    unit: Annotated[StrictStr, Field(max_length=32)] | None = None
    description: Annotated[StrictStr, Field(max_length=1000)] | None = None
    required: StrictBool = False
    critical: StrictBool = False
    min: Bound | None = None
    max: Bound | None = None
    mutate: Expression | None = None
    derived: Expression | None = None

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        if "__" in name:
            raise ValueError("parameter names cannot contain '__'")
        if keyword.iskeyword(name) or keyword.issoftkeyword(name):
            raise ValueError(f"'{name}' is a reserved word and cannot name a parameter")
        return name

    @field_validator("min", "max")
    @classmethod
    def _finite_float(cls, bound: float | None) -> float | None:
        if bound is None:
            return None
        bound = float(bound)
        if bound != bound or bound in (float("inf"), float("-inf")):
            raise ValueError("bounds must be finite numbers")
        return bound

    @model_validator(mode="before")
    @classmethod
    def _default_source(cls, data: Any) -> Any:
        # A measured parameter reads its own name unless told otherwise; filling it in here
        # makes "source omitted" and "source: <name>" the same content (and the same hash).
        if (isinstance(data, dict) and data.get("derived") is None
                and data.get("source") is None and isinstance(data.get("name"), str)):
            return {**data, "source": data["name"]}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ParameterDef:
        if self.derived is not None:
            clashing = [f for f in ("source", "mutate", "min", "max")
                        if getattr(self, f) is not None]
            clashing += [f for f in ("required", "critical") if getattr(self, f)]
            if clashing:
                raise ValueError(
                    f"derived parameter '{self.name}' cannot have {', '.join(clashing)} "
                    "(those apply to measured parameters)"
                )
        if self.type in ("boolean", "string") and (self.min is not None or self.max is not None):
            raise ValueError(f"min/max apply to number and integer parameters, not {self.type}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self

    @property
    def is_derived(self) -> bool:
        """True for a derived parameter (computed, not read from the envelope)."""
        return self.derived is not None


class TopicDef(_Strict):
    """A topic a device publishes on, and the parameters of its envelopes."""

    name: Annotated[StrictStr, Field(pattern=TOPIC_PATTERN)]
    description: Annotated[StrictStr, Field(max_length=1000)] | None = None
    parameters: Annotated[tuple[ParameterDef, ...], Field(min_length=1, max_length=256)]

    @field_validator("parameters")
    @classmethod
    def _unique_parameters(cls, parameters: tuple[ParameterDef, ...]) -> tuple[ParameterDef, ...]:
        _require_unique([p.name for p in parameters], "parameter")
        return parameters


class SchemaFile(_Strict):
    """A whole schema file: the schema's name, its tenant and its topics."""

    name: Annotated[StrictStr, Field(alias="schema", pattern=SLUG_PATTERN)]
    tenant: Annotated[StrictStr, Field(pattern=SLUG_PATTERN)]
    description: Annotated[StrictStr, Field(max_length=4000)] | None = None
    topics: Annotated[tuple[TopicDef, ...], Field(min_length=1, max_length=256)]

    @field_validator("topics")
    @classmethod
    def _unique_topics(cls, topics: tuple[TopicDef, ...]) -> tuple[TopicDef, ...]:
        _require_unique([t.name for t in topics], "topic")
        return topics

    def canonical(self) -> dict[str, Any]:
        """The content as plain JSON data, with ``schema`` spelled as in the file."""
        return self.model_dump(mode="json", by_alias=True)

    def canonical_json(self) -> bytes:
        """Canonical JSON bytes (sorted keys, defaults filled in) — what the hash covers."""
        return orjson.dumps(self.canonical(), option=orjson.OPT_SORT_KEYS)

    def content_hash(self) -> str:
        """``sha256`` hex digest of :meth:`canonical_json`; equal content, equal hash."""
        return hashlib.sha256(self.canonical_json()).hexdigest()

    def topic(self, name: str) -> TopicDef:
        """The topic called ``name`` (``KeyError`` if there is none)."""
        for topic in self.topics:
            if topic.name == name:
                return topic
        raise KeyError(name)


def _require_unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    duplicates = sorted({n for n in names if n in seen or seen.add(n)})  # type: ignore[func-returns-value]
    if duplicates:
        raise ValueError(f"duplicate {what} name(s): {', '.join(duplicates)}")


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases (no billion laughs) and duplicate keys."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed in schema files", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # unhashable; the base class reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found duplicate key {key!r}", key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_schema_file(path: str | Path) -> SchemaFile:
    """Read and validate a schema file; raises :class:`SchemaFileError` naming the file."""
    filename = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SchemaFileError(filename, [f"cannot read: {exc.strerror or exc}"],
                              code="SCHEMA_FILE_UNREADABLE") from None
    if len(raw) > MAX_FILE_BYTES:
        raise SchemaFileError(filename, [f"file is larger than {MAX_FILE_BYTES} bytes"],
                              code="SCHEMA_FILE_TOO_LARGE")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SchemaFileError(filename, ["file is not UTF-8 text"],
                              code="SCHEMA_FILE_YAML") from None
    return parse_schema_text(text, filename=filename)


def parse_schema_text(text: str, *, filename: str = "<schema>") -> SchemaFile:
    """Validate schema-file text (YAML or JSON); raises :class:`SchemaFileError`."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        detail = str(exc).replace('"<unicode string>"', filename)
        raise SchemaFileError(filename, [f"not valid YAML: {detail}"],
                              code="SCHEMA_FILE_YAML") from None
    if not isinstance(data, dict):
        raise SchemaFileError(filename, ["the file must be a mapping with schema, tenant, topics"])
    try:
        return SchemaFile.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # A list whose items failed is also reported "too short"; that echo only confuses.
        errors = [e for e in errors if e["type"] != "too_short" or not any(
            len(o["loc"]) > len(e["loc"]) and o["loc"][: len(e["loc"])] == e["loc"]
            for o in errors)]
        problems = [f"{_where(data, err['loc'])}: {_message(err)}" for err in errors]
        raise SchemaFileError(filename, problems) from None


def _message(err: Any) -> str:
    message = str(err["msg"])
    return message.removeprefix("Value error, ")


def _where(data: Any, loc: tuple[Any, ...]) -> str:
    """``topics[0] (state).parameters[1] (battery_v).type`` for a pydantic error location."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            node = node[item] if isinstance(node, list | tuple) and item < len(node) else None
            if isinstance(node, dict) and isinstance(node.get("name"), str):
                label += f" ({node['name']})"
            parts.append(label)
        elif isinstance(item, str) and item in ("function-after", "function-before"):
            continue
        else:
            parts.append(("." if parts else "") + str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return "".join(parts) or "(file)"
