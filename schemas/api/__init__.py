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

The models live by area (``runs``, ``sessions``, ``devices``, ``device_schemas``,
``dead_letters``, ``events``, ``telemetry``), the pieces every area uses in ``base``; this
package re-exports them all, so ``from schemas.api import X`` names any of them.
"""

from schemas.api.base import (
    CURSOR_PATTERN,
    LIMIT_DEFAULT,
    LIMIT_MAX,
    Health,
    Limit,
    Page,
    Problem,
    Text,
    operator_fields,
)
from schemas.api.dead_letters import (
    DeadLetter,
    DeadLetterGroup,
    DeadLetterGroupPage,
    DeadLetterGroupQuery,
    DeadLetterPage,
    DeadLetterQuery,
    DeadLetterSample,
    DeadLetterState,
    DeadLetterSummary,
    RedriveReport,
    RedriveResult,
    ResolveReport,
    ResolveRequest,
    SessionDeadLetter,
    SessionDeadLetterPage,
    SessionDeadLetterQuery,
)
from schemas.api.device_schemas import (
    SchemaPage,
    SchemaQuery,
    SchemaSummary,
    SchemaTestReport,
    SchemaTestRequest,
    SchemaTrialReport,
    SchemaTrialRequest,
    SchemaVersion,
    SchemaVersionQuery,
)
from schemas.api.devices import (
    Device,
    DeviceChange,
    DeviceCredential,
    DeviceCredentialPage,
    DevicePage,
    DeviceQuery,
    IssuedDeviceCredential,
    RevokedDeviceCredentials,
)
from schemas.api.events import (
    EventStreamQuery,
)
from schemas.api.fleet_history import (
    FleetBucket,
    FleetHistory,
    FleetHistoryQuery,
    FleetRange,
)
from schemas.api.runs import (
    BackfillSchedule,
    BackfillSchedules,
    CancelResult,
    DagAttempt,
    DagEdge,
    DagJob,
    Run,
    RunDag,
    RunDataset,
    RunJob,
    RunPage,
    RunQuery,
    RunStarted,
    RunStatus,
    RunSummary,
)
from schemas.api.sessions import (
    LapRow,
    LapSegment,
    LapTrace,
    LapTracePoint,
    ReceiptArtifact,
    ReceiptLinks,
    ReprocessRequest,
    RollbackRequest,
    RollbackResult,
    Session,
    SessionArtifact,
    SessionLaps,
    SessionPage,
    SessionQuery,
    SessionRun,
    SessionSummary,
    SessionTrack,
    TrackPoint,
    UploadForm,
    UploadReceipt,
)
from schemas.api.telemetry import (
    ConsumerPending,
    DeviceActivity,
    DeviceQuality,
    DeviceSeries,
    DeviceSeriesQuery,
    FleetLive,
    FleetQuery,
    FleetReport,
    FleetSort,
    MessageExplanation,
    ParameterSeries,
    RecentMessage,
    SeriesPoint,
)

__all__ = [
    "CURSOR_PATTERN",
    "LIMIT_DEFAULT",
    "LIMIT_MAX",
    "BackfillSchedule",
    "BackfillSchedules",
    "CancelResult",
    "ConsumerPending",
    "DagAttempt",
    "DagEdge",
    "DagJob",
    "DeadLetter",
    "DeadLetterGroup",
    "DeadLetterGroupPage",
    "DeadLetterGroupQuery",
    "DeadLetterPage",
    "DeadLetterQuery",
    "DeadLetterSample",
    "DeadLetterState",
    "DeadLetterSummary",
    "Device",
    "DeviceActivity",
    "DeviceChange",
    "DeviceCredential",
    "DeviceCredentialPage",
    "DevicePage",
    "DeviceQuality",
    "DeviceQuery",
    "DeviceSeries",
    "DeviceSeriesQuery",
    "EventStreamQuery",
    "FleetBucket",
    "FleetHistory",
    "FleetHistoryQuery",
    "FleetLive",
    "FleetQuery",
    "FleetRange",
    "FleetReport",
    "FleetSort",
    "Health",
    "IssuedDeviceCredential",
    "LapRow",
    "LapSegment",
    "LapTrace",
    "LapTracePoint",
    "Limit",
    "MessageExplanation",
    "Page",
    "ParameterSeries",
    "Problem",
    "ReceiptArtifact",
    "ReceiptLinks",
    "RecentMessage",
    "RedriveReport",
    "RedriveResult",
    "ReprocessRequest",
    "ResolveReport",
    "ResolveRequest",
    "RevokedDeviceCredentials",
    "RollbackRequest",
    "RollbackResult",
    "Run",
    "RunDag",
    "RunDataset",
    "RunJob",
    "RunPage",
    "RunQuery",
    "RunStarted",
    "RunStatus",
    "RunSummary",
    "SchemaPage",
    "SchemaQuery",
    "SchemaSummary",
    "SchemaTestReport",
    "SchemaTestRequest",
    "SchemaTrialReport",
    "SchemaTrialRequest",
    "SchemaVersion",
    "SchemaVersionQuery",
    "SeriesPoint",
    "Session",
    "SessionArtifact",
    "SessionDeadLetter",
    "SessionDeadLetterPage",
    "SessionDeadLetterQuery",
    "SessionLaps",
    "SessionPage",
    "SessionQuery",
    "SessionRun",
    "SessionSummary",
    "SessionTrack",
    "Text",
    "TrackPoint",
    "UploadForm",
    "UploadReceipt",
    "operator_fields",
]
