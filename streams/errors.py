"""The root of every error raised by the runtime (``streams``).

Third-party exceptions (asyncpg, nats, redis, clickhouse-connect, pyarrow) are translated into
these where an adapter catches them, so callers decide on the class: a ``TransientError`` means
"try again later" (nak with delay / retry_wait), a ``PermanentError`` means "this input will
never succeed" (term / failed), and a ``UsageError`` is an operator mistake reported by the CLI.
"""

from __future__ import annotations


class TidewayError(Exception):
    """Base class; ``code`` is a stable identifier safe to store and alert on."""

    code: str = "TIDEWAY_ERROR"

    def __init__(self, message: str, *, code: str | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


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


class PermanentError(TidewayError):
    """This input will never succeed; retrying is pointless."""

    code = "PERMANENT"
