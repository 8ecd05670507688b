"""Which Postgres errors single out a poison envelope and which only defer the batch."""

from __future__ import annotations

import asyncpg
import pytest

from schemas.error_codes import PERSIST_REJECTED
from streams.adapters.errors import PG_FAILURES, translate_pg
from streams.errors import PermanentError, TransientError


@pytest.mark.parametrize("error", [
    asyncpg.CheckViolationError,  # 23514, also what the state-machine triggers raise
    asyncpg.NotNullViolationError,  # 23502
    asyncpg.InvalidTextRepresentationError,  # 22P02
    asyncpg.CharacterNotInRepertoireError,  # 22021
    asyncpg.ProgramLimitExceededError,  # 54000: a value too large for an index
])
def test_errors_about_the_rows_themselves_are_permanent(error: type[Exception]) -> None:
    translated = translate_pg(error("refused"))
    assert isinstance(translated, PermanentError) and translated.code == PERSIST_REJECTED


@pytest.mark.parametrize(("error", "code"), [
    (asyncpg.LockNotAvailableError, "PG_ERROR"),  # 55P03: lock_timeout
    (asyncpg.ObjectInUseError, "PG_ERROR"),  # 55006
    (asyncpg.UndefinedTableError, "PG_ERROR"),  # 42P01: a migration not run yet
    (asyncpg.InsufficientPrivilegeError, "PG_ERROR"),  # 42501
    (asyncpg.DeadlockDetectedError, "PG_UNAVAILABLE"),  # 40P01
    (asyncpg.QueryCanceledError, "PG_UNAVAILABLE"),  # 57014: statement_timeout
    (asyncpg.ConnectionFailureError, "PG_UNAVAILABLE"),  # 08006
    (asyncpg.TooManyConnectionsError, "PG_UNAVAILABLE"),  # 53300
])
def test_errors_that_would_refuse_every_row_alike_defer_the_batch(
    error: type[Exception], code: str,
) -> None:
    translated = translate_pg(error("not now"))
    assert isinstance(translated, TransientError) and translated.code == code


def test_a_lost_connection_defers_the_batch() -> None:
    translated = translate_pg(ConnectionResetError("reset by peer"))
    assert isinstance(translated, TransientError) and translated.code == "PG_UNAVAILABLE"


@pytest.mark.parametrize("error", [
    asyncpg.InternalClientError("waiter is not done while handling critical protocol error"),
    asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    asyncpg.InterfaceError("connection is closed"),
    asyncpg.AdminShutdownError("terminating connection due to administrator command"),
])
def test_a_server_shutting_down_under_a_batch_defers_it(error: Exception) -> None:
    """What asyncpg raises while Postgres shuts down mid-batch is caught and deferred, never
    left to escape as an unexpected failure."""
    assert isinstance(error, PG_FAILURES)
    translated = translate_pg(error)
    assert isinstance(translated, TransientError) and translated.code == "PG_UNAVAILABLE"


@pytest.mark.parametrize("message", [
    'no partition of relation "ingestion_messages" found for row',
    'new row for relation "ingestion_messages_default" violates partition constraint',
])
def test_a_row_routed_while_partitions_changed_defers_the_batch(message: str) -> None:
    """Partition maintenance attached a range while the row was routed to DEFAULT (or
    detached the row's partition): the row is fine, routing it again places it."""
    translated = translate_pg(asyncpg.CheckViolationError(message))
    assert isinstance(translated, TransientError) and translated.code == "PG_ERROR"


@pytest.mark.parametrize(("fields", "named"), [
    ({"C": "23514", "M": 'new row for relation "device_telemetry_logs_p1" violates check '
      'constraint "c1"', "D": "Failing row contains (51.123456789, -0.987654321).",
      "n": "c1", "t": "device_telemetry_logs_p1"},
     "CheckViolationError (SQLSTATE 23514), constraint c1, table device_telemetry_logs_p1"),
    ({"C": "22P02", "M": 'invalid input syntax for type double precision: "51.123456789x"'},
     "InvalidTextRepresentationError (SQLSTATE 22P02)"),
    ({"C": "23505", "M": 'duplicate key value violates unique constraint "k"',
      "D": "Key (lat)=(51.123456789) already exists.", "n": "k", "c": "lat"},
     "UniqueViolationError (SQLSTATE 23505), constraint k, column lat"),
])
def test_a_refused_row_is_named_not_quoted(fields: dict[str, str], named: str) -> None:
    """Postgres's message and detail quote the refused value (the failing row, the key); the
    envelope's error message and dead letter say what Postgres names instead (spec 000 §15).
    The errors are built as asyncpg builds them from the server's fields."""
    error = asyncpg.PostgresError.new({"S": "ERROR", **fields})
    assert "51.123456789" in str(error)
    translated = translate_pg(error)
    assert isinstance(translated, PermanentError) and translated.code == PERSIST_REJECTED
    assert translated.message == f"Postgres refused the batch: {named}"
