"""Device schemas of the registry: their versions and the test of a sample."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import ConfigDict, Field

from schemas.api.base import Page, _Body, _Query, _Request
from schemas.device_schema import TOPIC_PATTERN


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
    name: str
    version: int
    versions: list[int]
    content_hash: str
    created_at: datetime
    devices: int
    source_text: str
    spec: dict[str, Any]
    parameters: list[dict[str, Any]]


class SchemaTestRequest(_Request):
    """A sample to run through validate, mutate and derive (no service is touched)."""

    # Any JSON, NUL included: the sample is evaluated, never stored.
    payload: Any = Field(description="An envelope (its `values` are used) or the values alone.")
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
    validate_: dict[str, Any] = Field(alias="validate")
    mutate: dict[str, Any] | None
    derive: dict[str, Any] | None
    outcome: Literal["processed", "failed_validation", "failed_mutate", "failed_derive"]

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)
