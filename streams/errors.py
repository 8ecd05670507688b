"""The runtime's errors (``streams``), below the one root :class:`schemas.errors.TidewayError`.

Third-party exceptions (asyncpg, nats, redis, clickhouse-connect, pyarrow) are translated into
these where an adapter catches them, so callers decide on the class: a ``TransientError`` means
"try again later" (nak with delay / retry_wait), a ``PermanentError`` means "this input will
never succeed" (term / failed), and a ``UsageError`` is an operator mistake reported by the CLI.

``TidewayError`` is re-exported here because the runtime catches it at its edges (CLI, API,
job failures); it is the root of stage errors too, so code that must tell a stage's refusal
from a runtime failure checks ``StageError`` first.
"""

from __future__ import annotations

from schemas.errors import TidewayError

__all__ = [
    "ConfigError",
    "NotFoundError",
    "PermanentError",
    "TidewayError",
    "TransientError",
    "UsageError",
]


class UsageError(TidewayError):
    """The operator asked for something that cannot be done (bad file, unknown id...)."""

    code = "USAGE_ERROR"


class NotFoundError(UsageError):
    """A named thing (device, schema, run, message) does not exist for this tenant."""

    code = "NOT_FOUND"


class ConfigError(TidewayError):
    """The settings are invalid or a required service cannot be provided."""

    code = "CONFIG_ERROR"


class TransientError(TidewayError):
    """A dependency failed in a way that may succeed later (network, timeout, restart)."""

    code = "TRANSIENT"
    retriable = True


class PermanentError(TidewayError):
    """This input will never succeed; retrying is pointless."""

    code = "PERMANENT"
    retriable = False
