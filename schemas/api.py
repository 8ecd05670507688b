"""The HTTP API's request and response bodies (``/v1``): the one description of its wire format.

The API's handlers build every answer through these models and read every JSON body and query
string with them, and ``streams.api.openapi`` turns them into the OpenAPI 3.1 document served at
``/v1/openapi.json`` (committed as ``docs/openapi.json``). So the document cannot say one thing
while the handlers do another: a field added here appears in both, a field a handler forgets is
a validation error in the tests.

Conventions:

- Every list is a :class:`Page`: ``items`` in a stable order and ``next``, the path of the next
  page (``null`` on the last). The cursor in it is opaque; a client follows ``next`` as it is.
- Every error is an RFC 9457 :class:`Problem` (``application/problem+json``) whose ``code`` is
  one of ``schemas.error_codes``.
- Text a client sends is checked once here (:data:`Text`): Postgres cannot store NUL, so it is
  a 400 at the edge rather than a 500 deep inside, by a pattern the document shows. (JSON
  strings may spell lone surrogates; the JSON parser refuses them.)
- Every constraint is said in the model, so the document says it: patterns of ids and names,
  a cursor's alphabet, which body fields are required. A request the document calls valid is
  not refused as malformed (tests/integration/api/test_property.py holds the API to that).
- Loosely structured data Tideway stores as JSON (a run's summary or config, a stage log's
  snapshots) is passed through as objects; everything the API itself decides has a field.

The module is longer than the house's 400 lines on purpose: it is one document's vocabulary,
mostly field lists, and split by area it would scatter the shared pieces (pages, problems,
checked text) that every area uses.
"""

from __future__ import annotations

import datetime as dt
import uuid
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from schemas.device_schema import TOPIC_PATTERN
from schemas.run_config import RunConfig

__all__ = [
    "LIMIT_DEFAULT",
    "LIMIT_MAX",
    "CancelResult",
    "DeadLetter",
    "DeadLetterGroup",
    "DeadLetterGroupPage",
    "DeadLetterGroupQuery",
    "DeadLetterPage",
    "DeadLetterQuery",
    "DeadLetterSample",
    "DeadLetterSummary",
    "Device",
    "DeviceChange",
    "DeviceCredential",
    "DeviceCredentialPage",
    "DevicePage",
    "DeviceQuery",
    "Health",
    "IssuedDeviceCredential",
    "MessageExplanation",
    "Page",
    "Problem",
    "RedriveReport",
    "ReprocessRequest",
    "ResolveReport",
    "ResolveRequest",
    "RevokedDeviceCredentials",
    "RollbackRequest",
    "RollbackResult",
    "Run",
    "RunDag",
    "RunPage",
    "RunQuery",
    "RunStarted",
    "RunSummary",
    "SchemaPage",
    "SchemaQuery",
    "SchemaSummary",
    "SchemaTestReport",
    "SchemaTestRequest",
    "SchemaVersion",
    "SchemaVersionQuery",
    "Session",
    "SessionPage",
    "SessionQuery",
    "SessionSummary",
    "UploadForm",
    "UploadReceipt",
]

LIMIT_DEFAULT = 50
LIMIT_MAX = 200


