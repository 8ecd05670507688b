"""The drivers' exceptions (asyncpg, nats-py), named and classified in one place.

Nothing outside ``streams.adapters`` names a driver's exception class or spells the codes that
say "Postgres / NATS cannot do this now" (``PG_UNAVAILABLE``, ``PG_CONFLICT``,
``NATS_UNAVAILABLE``): callers catch the names and tuples below and turn what they caught into
a Tideway error with the functions below (an import-linter contract in ``pyproject.toml`` keeps
the drivers' imports here). The class of the Tideway error decides what happens next
(``streams.errors``).

Postgres. A failure is one of three kinds, and they call for different answers:

- *the server cannot be reached now* (:data:`PG_UNREACHABLE`, or the connection died under a
  statement: :data:`PG_LOST`): ``TransientError`` ``PG_UNAVAILABLE`` (:func:`pg_unavailable`);
- *the server refused the statement for now*: a SQLSTATE in :data:`NOT_NOW_CLASSES` (a
  deadlock, a shutdown, no resources) passes by itself: ``TransientError`` ``PG_UNAVAILABLE``
  (:func:`pg_not_now`); a deadlock or serialisation failure (:data:`PG_CONFLICTS`) that a
  transaction's own retries did not get past is ``PG_CONFLICT`` (:func:`pg_conflict`);
- *the server refused these rows*: a SQLSTATE in :data:`ROW_CLASSES` singles out a poison row,
  which a batch writer isolates (:func:`translate_pg`: ``PermanentError``
  ``PERSIST_REJECTED``).

The tuples differ on purpose where their callers differ: a closed pool (``InterfaceError``) is
"Postgres cannot answer" to an upload's quota check, which then skips the check, but a bug to
session intake, which must not mistake it for an outage.

NATS. :data:`NATS_UNREACHABLE` is what nats-py raises while a server is unreachable,
restarting or dropping the connection; :data:`NatsError` is the root of everything else it
raises (JetStream's API errors included); :func:`nats_unavailable` names a read that NATS could
not answer.
"""

from __future__ import annotations

import asyncio
from typing import Final

import asyncpg
from nats import errors as nats_errors
from nats.js import errors as js_errors

from schemas import error_codes as codes
from streams.errors import PermanentError, TidewayError, TransientError

__all__ = [
    "NATS_FAILURES", "NATS_UNREACHABLE", "NOT_NOW_CLASSES", "PG_CLOSED", "PG_CONFLICTS",
    "PG_FAILURES", "PG_LOST", "PG_NOT_CONNECTED", "PG_UNREACHABLE", "ROW_CLASSES", "BucketNotFound",
    "DigestMismatch", "JsBadRequest", "JsNotFound", "NatsError", "NatsTimeout",
    "ObjectNotFound", "PgCheckViolation", "PgConnectionError", "PgError", "PgIntegrityViolation",
    "PgLockNotAvailable", "PgUniqueViolation", "nats_unavailable", "pg_conflict", "pg_not_now",
    "pg_unavailable", "stream_gone", "translate_pg", "wrong_last_msg_id",
]

# --- Postgres (asyncpg) ------------------------------------------------------------------

PgError = asyncpg.PostgresError
"""The server answered with an error (it carries a ``sqlstate``)."""
PgConnectionError = asyncpg.PostgresConnectionError
"""A connection refused, lost or gone (SQLSTATE class 08 and asyncpg's own)."""
PgIntegrityViolation = asyncpg.IntegrityConstraintViolationError
"""A constraint refused a row (SQLSTATE class 23)."""
PgCheckViolation = asyncpg.CheckViolationError
"""A check constraint or a state-machine trigger refused a row (``23514``)."""
PgUniqueViolation = asyncpg.UniqueViolationError
"""A key that another transaction recorded first (``23505``)."""
PgLockNotAvailable = asyncpg.LockNotAvailableError
"""A lock not granted within ``lock_timeout`` (``55P03``)."""

PG_UNREACHABLE: Final = (
    OSError, asyncpg.PostgresConnectionError, asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError, asyncpg.CrashShutdownError,
)
"""What asyncpg raises when the server cannot be reached now: refused or lost connections,
a server that is starting up (``57P03``) or shutting down (``57P01``, ``57P02``)."""

