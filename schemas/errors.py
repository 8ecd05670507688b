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

What a message may hold. Messages are stored (stage logs, dead letters, job attempts) and
logged, so one built from input names the field or parameter, the position (line, column,
row, byte offset) and the kind of problem, never the value: any value may be a coordinate
(spec 000 §15). An exception nobody expected is stored as :func:`unexpected` describes it, by
class and place, since its own text may quote the data that caused it.
"""

from __future__ import annotations

__all__ = ["TidewayError", "stack", "unexpected"]


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


def unexpected(exc: BaseException) -> str:
    """An unexpected exception as a message safe to store: its class and where it was raised
    (module, line and function of the innermost frame), never its text.

    A library's exception text may quote the value it choked on (pyarrow quotes the cell,
    Python 3.14's ``math`` the argument), so a bug met on hostile input would otherwise copy
    a coordinate into a stage log or a job attempt. The place is enough to find the bug:
    ``"KeyError at stages.batch.formats.gpx:120 (_point)"``; when the innermost frame is a
    library's, the innermost frame of Tideway's own code follows it (``"..., from ..."``).
    """
    frames = _frames(exc)
    name = type(exc).__name__
    if not frames:
        return name
    where = "{}:{} ({})".format(*frames[-1])
    ours = [f for f in frames if f[0].partition(".")[0] in _HOUSE]
    if ours and ours[-1] != frames[-1]:
        where += ", from {}:{} ({})".format(*ours[-1])
    return f"{name} at {where}"


def stack(exc: BaseException) -> str:
    """An exception's stack trace safe to store: its class, then every frame it passed through
    (module, line and function, outermost first), never its text nor a source line's values.

    For a dead letter's ``stack_trace`` (spec 003): as with :func:`unexpected`, the text of an
    exception may quote the input it choked on, so only the places are kept::

        KeyError
          streams.sessions.intake:312 (_attempt)
          streams.sessions.run_creation:88 (create_run)
    """
    lines = [type(exc).__name__]
    lines.extend("  {}:{} ({})".format(*frame) for frame in _frames(exc))
    return "\n".join(lines)


def _frames(exc: BaseException) -> list[tuple[str, int, str]]:
    """(module, line, function) of each frame of ``exc``'s traceback, outermost first."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append((str(tb.tb_frame.f_globals.get("__name__", "?")), tb.tb_lineno,
                       code.co_name))
        tb = tb.tb_next
    return frames


_HOUSE = frozenset({"schemas", "stages", "streams"})