class _DescribedAs:
    """Describes a field in the JSON Schema as ``model`` while it validates as its own type:
    the run config is checked by the code that checks every run config (``INVALID_CONFIG``,
    the key named), and the document shows the config's keys."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return handler(self.model.__pydantic_core_schema__)


Text = Annotated[str, Field(pattern=r"^[^\x00]*$")]
"""Client text Postgres can store: no NUL (Postgres refuses it), said by a pattern so that the
document says it too. (Lone surrogates need no rule: the JSON parser refuses them in a body,
the edge in a query string - ``streams.api.inputs`` - and JSON Schema strings have none.)"""

CURSOR_PATTERN = "^[A-Za-z0-9_-]{1,1000}$"
"""A page cursor or a dead-letter group id: base64url without padding."""

Limit = Annotated[int, Field(ge=1, le=LIMIT_MAX, description="Items per page.")]
_CURSOR_HELP = (
    "Where the page starts: the `cursor` of the previous page's `next` link, as it is "
    "(base64url, no padding, of the last item's sort key as a JSON array; opaque and checked: "
    "one the API did not make is a 400)."
)
RunStatus = Literal[
    "pending", "running", "cancel_requested", "succeeded", "partial", "failed", "cancelled"
]


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True)


class _Request(BaseModel):
    """A JSON body or query string a client sends: unknown fields are refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class _Query(BaseModel):
    """A query string: unknown parameters are ignored (as HTTP caches and proxies add some)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    limit: Limit = LIMIT_DEFAULT
    # A field with a pattern of its own is a plain ``str`` (its pattern excludes NUL too):
    # pydantic keeps one pattern, and which one when ``Text``'s meets the field's is not one
    # rule.
    cursor: str | None = Field(None, pattern=CURSOR_PATTERN, description=_CURSOR_HELP)


T = TypeVar("T")


class Page(_Body, Generic[T]):
    """One page of a list, in a stable order."""

    items: list[T]
    next: str | None = Field(
        pattern="^/v1/",
        description=(
            "The next page's path: this request's path and query with `cursor` set (follow it "
            "with the same key); null on the last page."
        ),
    )


class Problem(_Body):
    """An error (RFC 9457 problem details, ``application/problem+json``)."""

    type: str = Field(description="`urn:tideway:error:<code>`; see docs/errors.md.")
    title: str = Field(description="The HTTP status's reason phrase.")
    status: int
    detail: str = Field(description="What went wrong, for a person.")
    code: str = Field(description="The stable error code (schemas/error_codes.py).")
    request_id: str | None = Field(None, description="The request's X-Request-Id.")


class Health(_Body):
    status: Literal["ok", "degraded"]
    checks: dict[str, bool]


# -- sessions -------------------------------------------------------------------------------


class SessionQuery(_Query):
    device: Text | None = Field(None, max_length=200, description="Only this device's sessions.")


class SessionSummary(_Body):
    id: uuid.UUID
    device: str
    status: str
    query_ready: bool
    active_run_id: uuid.UUID | None
    title: str | None
    created_at: datetime
    latest_run_status: str | None


class SessionPage(Page[SessionSummary]):
    """The caller's sessions, newest first."""


class SessionRun(_Body):
    id: uuid.UUID
    status: str
    requested_by: str
    priority: int
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    failure_reason: str | None


class SessionArtifact(_Body):
    id: uuid.UUID
    filename: str
    sha256: str
    bytes: int
    status: str
    format_detected: str | None


class Session(_Body):
    id: uuid.UUID
    tenant: str
    device: str
    status: str
    query_ready: bool
    active_run_id: uuid.UUID | None
    title: str | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    runs: list[SessionRun]
    artifacts: list[SessionArtifact]


class TrackPoint(_Body):
    t: datetime
    lat: float
    lon: float
    speed_mps: float | None


class SessionTrack(_Body):
    """The active run's downsampled GNSS series, thinned for drawing."""

    session_id: uuid.UUID
    run_id: uuid.UUID | None
    dataset: str | None = Field(description="`gnss_L1`, or `gnss_L2` when L1 is absent.")
    rows: int = Field(description="Rows in the dataset, before thinning.")
    points: list[TrackPoint]
    reason: str | None = Field(
        description="Why there are no points: `NO_ACTIVE_RUN` or `NO_GNSS_SERIES`."
    )


class LapRow(_Body):
    """One complete lap of the active run (spec 000 §11)."""

    lap: int
    start: datetime
    end: datetime
    lap_time_s: float
    distance_m: float | None = Field(description="Speed integrated between the two crossings.")
    max_speed_mps: float | None
    avg_speed_mps: float | None
    delta_to_best_s: float | None
    is_best: bool
    valid: bool
    pit: bool
    pit_in: bool
    pit_out: bool
    stopped_s: float


class SessionLaps(_Body):
    """The active run's laps, one row each, and the start/finish line that timed them."""

    session_id: uuid.UUID
    run_id: uuid.UUID | None
    line: dict[str, Any] | None = Field(
        description="The start/finish line used: configured or detected, with its ends."
    )
    reason: str | None = Field(
        description="Why there are no laps (`NO_ACTIVE_RUN`, `TRACK_NOT_CLOSED`, ...)."
    )
    laps: list[LapRow]