PG_LOST: Final = (
    *PG_UNREACHABLE, asyncpg.ConnectionDoesNotExistError, asyncpg.InternalClientError,
)
"""Unreachable, or the connection died under the transaction (a server shutting down
mid-statement raises either of the last two). A closed pool is none of these."""

PG_CLOSED: Final = (*PG_UNREACHABLE, asyncpg.InterfaceError)
"""Unreachable, or this client cannot use its connection or pool (closed, gone)."""

PG_NOT_CONNECTED: Final = (
    OSError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
)
"""No connection to work on: a socket error, a connection or pool this client cannot use, a
connection refused or lost, a server starting up (partition maintenance defers on these)."""

PG_FAILURES: Final = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError,
                      asyncpg.InternalClientError)
"""What a call to Postgres raises when it fails; :func:`translate_pg` classifies all of it.
``InternalClientError`` is asyncpg's own bookkeeping failing, and a connection that dies under
an operation (a server shutting down mid-batch) is where it does so: it means "this
connection is gone", not a bug in the batch, so it defers the batch like a lost connection."""

PG_CONFLICTS: Final = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)
"""Postgres aborted the transaction to break a deadlock or a serialisation conflict: the
same transaction run again usually succeeds."""

NOT_NOW_CLASSES: Final = ("08", "40", "53", "57", "58")
"""SQLSTATE classes that mean "try again later": connection exception, transaction rollback
(serialization failure, deadlock), insufficient resources, operator intervention, system
error. Both JetStream consumers defer on them (ingest's recorder, session intake)."""

ROW_CLASSES: Final = ("22", "23", "54")
"""SQLSTATE classes in which Postgres refuses particular rows: data exceptions, integrity
constraints (the state-machine triggers raise check_violation), program limits (a value too
large for an index, say). Only these can single out a poison row; anything else (a lock
timeout, a missing table or privilege, an object in use) would refuse every row alike, and
bisecting on it would dead-letter whole batches of good rows."""


def pg_unavailable(exc: BaseException) -> TransientError:
    """``exc`` (one of :data:`PG_LOST`) as ``TransientError`` ``PG_UNAVAILABLE``."""
    return TransientError(f"cannot connect to Postgres: {exc}", code=codes.PG_UNAVAILABLE)


def pg_not_now(exc: asyncpg.PostgresError) -> TransientError | None:
    """A refusal in one of :data:`NOT_NOW_CLASSES` as ``TransientError`` ``PG_UNAVAILABLE``;
    ``None`` for a refusal of the statement itself."""
    if (exc.sqlstate or "")[:2] in NOT_NOW_CLASSES:
        return TransientError(f"Postgres: {exc}", code=codes.PG_UNAVAILABLE)
    return None


def pg_conflict(exc: BaseException, *, what: str) -> TransientError:
    """``exc`` (one of :data:`PG_CONFLICTS`, still raised after ``what``'s own retries) as
    ``TransientError`` ``PG_CONFLICT``."""
    return TransientError(f"{what} aborted: {exc}", code=codes.PG_CONFLICT)


def translate_pg(exc: BaseException) -> TidewayError:
    """What a batch writer (the ingest recorder, its dead letters) raises for ``exc`` (one of
    :data:`PG_FAILURES`, or a Tideway error, returned as it is).

    A row Postgres refuses is a ``PermanentError`` ``PERSIST_REJECTED``, which the writer
    isolates by halving the batch; every other failure is a ``TransientError`` and the batch is
    retried later. A refusal is described by the names Postgres gives (constraint, table,
    column) and its SQLSTATE, never its message, which quotes the value refused.
    """
    if isinstance(exc, TidewayError):
        return exc
    if isinstance(exc, asyncpg.CheckViolationError) and _partition_routing(exc):
        return TransientError(f"Postgres: a partition changed under the batch: {exc}",
                              code=codes.PG_ERROR)
    if isinstance(exc, asyncpg.PostgresError):
        if (exc.sqlstate or "")[:2] in ROW_CLASSES:
            return PermanentError(f"Postgres refused the batch: {_refusal(exc)}",
                                  code=codes.PERSIST_REJECTED)
        busy = pg_not_now(exc)
        if busy is not None:
            return busy
        return TransientError(f"Postgres could not record the batch now: {exc}",
                              code=codes.PG_ERROR)
    return TransientError(f"Postgres unavailable: {exc}", code=codes.PG_UNAVAILABLE)


