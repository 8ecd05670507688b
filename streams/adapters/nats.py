"""NATS (nats-py): the one way Tideway connects, with one reconnect policy.

Every connection — the ingest consumer, session intake, uploads, the HTTP API, replay, the
dead-letter tools, ``simulate``, ``streams init`` and the demo — is made by
:func:`connect_nats`, so all of them behave alike when a server restarts: they reconnect for
ever, :data:`RECONNECT_WAIT` seconds apart, giving each attempt :data:`CONNECT_TIMEOUT`
seconds; a server that is down when the connection is first made is waited for the same way.
It is also where the ``nats`` settings group (credentials file, nkey seed, user/password, TLS)
and a cluster's list of servers are applied, so every connection authenticates alike.

nats-py's default error callback logs every failed reconnect attempt at ERROR with a
traceback; here the losses, failed attempts and recoveries go to an
:class:`~streams.adapters.outage.Outage` instead (one WARNING when the connection is lost, one
INFO when it is back). A connection that cannot be made at all is a ``TransientError``
``NATS_UNAVAILABLE``. Only :mod:`streams.ingest.fetch` reaches into nats-py's internals; this
module uses its public API. :data:`Nats`, :data:`Msg` and :data:`JetStreamContext` name
nats-py's types for the code that holds them; its exceptions are named in
:mod:`streams.adapters.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from pathlib import Path
from typing import Any, Final

from nats import errors as nats_errors
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from streams.adapters.errors import NATS_UNREACHABLE
from streams.adapters.outage import Outage, describe
from streams.config import NatsSettings, mask_url
from streams.errors import ConfigError, TransientError

__all__ = [
    "CONNECT_TIMEOUT", "ONE_SHOT_ATTEMPTS", "RECONNECT_WAIT", "JetStreamContext", "Msg", "Nats",
    "connect_nats", "ensure_stream", "security_options",
]

log = logging.getLogger(__name__)

RECONNECT_WAIT: Final = 0.5
"""Seconds between reconnect attempts to a server that is down."""
CONNECT_TIMEOUT: Final = 2
"""Seconds one connect attempt may take."""

class _QuietTlsEof(logging.Filter):
    """Drops asyncio's "returning true from eof_received() has no effect when using ssl".

    nats-py's transport protocol asks to keep a half-closed socket open, which TLS cannot do;
    asyncio logs that at WARNING each time a TLS connection ends (also when the server refuses
    it), which says nothing to an operator and would precede every refusal message."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "eof_received() has no effect when using ssl" not in record.getMessage()


_QUIET_TLS_EOF: Final = _QuietTlsEof()


ONE_SHOT_ATTEMPTS: Final = 10
"""Connect attempts of a command that does one thing and exits (``sessions upload``, ``streams
init``, ``simulate``): a person waiting at a terminal gets ``NATS_UNAVAILABLE`` after some
seconds instead of a command that hangs until the server comes back."""


def security_options(nats: NatsSettings) -> dict[str, Any]:
    """nats-py ``connect`` keywords for the ``nats`` settings group (empty when all unset).

    A TLS client context is built when any ``tls_*`` option is set: it verifies the server
    against ``tls_ca`` (the system's CAs without it) and presents ``tls_cert``/``tls_key`` to a
    server that verifies clients. A file that cannot be read is a ``ConfigError`` naming the
    setting, not a connection failure retried for ever.
    """
    options: dict[str, Any] = {}
    if nats.creds_file is not None:
        options["user_credentials"] = str(_readable(nats.creds_file, "nats.creds_file"))
    if nats.nkey_seed_file is not None:
        options["nkeys_seed"] = str(_readable(nats.nkey_seed_file, "nats.nkey_seed_file"))
    if nats.user is not None:
        options["user"] = nats.user
    if nats.password is not None:
        options["password"] = nats.password.get_secret_value()
    if (nats.tls_cert is None) != (nats.tls_key is None):
        raise ConfigError("nats.tls_cert and nats.tls_key must be set together",
                          code="NATS_TLS_CONFIG")
    if nats.tls_ca is not None or nats.tls_cert is not None:
        try:
            context = ssl.create_default_context(
                ssl.Purpose.SERVER_AUTH,
                cafile=str(nats.tls_ca) if nats.tls_ca is not None else None,
            )
            if nats.tls_cert is not None and nats.tls_key is not None:
                context.load_cert_chain(str(nats.tls_cert), str(nats.tls_key))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the NATS TLS files: {exc}",
                              code="NATS_TLS_CONFIG") from exc
        options["tls"] = context
        logging.getLogger("asyncio").addFilter(_QUIET_TLS_EOF)  # idempotent
    return options


def _readable(path: Path, setting: str) -> Path:
    # nats-py reads these lazily inside its connect loop, where a missing file would look
    # like an unreachable server and be retried for ever: check it once, up front.
    try:
        with open(path, "rb"):
            return path
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path}: {exc.strerror}",
                          code="NATS_AUTH_CONFIG") from exc