class LapTracePoint(_Body):
    t_s: float = Field(description="Seconds since the lap's start crossing.")
    d_m: float = Field(description="Distance driven since the start crossing (speed integrated).")
    speed_mps: float


class LapSegment(_Body):
    """A corner, straight or jump of the lap, placed by distance into the lap."""

    segment_id: int
    kind: str = Field(description="`corner`, `straight` or `jump`.")
    direction: str | None = Field(description="`left` / `right` for a corner.")
    start_m: float | None
    apex_m: float | None = Field(description="A corner's point of tightest curvature.")
    end_m: float | None
    heading_change_deg: float | None


class LapTrace(_Body):
    """One lap of the active run as speed over distance, for overlaying laps."""

    session_id: uuid.UUID
    run_id: uuid.UUID
    lap: int
    lap_time_s: float
    dataset: str | None = Field(description="`gnss_L1`, or `gnss_L2` when L1 is absent.")
    points: list[LapTracePoint]
    segments: list[LapSegment] = Field(
        description="The lap's segments (detect_segments), by start; empty when none ran."
    )
    reason: str | None = Field(description="Why there are no points: `NO_GNSS_SERIES`.")


class ReceiptArtifact(_Body):
    name: str
    sha256: str
    size: int


class ReceiptLinks(_Body):
    session: str
    run: str | None


class UploadReceipt(_Body):
    """What ``POST /v1/sessions`` stored and published (intake makes the run)."""

    tenant: str
    device: str
    session_id: uuid.UUID
    run_id: uuid.UUID | None = Field(description="Null when intake took longer than the wait.")
    artifact_set_hash: str
    artifacts: list[ReceiptArtifact]
    subject: str
    links: ReceiptLinks


class UploadForm(_Body):
    """The form fields of a multipart upload (files are parts with a filename)."""

    file: bytes = Field(json_schema_extra={"format": "binary"})
    device: str
    priority: int = Field(0, ge=-1000, le=1000)
    config: str | None = Field(
        None,
        description="A JSON object: the run's config, with the keys reprocess's `config` "
        "shows (a bad one is a 400 `INVALID_CONFIG`, the key named).",
    )
    title: str | None = Field(None, max_length=500)
    date: dt.date | None = Field(None, description="The day a dateless log was recorded.")


class ReprocessRequest(_Request):
    # Checked by the handler with every run config's check (INVALID_CONFIG, the key named, as
    # the upload's), and described as what that check accepts.
    config: Annotated[dict[str, Any], _DescribedAs(RunConfig)] | None = Field(
        None,
        description="The new run's config (refused as the upload's is: 400 `INVALID_CONFIG`, "
        "the key named). Default: the source run's config.",
    )
    priority: int | None = Field(None, ge=-1000, le=1000)


class RollbackRequest(_Request):
    to_run: uuid.UUID | None = Field(None, description="Default: the previous good run.")


class RollbackResult(_Body):
    session_id: uuid.UUID
    from_run: uuid.UUID
    to_run: uuid.UUID


# -- runs -----------------------------------------------------------------------------------


class RunQuery(_Query):
    session: uuid.UUID | None = Field(None, description="Only this session's runs.")
    status: RunStatus | None = None


class RunSummary(_Body):
    id: uuid.UUID
    session_id: uuid.UUID
    status: str
    priority: int
    requested_by: str
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    jobs_total: int
    jobs_open: int
    failure_reason: str | None
    retry_of: uuid.UUID | None


class RunPage(Page[RunSummary]):
    """The caller's runs, newest first."""


class RunJob(_Body):
    name: str
    job_type: str
    state: str
    critical: bool
    pool: str
    attempt_count: int
    max_attempts: int
    skip_reason: str | None
    last_error_code: str | None
    last_error_message: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class RunDataset(_Body):
    name: str
    dataset_type: str
    job: str
    storage_url: str
    content_hash: str | None
    schema_version: str | None
    row_count: int | None
    bytes: int | None
    time_range_start: datetime | None
    time_range_end: datetime | None


