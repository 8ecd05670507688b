"""The root of every error raised by pure stage code.

A :class:`StageError` is a :class:`schemas.errors.TidewayError` (the one root, which also
fixes how errors print): a stable, machine-readable ``code`` (listed in
:mod:`schemas.error_codes`) and whether retrying the same input could succeed. The runtime in
``streams/`` decides what to do from the class and the code; it never parses messages.
"""

from __future__ import annotations

from schemas.errors import TidewayError

__all__ = ["StageError"]


class StageError(TidewayError):
    """Base class for errors raised by ``stages``.

    ``code`` is stable across releases and safe to store and alert on; ``retriable`` tells
    the runtime whether the same input may succeed on another attempt (pure stages are
    deterministic, so this is almost always ``False``).
    """

    code = "STAGE_ERROR"
    retriable = False
