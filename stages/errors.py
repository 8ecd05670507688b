"""The root of every error raised by pure stage code.

Each error carries a stable, machine-readable ``code`` (upper snake case) and says whether
retrying the same input could succeed. The runtime in ``streams/`` decides what to do from
the class and the code; it never parses messages.
"""

from __future__ import annotations


class StageError(Exception):
    """Base class for errors raised by ``stages``.

    ``code`` is stable across releases and safe to store and alert on; ``retriable`` tells
    the runtime whether the same input may succeed on another attempt (pure stages are
    deterministic, so this is almost always ``False``).
    """

    code: str = "STAGE_ERROR"
    retriable: bool = False

    def __init__(self, message: str, *, code: str | None = None, retriable: bool | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retriable is not None:
            self.retriable = retriable

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"