class Run(_Body):
    id: uuid.UUID
    session_id: uuid.UUID
    status: str
    artifact_set_hash: str
    requested_by: str
    parser_version: str | None
    pipeline_version: str | None
    fusion_version: str | None
    config: dict[str, Any]
    priority: int
    jobs_total: int
    jobs_open: int
    gating: list[dict[str, Any]]
    features_available: dict[str, bool]
    feature_reasons: dict[str, str]
    summary: dict[str, Any]
    failure_reason: str | None
    retry_of: uuid.UUID | None
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    active: bool = Field(description="Whether the session's active pointer is this run.")
    jobs: list[RunJob]
    datasets: list[RunDataset]


class DagEdge(_Body):
    on: str = Field(description="The job depended on.")
    hard: bool = Field(description="False: a soft dependency (its failure does not block).")


class DagAttempt(_Body):
    number: int
    status: str
    worker: str
    started_at: datetime | None
    ended_at: datetime | None
    duration_s: float | None
    error_code: str | None
    error_type: str | None
    error_source: str | None
    severity: int | None
    message: str | None


class DagJob(_Body):
    name: str
    job_type: str
    state: str
    critical: bool
    pool: str
    deps: list[DagEdge]
    attempt_count: int
    max_attempts: int
    next_run_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    busy_s: float = Field(description="Seconds spent in attempts so far.")
    skip_reason: str | None
    last_error_code: str | None
    last_error_message: str | None
    datasets: list[str]
    attempts: list[DagAttempt]


class RunDag(_Body):
    """A run's DAG (``tideway runs show``): jobs in dependency order, with their attempts."""

    run_id: uuid.UUID
    status: str
    gating: list[dict[str, Any]] = Field(description="Why jobs were skipped by gating.")
    jobs: list[DagJob]


class CancelResult(_Body):
    run_id: uuid.UUID
    status: str
    cancelled: int = Field(description="Jobs not yet started, now cancelled.")
    requested: int = Field(description="Running jobs asked to stop at their next checkpoint.")


class RunStarted(_Body):
    """A run a retry or reprocess started (``created`` false: an identical one existed)."""

    run_id: uuid.UUID
    created: bool


# -- devices --------------------------------------------------------------------------------


class DeviceQuery(_Query):
    active: bool | None = None
    schema_name: Text | None = Field(
        None, alias="schema", max_length=200, description="Only devices on this schema."
    )


class Device(_Body):
    external_id: str
    name: str | None
    active: bool
    schema_name: str | None = Field(alias="schema")
    schema_version: int | None
    created_at: datetime
    updated_at: datetime

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)


class DevicePage(Page[Device]):
    """The caller's devices by id."""


class DeviceChange(_Body):
    device: Device
    changed: bool = Field(description="False: the device already was in that state.")


# -- device credentials ---------------------------------------------------------------------


class DeviceCredential(_Body):
    """One credential of a device as the registry keeps it: never its secret."""

    key_id: str = Field(description="The secret's public part (`twd_<key_id>_…`).")
    device: str
    created_at: datetime
    revoked_at: datetime | None
    state: Literal["active", "revoked", "rotated"] = Field(
        description="`rotated`: retired by a rotation; `revoked`: retired by a revoke."
    )


class DeviceCredentialPage(Page[DeviceCredential]):
    """Every credential ever issued to the device, oldest first, in one page (`next` is null)."""


class IssuedDeviceCredential(_Body):
    """A credential just issued: the only answer that ever holds its secret."""

    tenant: str
    device: str
    key_id: str
    username: str = Field(description="The NATS and MQTT user name: `<tenant>.<device>`.")
    secret: str = Field(
        description="The NATS and MQTT password. Shown once: Tideway keeps only its SHA-256."
    )
    created_at: datetime
    retired: list[str] = Field(description="Key ids the rotation retired (empty on issue).")


class RevokedDeviceCredentials(_Body):
    device: str
    revoked: list[str] = Field(description="Key ids retired (empty: none was valid).")


# -- schemas --------------------------------------------------------------------------------


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


# -- dead letters ---------------------------------------------------------------------------

DeadLetterState = Literal["open", "resolved"]


class DeadLetterGroupQuery(_Query):
    state: DeadLetterState = "open"


class DeadLetterSample(_Body):
    id: int
    subject: str
    payload_text: str = Field(description="The start of the original body (at most 512 chars).")


