"""Device schemas of the registry: their versions and the test of a sample."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, ConfigDict, Field

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


class SchemaTrialRequest(_Request):
    """A stored schema version to try on a device's recorded envelopes (nothing is written)."""

    schema_name: str = Field(alias="schema", min_length=1, max_length=128,
                             description="The schema's name.")
    version: int | None = Field(None, ge=1, le=2**31 - 1, description="Default: the newest.")
    topic: str | None = Field(None, pattern=TOPIC_PATTERN,
                              description="Only this topic (default: every topic of the schema).")
    last: int | None = Field(None, ge=1, le=100_000,
                             description="The device's newest N envelopes (default: the "
                             "`schemas.trial_last` setting).")
    since: AwareDatetime | None = Field(None, description="Only envelopes stored since "
                                        "(RFC 3339, with its offset).")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class ParameterChange(_Body):
    changed: int = Field(description="Envelopes whose value would differ (both versions complete).")
    appeared: int
    disappeared: int
    min: float | None = Field(description="Smallest numeric difference (new - recorded).")
    median: float | None
    max: float | None


class TrialEnvelope(_Body):
    stream_seq: int
    device: str | None
    topic: str | None
    key: str
    measured_at: datetime | None
    message_id: int | None = Field(description="The recorded envelope (null: never recorded).")
    old_status: str | None
    old_error_code: str | None
    old_version: int | None
    old_values: dict[str, Any] | None
    new_status: str
    new_error_code: str | None
    new_reasons: list[str]
    new_values: dict[str, Any] | None
    changed_parameters: list[str]
    changed: bool


class SchemaTrialReport(_Body):
    """What a schema version would make of a device's recorded envelopes, beside what the
    current version recorded (``tideway schema test --device``)."""

    tenant: str = Field(exclude=True)  # operator-only: the caller's own
    schema_name: str = Field(alias="schema")
    version: int | None = Field(None, description="The stored version tried.")
    content_hash: str
    subjects: list[str]
    scanned: int
    repeats: int
    out_of_scope: int
    tried: int
    compared: int
    status_changed: int
    status_changes: dict[str, int] = Field(description="`old → new` status: envelopes.")
    statuses: dict[str, int] = Field(description="The version's status: envelopes.")
    reasons: dict[str, int] = Field(description="Reason codes of its refusals: envelopes.")
    refused: int
    refused_share: float
    max_refused_share: float
    flagged: bool = Field(description="It refuses more than `max_refused_share`.")
    parameters: dict[str, ParameterChange]
    envelopes: list[TrialEnvelope] = Field(description="Up to 200, status changes first.")
    elapsed_s: float

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)
