"""Device schemas of the registry: their versions and the test of a sample."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import ConfigDict, Field

from schemas.api.base import Page, _Body, _Query, _Request
from schemas.device_schema import TOPIC_PATTERN, SchemaFile


class SchemaQuery(_Query):
    pass


class SchemaSummary(_Body):
    name: str
    versions: int
    latest_version: int
    content_hash: str
    updated_at: datetime
    devices: int


class SchemaPage(Page[SchemaSummary]):
    """The caller's schemas by name, each with its newest version."""


class SchemaVersionQuery(_Query):
    version: int | None = Field(None, ge=1, le=2**31 - 1, description="Default: the newest.")


class SchemaVersion(_Body):
    # One stored version of a schema, with the text it was applied from. (A comment: a
    # docstring would become the document's description.)
    # operator-only (the CLI's record; the ingest side caches versions by id)
    id: uuid.UUID = Field(exclude=True)
    tenant: str = Field(exclude=True)
    name: str
    version: int
    versions: tuple[int, ...]
    content_hash: str
    created_at: datetime
    devices: int
    source_text: str
    spec: dict[str, Any]
    topic_ids: dict[str, uuid.UUID] = Field(exclude=True)  # operator-only
    parameters: list[dict[str, Any]]

    def schema_file(self) -> SchemaFile:
        """The version's content as a :class:`SchemaFile`."""
        return SchemaFile.model_validate(self.spec)


class SchemaTestRequest(_Request):
    """A sample to run through validate, mutate and derive (no service is touched)."""

    # Any JSON, NUL included: the sample is evaluated, never stored.
    payload: Any = Field(description="An envelope (an object with `ts` and `values`, held to "
                         "the envelope contract as ingest holds one) or the values alone.")
    topic: str = Field(
        pattern=TOPIC_PATTERN,
        description="The schema's topic the sample is for (every test names one: whether a "
        "schema has one topic or several, the request is the same)."
    )
    version: int | None = Field(None, ge=1, le=2**31 - 1, description="Default: the newest.")


class SchemaTestReport(_Body):
    schema_name: str = Field(alias="schema")
    topic: str
    content_hash: str
    ingress: dict[str, Any] | None = Field(
        description="The envelope contract's verdict (`ok`, `code`, `message`); null for a "
        "sample of values alone.")
    validate_: dict[str, Any] | None = Field(alias="validate")
    mutate: dict[str, Any] | None
    derive: dict[str, Any] | None
    outcome: Literal["processed", "failed_ingress", "failed_validation", "failed_mutate",
                     "failed_derive"]

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)