class DeadLetterGroup(_Body):
    """Dead letters with one error signature: reason code, failing stage, schema version."""

    id: str = Field(description="The group's opaque id.")
    code: str
    stage: str | None
    schema_name: str | None = Field(alias="schema")
    schema_version: int | None
    count: int
    first_seen_at: datetime
    last_seen_at: datetime
    sample: DeadLetterSample

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)


class DeadLetterGroupPage(Page[DeadLetterGroup]):
    """Error signatures, in signature order."""


class DeadLetterQuery(_Query):
    state: DeadLetterState = "open"
    group: str | None = Field(
        None, pattern=CURSOR_PATTERN, description="Only this group's (a group's `id`)."
    )


class DeadLetterSummary(_Body):
    id: int
    ingestion_message_id: int
    subject: str
    reason_code: str
    state: str
    redrive_count: int
    first_seen_at: datetime
    last_seen_at: datetime
    resolution: str | None
    status: str = Field(description="The envelope's status.")


class DeadLetterPage(Page[DeadLetterSummary]):
    """Dead letters, oldest first."""


class DeadLetter(DeadLetterSummary):
    headers: dict[str, Any]
    failures: list[dict[str, Any]]
    resolution_note: str | None
    resolved_at: datetime | None
    attempts: int
    stream_seq: int | None
    received_at: datetime | None
    source_deduplication_key: str | None
    envelope: Any = Field(description="The original body as JSON, or null if it is not JSON.")
    payload_text: str
    payload_bytes: int


class RedriveResult(_Body):
    dead_letter_id: int
    message_id: int | None
    outcome: Literal["completed", "failed", "not_redrivable", "not_open"]
    detail: str | None


class RedriveReport(_Body):
    completed: int
    failed: int
    not_redrivable: int
    not_open: int
    results: list[RedriveResult]


class ResolveRequest(_Request):
    note: Text = Field(min_length=1, max_length=2000, description="Why they are resolved.")


class ResolveReport(_Body):
    resolved: list[int]
    not_resolved: list[int]


class EventStreamQuery(BaseModel):
    """Where ``GET /v1/events`` starts (the ``Last-Event-ID`` header wins over it)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    last_event_id: int | None = Field(
        None, ge=0, le=2**63 - 1,
        description="Resume after this event (its SSE `id`): every later event the stream "
        "holds comes first, in order. For clients that cannot send the `Last-Event-ID` header.",
    )


class SessionDeadLetterQuery(_Query):
    """A page of the caller's session dead letters (no filter of its own)."""


class SessionDeadLetter(_Body):
    """A session notice intake dead-lettered (JetStream's ``SESSIONS_DLQ``; never its body)."""

    id: int = Field(description="The dead letter's id: its sequence in the dead-letter stream.")
    subject: str = Field(description="The notice's original subject.")
    device: str
    code: str = Field(description="Why intake refused it (`BAD_NOTICE`, `ARTIFACT_MISSING`...).")
    message: str
    error_type: str | None = Field(
        description="`permanent` (it can never succeed as it is) or `transient` (it kept "
        "failing until the delivery budget ran out); null for an old dead letter."
    )
    retry_count: int | None = Field(description="Deliveries before the one that dead-lettered it.")
    first_seen_at: datetime | None = Field(description="When the notice was stored.")
    last_seen_at: datetime | None = Field(description="When it was dead-lettered.")


class SessionDeadLetterPage(Page[SessionDeadLetter]):
    """Session dead letters, oldest first."""


# -- fleet ----------------------------------------------------------------------------------

FleetSort = Literal[
    "device",
    "last_seen_at",
    "envelopes",
    "invalid_share",
    "duplicates",
    "out_of_order",
    "seq_gaps",
    "latency_p50_s",
    "clock_skew_s",
]


