"""NATS (nats-py): the one way Tideway connects, with one reconnect policy.

Every connection — the ingest consumer, session intake, uploads, the HTTP API, replay, the
dead-letter tools, ``simulate``, ``streams init`` and the demo — is made by
:func:`connect_nats`, so all of them behave alike when a server restarts: they reconnect for
ever, :data:`RECONNECT_WAIT` seconds apart, giving each attempt :data:`CONNECT_TIMEOUT`
seconds; a server that is down when the connection is first made is waited for the same way.

nats-py's default error callback logs every failed reconnect attempt at ERROR with a
traceback; here the losses, failed attempts and recoveries go to an
:class:`~streams.adapters.outage.Outage` instead (one WARNING when the connection is lost, one
INFO when it is back). A connection that cannot be made at all is a ``TransientError``
``NATS_UNAVAILABLE``. Only :mod:`streams.ingest.fetch` reaches into nats-py's internals; this
module uses its public API.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from nats import errors as nats_errors
from nats.aio.client import Client as Nats

from streams.adapters.outage import Outage, describe
from streams.errors import TransientError

__all__ = [
    "CONNECTION_ERRORS", "CONNECT_TIMEOUT", "ONE_SHOT_ATTEMPTS", "RECONNECT_WAIT", "Nats",
    "connect_nats",
]

log = logging.getLogger(__name__)

RECONNECT_WAIT: Final = 0.5
"""Seconds between reconnect attempts to a server that is down."""
CONNECT_TIMEOUT: Final = 2
"""Seconds one connect attempt may take."""

CONNECTION_ERRORS: Final = (
    OSError, asyncio.TimeoutError, nats_errors.StaleConnectionError,
    nats_errors.ConnectionClosedError, nats_errors.NoServersError,
    nats_errors.OutboundBufferLimitError, nats_errors.ProtocolError,
    nats_errors.ConnectionReconnectingError,
)
"""What nats-py reports while a server is unreachable, restarting or dropping the connection:
expected during any outage, so they mark the outage instead of logging a traceback each."""


ONE_SHOT_ATTEMPTS: Final = 10
"""Connect attempts of a command that does one thing and exits (``sessions upload``, ``streams
init``, ``simulate``): a person waiting at a terminal gets ``NATS_UNAVAILABLE`` after some
seconds instead of a command that hangs until the server comes back."""


async def connect_nats(url: str, *, name: str, trusted_subjects: bool = False,
                       outage: Outage | None = None, attempts: int = -1) -> Nats:
    """A NATS connection that keeps reconnecting (a restarted server is not fatal).

    ``name`` identifies the process to the server (``tideway-ingest``, ``tideway-api``…).
    ``trusted_subjects`` skips the client's per-publish subject check: the consumer only
    publishes to reply subjects the server handed it and to subjects built from validated
    names, and the check is a measurable share of acknowledging thousands of envelopes/s.

    Disconnects, failed reconnect attempts and reconnects are reported to ``outage`` (one
    WARNING when the connection is lost, one INFO when it is back); any other error nats-py
    reports is logged as a WARNING, and only one it has no class for gets a traceback.
    ``attempts`` bounds the (re)connect attempts (-1: for ever, for long-running processes;
    :data:`ONE_SHOT_ATTEMPTS` for one-shot commands).
    """
    tracker = outage or Outage("nats")
    nc = Nats()

    async def on_error(exc: Exception) -> None:
        if isinstance(exc, CONNECTION_ERRORS):
            if not nc.is_closed:  # closing on purpose: what the socket says then is no outage
                tracker.failed(exc)
        elif isinstance(exc, nats_errors.Error):  # one nats-py names: say it, no traceback
            log.warning("nats: %s", describe(exc))
        else:
            log.error("nats: unexpected error", exc_info=exc)

    async def on_disconnect() -> None:
        if not nc.is_closed:  # close() reports a disconnect too
            tracker.failed("connection lost")

    async def on_reconnect() -> None:
        tracker.recovered()

    try:
        await nc.connect(
            url, name=name, max_reconnect_attempts=attempts,
            # nats-py annotates this as int seconds, but only ever sleeps for it.
            reconnect_time_wait=RECONNECT_WAIT,  # type: ignore[arg-type]
            connect_timeout=CONNECT_TIMEOUT, allow_reconnect=True,
            skip_subject_validation=trusted_subjects, error_cb=on_error,
            disconnected_cb=on_disconnect, reconnected_cb=on_reconnect,
        )
    except Exception as exc:  # nats raises several unrelated types for "cannot connect"
        tracker.failed(exc)
        raise TransientError(f"cannot connect to NATS: {exc}", code="NATS_UNAVAILABLE") from exc
    tracker.recovered()
    return nc
