"""The one root of every error Tideway raises (httpx's ``_exceptions.py`` is the model).

Every package hangs its own errors below :class:`TidewayError`: ``stages.errors.StageError``
for pure stage code, ``streams.errors`` for the runtime (``UsageError``, ``NotFoundError``,
``ConfigError``, ``TransientError``, ``PermanentError``), and ``schemas.device_schema``'s
``SchemaFileError`` here at the bottom of the house. ``schemas`` imports neither ``stages`` nor
``streams``, so the root lives here where all of them can reach it.

Each error carries a stable, machine-readable ``code`` (upper snake case, listed with its
meaning in :mod:`schemas.error_codes`) and says whether retrying could succeed
(``retriable``). Callers decide from the class and the code, never from the message.

One way of printing: ``str(exc)`` is the message alone (what an API body or a stage log stores
next to its own ``code`` column, so the code is not repeated inside the text), and
:meth:`TidewayError.describe` is the one line for people - the CLI and logs - which adds the
code: ``"device 'ws-9' not found (NOT_FOUND)"``.
"""

from __future__ import annotations

__all__ = ["TidewayError"]


class TidewayError(Exception):
    """Root of every Tideway error: a message, a stable ``code`` and a ``retriable`` flag.

    Subclasses set ``code`` and ``retriable`` as class attributes; an instance may override
    either (``UsageError("...", code="DEVICE_EXISTS")``).
    """

    code: str = "TIDEWAY_ERROR"
    retriable: bool = False

    def __init__(
        self, message: str, *, code: str | None = None, retriable: bool | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retriable is not None:
            self.retriable = retriable

    def __str__(self) -> str:
        return self.message

    def describe(self) -> str:
        """The error in one line for people (CLI, logs): the message, then the code."""
        return f"{self.message} ({self.code})"