class FleetQuery(BaseModel):
    """The window, the sort and the search of the fleet's device table."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    window_minutes: int = Field(60, ge=1, le=1440, description="The recent window read.")
    sort: FleetSort = Field("last_seen_at", description="`clock_skew_s` sorts by its size.")
    order: Literal["asc", "desc"] = "desc"
    search: Text | None = Field(None, max_length=200, description="Part of the device id.")
    limit: int = Field(100, ge=1, le=1000, description="Devices answered (the first by sort).")


class DeviceQuality(_Body):
    """One device's data-quality figures over the window (see docs/api.md, Fleet)."""

    device: str
    last_seen_at: datetime
    envelopes: int = Field(description="Received, duplicates not counted.")
    invalid_share: float = Field(description="Share of envelopes that failed validation.")
    duplicates: int
    out_of_order: int = Field(description="Envelopes whose seq is below the one before them.")
    seq_gaps: int = Field(description="seq numbers in the window's range that never arrived.")
    latency_p50_s: float | None = Field(description="Median received - measured, seconds.")
    clock_skew_s: float | None = Field(description="Smallest received - measured, seconds.")


class FleetReport(_Body):
    """The fleet over a recent window: ingest by status, open dead letters, device figures."""

    at: datetime
    window_s: int
    statuses: dict[str, int] = Field(description="Envelopes received per status.")
    rate_per_min: float = Field(description="Envelopes received per minute, all statuses.")
    open_dead_letters: int
    matched: int = Field(description="Devices seen in the window that match the search.")
    devices: list[DeviceQuality] = Field(description="The first `limit` of them, sorted.")


class RecentMessage(_Body):
    id: int
    received_at: datetime
    measured_at: datetime | None
    seq: int | None
    topic: str = Field(description="The subject's last token.")
    status: str
    error_code: str | None


class ConsumerPending(_Body):
    stream: str
    durable: str
    pending: int = Field(description="Stored envelopes the consumer has not been given yet.")
    ack_pending: int = Field(description="Given to a consumer, not acknowledged yet.")


class FleetLive(_Body):
    """Ingest right now: end-to-end latency over the last minutes and the consumer's backlog."""

    at: datetime
    window_s: int
    envelopes: int = Field(
        description="The caller's envelopes the figures were read from: the window's newest, "
        "at most 10,000."
    )
    end_to_end_p50_s: float | None = Field(
        description="JetStream storing an envelope to its outcome being recorded (median)."
    )
    end_to_end_p95_s: float | None
    consumer: ConsumerPending | None = Field(
        description="The shared ingest consumer (all tenants); null when NATS cannot say."
    )


class DeviceActivity(_Body):
    """A device's hot state (Redis: the newest measurement per topic) and its newest envelopes."""

    device: str
    state: dict[str, Any] = Field(
        description="Per topic: `ts`, `seq`, `values`, `message_key`, `received_at`."
    )
    messages: list[RecentMessage] = Field(description="The newest 50, newest first.")


class SeriesPoint(_Body):
    t: datetime = Field(description="Start of the time bucket.")
    value: float = Field(description="The bucket's average value.")


class ParameterSeries(_Body):
    parameter: str
    unit: str
    points: list[SeriesPoint]


class DeviceSeriesQuery(BaseModel):
    """How far back the device's charts reach."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    window_minutes: int = Field(60, ge=1, le=1440, description="How far back to chart.")


class DeviceSeries(_Body):
    """A device's numeric parameters over a recent window (ClickHouse), bounded for drawing."""

    device: str
    since: datetime
    until: datetime
    parameters: list[ParameterSeries] = Field(
        description="At most 24 parameters of at most 240 bucket averages each, by name."
    )
    reason: str | None = Field(
        None,
        description="Why there are no charts: `NO_CLICKHOUSE` (none configured for the API) "
        "or the ClickHouse error's code (`CLICKHOUSE_BUSY`, `CLICKHOUSE_UNAVAILABLE`...).",
    )


# -- messages -------------------------------------------------------------------------------


class MessageExplanation(_Body):
    """Everything Tideway knows about one envelope (``tideway messages show``)."""

    message: dict[str, Any]
    stages: list[dict[str, Any]]
    telemetry: dict[str, Any] | None
    duplicates: list[dict[str, Any]]
    dead_letter: dict[str, Any] | None
    published: dict[str, Any] | None = None
    archive: dict[str, list[str]] | None = Field(
        None,
        description="Set when retention had dropped rows of the envelope and they were read "
        "from the Parquet archives instead: per table, the archive objects read.",
    )