def _refusal(exc: asyncpg.PostgresError) -> str:
    """A row's refusal by what Postgres names (class, SQLSTATE, constraint, table, column),
    without its message and detail: those quote the value refused (``invalid input syntax for
    type double precision: "51.5x"``, ``Key (lat)=(51.5) already exists``), and this text
    becomes the envelope's error message and its dead letter's failure (spec 000 §15)."""
    named = [f"{what} {name}" for what, name in (
        ("constraint", exc.constraint_name), ("table", exc.table_name),
        ("column", exc.column_name)) if name]
    return ", ".join([f"{type(exc).__name__} (SQLSTATE {exc.sqlstate})", *named])


def _partition_routing(exc: asyncpg.CheckViolationError) -> bool:
    """A row refused because partitions changed under it (an ATTACH of the range it was
    routed to DEFAULT for, a DETACH of its partition: streams.retention.maintain), not
    because of the row: no partition or partition constraint is at fault, so another try
    routes it afresh. (The state-machine triggers raise check_violation too, with no
    constraint name but their own message.)"""
    return exc.constraint_name is None and "partition" in str(exc)


# --- NATS (nats-py) ----------------------------------------------------------------------

NatsError = nats_errors.Error
"""The root of what nats-py raises (JetStream's errors included)."""
NatsTimeout = nats_errors.TimeoutError
"""A request or fetch with no answer in time (also a builtin ``TimeoutError``)."""
JsNotFound = js_errors.NotFoundError
"""JetStream has no such stream, consumer or message."""
JsBadRequest = js_errors.BadRequestError
"""JetStream refused the request (a consumer that exists with other settings, say)."""
BucketNotFound = js_errors.BucketNotFoundError
"""No such object-store bucket."""
ObjectNotFound = js_errors.ObjectNotFoundError
"""No such object in the bucket."""
DigestMismatch = js_errors.DigestMismatchError
"""An object whose bytes do not match the digest it was stored with."""

NATS_UNREACHABLE: Final = (
    OSError, asyncio.TimeoutError, nats_errors.StaleConnectionError,
    nats_errors.ConnectionClosedError, nats_errors.NoServersError,
    nats_errors.OutboundBufferLimitError, nats_errors.ProtocolError,
    nats_errors.ConnectionReconnectingError,
)
"""What nats-py reports while a server is unreachable, restarting or dropping the connection:
expected during any outage, so they mark the outage instead of logging a traceback each."""

NATS_FAILURES: Final = (*NATS_UNREACHABLE, nats_errors.Error)
"""Anything a NATS call raises when it fails: an outage, or an error nats-py names."""


def stream_gone(exc: BaseException) -> bool:
    """Whether a JetStream publish failed because its stream is not there (no server answers
    its subjects, or JetStream says so): it must be made again, not only retried."""
    return isinstance(exc, nats_errors.NoRespondersError | js_errors.NotFoundError)


WRONG_LAST_MSG_ID: Final = 10070
"""JetStream's error code for a publish whose ``Nats-Expected-Last-Msg-Id`` is not the
stream's last message id."""


def wrong_last_msg_id(exc: BaseException) -> bool:
    """Whether JetStream refused a publish only because the message it expected before it
    (``Nats-Expected-Last-Msg-Id``) is not the stream's last one."""
    return isinstance(exc, js_errors.APIError) and exc.err_code == WRONG_LAST_MSG_ID


def nats_unavailable(doing: str, exc: BaseException) -> TransientError:
    """NATS could not ``doing`` (``"read SESSIONS_DLQ"``) now: ``TransientError``
    ``NATS_UNAVAILABLE``."""
    return TransientError(f"cannot {doing}: {exc}", code=codes.NATS_UNAVAILABLE)