async def connect_nats(nats: NatsSettings, *, name: str, trusted_subjects: bool = False,
                       outage: Outage | None = None, attempts: int = -1,
                       inbox_prefix: str | None = None) -> Nats:
    """A NATS connection that keeps reconnecting (a restarted server is not fatal).

    ``nats`` is the settings group: the server URL(s) (``settings.nats()``, comma-separated
    for a cluster) and the security options (:func:`security_options`); pass
    ``settings.nats``. ``name`` identifies the process to the server (``tideway-ingest``,
    ``tideway-api``…).
    ``trusted_subjects`` skips the client's per-publish subject check: the consumer only
    publishes to reply subjects the server handed it and to subjects built from validated
    names, and the check is a measurable share of acknowledging thousands of envelopes/s.

    Disconnects, failed reconnect attempts and reconnects are reported to ``outage`` (one
    WARNING when the connection is lost, one INFO when it is back); any other error nats-py
    reports is logged as a WARNING, and only one it has no class for gets a traceback.
    ``attempts`` bounds the (re)connect attempts (-1: for ever, for long-running processes;
    :data:`ONE_SHOT_ATTEMPTS` for one-shot commands). ``inbox_prefix`` replaces ``_INBOX``
    for the replies this connection asks for (a device may read only its own inbox). A server
    that refuses the credentials
    or the TLS setup while the connection is first made is a ``ConfigError``
    (``NATS_AUTH_REFUSED``, ``NATS_TLS_REFUSED``) at once, not an endless retry.
    """
    servers = nats.servers()
    options = security_options(nats)
    if inbox_prefix:
        options["inbox_prefix"] = inbox_prefix
    tracker = outage or Outage("nats")
    nc = Nats()
    connecting = True
    last: list[BaseException] = []

    async def on_error(exc: Exception) -> None:
        last[:] = [exc]
        refusal = _refusal(exc) if connecting else None
        if refusal is not None:
            # Raised inside nats-py's connect loop, which ends it: retrying would only be
            # refused again, for ever in a long-running process.
            raise refusal from exc
        if isinstance(exc, NATS_UNREACHABLE):
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
            servers, name=name, max_reconnect_attempts=attempts,
            # nats-py annotates this as int seconds, but only ever sleeps for it.
            reconnect_time_wait=RECONNECT_WAIT,  # type: ignore[arg-type]
            connect_timeout=CONNECT_TIMEOUT, allow_reconnect=True,
            skip_subject_validation=trusted_subjects, error_cb=on_error,
            disconnected_cb=on_disconnect, reconnected_cb=on_reconnect, **options,
        )
    except ConfigError:
        await _discard(nc)
        raise
    except Exception as exc:  # nats raises several unrelated types for "cannot connect"
        tracker.failed(exc)
        await _discard(nc)
        cause = last[0] if last else exc
        hint = ""
        if "tls" in options and isinstance(cause, ConnectionResetError):
            # A server that verifies clients drops, right after the handshake, a connection
            # whose certificate it does not accept (TLS 1.3 tells the client no more).
            hint = ("; a server that verifies client certificates drops a connection whose "
                    "certificate it refuses: check nats.tls_cert / nats.tls_key")
        where = ",".join(mask_url(server) for server in servers)
        raise TransientError(f"cannot connect to NATS at {where}: {describe(cause)}{hint}",
                             code="NATS_UNAVAILABLE") from exc
    connecting = False
    tracker.recovered()
    return nc


async def _discard(nc: Nats) -> None:
    # After a failed TLS handshake nats-py's close() can wait for ever on the half-open
    # transport: give it the time of one connect attempt.
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.close(), CONNECT_TIMEOUT)


def _refusal(exc: BaseException) -> ConfigError | None:
    """The server said no to these credentials or this TLS setup: a misconfiguration that no
    retry fixes, named as one (``None`` for anything else)."""
    if isinstance(exc, nats_errors.AuthorizationError) or (
        isinstance(exc, nats_errors.Error) and "authorization violation" in str(exc).lower()
    ):
        return ConfigError("the NATS server refused the credentials (authorization violation)",
                           code="NATS_AUTH_REFUSED")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return ConfigError(f"the NATS server's TLS certificate was refused: {exc.verify_message}"
                           " (nats.tls_ca)",
                           code="NATS_TLS_REFUSED")
    reason = (exc.reason or "") if isinstance(exc, ssl.SSLError) else ""
    if "ALERT" in reason or "CERTIFICATE" in reason:
        # The server's alert about our certificate (CERTIFICATE_REQUIRED, UNKNOWN_CA,
        # BAD_CERTIFICATE…); a handshake cut short by a restarting server (SSLEOFError and
        # the like) carries no alert and stays an outage.
        return ConfigError(f"the NATS server refused the TLS handshake: {reason}"
                           " (nats.tls_cert, nats.tls_key)",
                           code="NATS_TLS_REFUSED")
    return None


async def ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    """Create the stream ``config`` names, or bring an existing one up to ``config``
    (idempotent: every process that provisions may run it; data stays in place)."""
    assert config.name is not None
    try:
        await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config)
        return
    await js.update_stream(config)
