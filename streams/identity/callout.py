"""``tideway auth``: the auth-callout service that tells nats-server who a connection is.

nats-server sends every connection that is not one of Tideway's own users (those are static
nkey users in its configuration, :mod:`streams.identity.broker`) to ``$SYS.REQ.USER.AUTH`` in
the ``AUTH`` account. This service answers each request:

* a device — user ``<tenant>.<device>``, password a credential the registry issued and has not
  retired, the device active — gets a user JWT signed by the issuer key, placing it in the
  ``TIDEWAY`` account with :func:`~streams.identity.permissions.device_permissions`: its own
  subjects and nothing else. The same for an MQTT client (user name and password);
* anything else is refused (nats-server closes the connection with "Authorization
  Violation"); with ``nats.open_broker`` set, a connection with no credentials at all is let in
  with the old, open device permissions, and counted.

Revocation has to reach connections that are already open, which nats-server never re-checks.
The registry's triggers announce every change that takes a device's access away on Postgres
channel ``tideway_device_access``; the service listens, finds that device's connections on
every server (``$SYS.REQ.SERVER.PING.CONNZ`` filtered by user) and closes them
(``$SYS.REQ.SERVER.<id>.KICK``) — the reconnect then meets the registry's new answer. It does
that again a moment later (a connection authorised just before the change may register after
the first look), and a sweep every ``auth.sweep_interval_s`` closes any device connection
whose device no longer has a valid credential, for announcements missed while the service
was down.

Several replicas share the requests (a queue group); each listens and sweeps on its own
(closing a connection twice is harmless).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from streams.adapters import postgres
from streams.adapters.errors import NATS_UNREACHABLE, PgError
from streams.adapters.nats import Nats, connect_nats
from streams.adapters.postgres import Pool
from streams.config import Settings
from streams.errors import ConfigError, TransientError
from streams.identity import credentials, tokens
from streams.identity.broker import TIDEWAY_ACCOUNT
from streams.identity.permissions import device_permissions
from streams.names import Names
from streams.observability.events import AuthObserver, ProcessHooks
from streams.observability.readiness import Check, postgres_check

__all__ = ["ANONYMOUS", "AUTH_SUBJECT", "AuthService", "Connection", "run_auth"]

log = logging.getLogger(__name__)

AUTH_SUBJECT: Final = "$SYS.REQ.USER.AUTH"
QUEUE: Final = "tideway-auth"
ANONYMOUS: Final = "anonymous"
"""The user name the open broker gives a connection that came without credentials."""
GATHER_S: Final = 0.3
"""How long replies of every server to one ``PING.CONNZ`` are collected."""
RECHECK_S: Final = 1.0
"""When an announced device's connections are looked for a second time."""
PAGE: Final = 1024
FEW_USERS: Final = 8
"""Up to this many announced devices are looked up one by one, more with one listing."""
KICKS_AT_ONCE: Final = 32
CONN_ALL: Final = 2
"""``CONNZ``'s state filter for open and recently closed connections (nats-server's
``ConnState``, a number on the wire)."""


@dataclass(frozen=True, slots=True)
class Connection:
    """One client connection as ``CONNZ`` lists it."""

    server_id: str
    cid: int
    user: str
    in_msgs: int
    open: bool


class _NullObserver:
    def on_request(self, *, result: str, reason: str, seconds: float) -> None:
        pass

    def on_disconnect(self, *, why: str, connections: int) -> None:
        pass

    def on_unauthenticated(self, *, messages: int) -> None:
        pass


def _open_permissions(names: Names) -> dict[str, Any]:
    """What a device could do before credentials (``nats.open_broker`` only): publish any
    device's envelopes and uploads, read replies on the usual inboxes."""
    bucket = names.session_bucket
    return {
        "pub": {"allow": [names.subject("telemetry.>"), names.subject("sessions.>"),
                          f"$O.{bucket}.C.>", f"$O.{bucket}.M.>", "$JS.API.INFO",
                          f"$JS.API.STREAM.INFO.OBJ_{bucket}",
                          f"$JS.API.STREAM.MSG.GET.OBJ_{bucket}",
                          f"$JS.API.DIRECT.GET.OBJ_{bucket}.>"],
                "deny": ["$SYS.>"]},
        "sub": {"allow": ["_INBOX.>"], "deny": ["$SYS.>"]},
    }


LOOKUPS_AT_ONCE: Final = 4
"""Credential queries one service runs at once (of its pool's 8 connections); the requests
that arrive meanwhile wait together for the next query."""


class _Lookups:
    """The credential checks of the requests being answered, coalesced: while
    :data:`LOOKUPS_AT_ONCE` queries run, the requests that arrive wait together for the next
    one, so a thousand devices connecting at once cost Postgres a few dozen round trips
    rather than a thousand (and the pool a few dozen acquire/reset cycles). A lone request
    still gets its own query at once."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.running = 0
        self.waiting: list[tuple[str, str, asyncio.Future[credentials.Verdict]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def verify(self, user: str, secret: str) -> credentials.Verdict:
        future: asyncio.Future[credentials.Verdict] = asyncio.get_running_loop().create_future()
        self.waiting.append((user, secret, future))
        if self.running < LOOKUPS_AT_ONCE:
            self.running += 1
            task = asyncio.create_task(self._run())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await future

    async def _run(self) -> None:
        try:
            while self.waiting:
                batch, self.waiting = self.waiting, []
                try:
                    async with self.pool.acquire() as conn:
                        verdicts = await credentials.verify_many(
                            conn, [(user, secret) for user, secret, _ in batch])
                except Exception as exc:  # each waiting request decides what it means
                    for *_, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (*_, future), verdict in zip(batch, verdicts, strict=True):
                    if not future.done():
                        future.set_result(verdict)
        finally:
            self.running -= 1


class AuthService:
    """Answers authorization requests and closes connections that lost their right."""

    def __init__(self, settings: Settings, *, pool: Pool, nc: Nats, control: Nats,
                 issuer: bytes, observer: AuthObserver | None = None) -> None:
        self.settings = settings
        self.names = Names(namespace=settings.namespace)
        self.pool = pool
        self.nc = nc
        self.control = control
        self.signer = tokens.keypair(issuer)
        self.observer: AuthObserver = observer or _NullObserver()
        self.open_broker = settings.nats.open_broker
        self._lookups = _Lookups(pool)
        self._slots = asyncio.Semaphore(settings.auth.concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._seen: dict[tuple[str, int], int] = {}
        """In-message counts of the open broker's anonymous connections, last read."""

    # -- answering ------------------------------------------------------------------------
    async def on_request(self, msg: Any) -> None:
        """The subscription's callback: answer each request in a task of its own, at most
        ``auth.concurrency`` at once (the subscription waits when all are busy)."""
        arrived = time.perf_counter()
        await self._slots.acquire()
        task = asyncio.create_task(self._answer(msg, arrived))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()

    async def _answer(self, msg: Any, started: float) -> None:
        try:
            request = tokens.AuthorizationRequest.parse(msg.data)
        except tokens.TokenError as exc:
            log.warning("auth: unreadable authorization request: %s", exc)
            self.observer.on_request(result="refused", reason="bad_request",
                                     seconds=time.perf_counter() - started)
            return  # nothing to sign an answer for: nats-server times the connection out
        user_jwt, reason = await self.decide(request)
        answer = tokens.authorization_response(
            self.signer, user_nkey=request.user_nkey, server_id=request.server_id,
            jwt=user_jwt or "", error="" if user_jwt else "not authorized")
        with contextlib.suppress(*NATS_UNREACHABLE):
            await msg.respond(answer)
        result = "granted" if user_jwt else "refused"
        self.observer.on_request(result=result, reason=reason,
                                 seconds=time.perf_counter() - started)
        if not user_jwt:
            # The user name is the device's public name; the password never reaches a log.
            log.info("auth: refused %s connection of %r from %s: %s", request.client_type or
                     "nats", request.username, request.client_host, reason)

    async def decide(self, request: tokens.AuthorizationRequest) -> tuple[str | None, str]:
        """The user JWT for ``request`` (``None``: refuse), and the reason for the metric."""
        if not request.username and not request.password:
            if self.open_broker:
                return self._jwt(request, ANONYMOUS, _open_permissions(self.names)), "anonymous"
            return None, "no_credentials"
        try:
            verdict = await self._lookups.verify(request.username, request.password)
        except (TimeoutError, TransientError, OSError, PgError) as exc:
            log.warning("auth: cannot check a credential now: %s", type(exc).__name__)
            return None, "unavailable"
        if not verdict.ok:
            return None, verdict.refusal or "refused"
        assert verdict.tenant is not None and verdict.device is not None
        permissions = device_permissions(verdict.tenant, verdict.device, self.names)
        return self._jwt(request, request.username, permissions), "device"

    def _jwt(self, request: tokens.AuthorizationRequest, name: str,
             permissions: dict[str, Any]) -> str:
        return tokens.user_jwt(self.signer, user_nkey=request.user_nkey, name=name,
                               account=TIDEWAY_ACCOUNT, permissions=permissions, tags=[])

    async def drain(self) -> None:
        """Wait for the requests being answered."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=5)

    # -- connections ----------------------------------------------------------------------
    async def connections(self, *, user: str | None = None, closed: bool = False
                          ) -> list[Connection]:
        """The ``TIDEWAY`` account's client connections on every server (``user``: only that
        user's; ``closed``: the recently closed ones too)."""
        found: list[Connection] = []
        offset = 0
        while True:
            options: dict[str, Any] = {"acc": TIDEWAY_ACCOUNT, "auth": True,
                                       "limit": PAGE, "offset": offset}
            if user is not None:
                options["user"] = user
            if closed:
                options["state"] = CONN_ALL
            replies = await self._gather("$SYS.REQ.SERVER.PING.CONNZ", options)
            more = False
            for reply in replies:
                if reply.get("error"):
                    raise TransientError(f"CONNZ refused: {reply['error']}",
                                         code="NATS_CONNZ")
                server = reply.get("server", {}).get("id", "")
                data = reply.get("data") or {}
                conns = data.get("connections") or []
                more = more or len(conns) == PAGE
                for c in conns:
                    found.append(Connection(
                        server_id=server, cid=int(c.get("cid", 0)),
                        user=str(c.get("authorized_user") or ""),
                        in_msgs=int(c.get("in_msgs") or 0), open=not c.get("stop")))
            if not more:
                return found
            offset += PAGE

    async def _gather(self, subject: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Every server's reply to one system request, collected for :data:`GATHER_S`."""
        inbox = self.control.new_inbox()
        replies: list[dict[str, Any]] = []

        async def collect(msg: Any) -> None:
            with contextlib.suppress(orjson.JSONDecodeError):
                replies.append(orjson.loads(msg.data))

        sub = await self.control.subscribe(inbox, cb=collect)
        try:
            await self.control.publish(subject, orjson.dumps(body), reply=inbox)
            await self.control.flush()
            await asyncio.sleep(GATHER_S)
        finally:
            await sub.unsubscribe()
        return replies

    async def kick(self, connections: Iterable[Connection]) -> int:
        """Close ``connections`` (a few at a time); how many the servers closed."""
        slots = asyncio.Semaphore(KICKS_AT_ONCE)

        async def one(c: Connection) -> bool:
            async with slots:
                try:
                    reply = await self.control.request(
                        f"$SYS.REQ.SERVER.{c.server_id}.KICK", orjson.dumps({"cid": c.cid}),
                        timeout=2)
                except (*NATS_UNREACHABLE, TimeoutError) as exc:
                    refused = f"no answer ({type(exc).__name__})"
                else:
                    if b'"error"' not in reply.data:
                        return True
                    refused = reply.data.decode(errors="replace")[:200]
            # A connection that should be closed and is not: say so (the sweep tries again).
            log.warning("auth: could not disconnect connection %d on %s: %s", c.cid,
                        c.server_id, refused)
            return False

        return sum(await asyncio.gather(*(one(c) for c in connections)))

    async def disconnect(self, users: Iterable[str], *, why: str) -> int:
        """Close every open connection of the device users ``users``.

        All of them: an announcement names the device, not which of its credentials ended, so
        a connection made with a credential that is still valid is closed too and reconnects
        at once. A few users are looked up one by one (``CONNZ`` filtered by user, on every
        server at once); many, with one listing of the account."""
        wanted = set(users)
        if len(wanted) <= FEW_USERS:
            found = [c for listing in await asyncio.gather(
                *(self.connections(user=u) for u in wanted)) for c in listing]
        else:
            found = await self.connections()
        closed = await self.kick(c for c in found if c.open and c.user in wanted)
        if closed:
            self.observer.on_disconnect(why=why, connections=closed)
            log.info("auth: disconnected %d connection(s) of %d device(s) (%s)", closed,
                     len(wanted), why)
        return closed

    async def sweep(self) -> int:
        """Close device connections whose device has no valid credential any more — and,
        once the open broker is closed again, those it let in without credentials; count the
        open broker's unauthenticated messages."""
        every = await self.connections(closed=self.open_broker)
        if self.open_broker:
            self._count_unauthenticated(every)
        devices = {c.user for c in every if c.open and credentials.parse_username(c.user)}
        valid: set[str] = set()
        if devices:
            async with self.pool.acquire() as conn:
                valid = await credentials.valid_devices(conn, sorted(devices))
        gone = [c for c in every if c.open and (
            c.user in devices - valid or (c.user == ANONYMOUS and not self.open_broker))]
        closed = await self.kick(gone)
        if closed:
            self.observer.on_disconnect(why="sweep", connections=closed)
            log.info("auth: the sweep disconnected %d connection(s)", closed)
        return closed

    def _count_unauthenticated(self, every: list[Connection]) -> None:
        seen: dict[tuple[str, int], int] = {}
        new = 0
        for c in every:
            if c.user != ANONYMOUS:
                continue
            key = (c.server_id, c.cid)
            seen[key] = c.in_msgs
            new += max(0, c.in_msgs - self._seen.get(key, 0))
        self._seen = seen
        if new:
            self.observer.on_unauthenticated(messages=new)


async def _listen(service: AuthService, dsn: str, stop: asyncio.Event) -> None:
    """Disconnect each device the registry announces, now and again :data:`RECHECK_S` later;
    reconnect the listening connection after an outage (the sweep covers the gap)."""
    pending: asyncio.Queue[str] = asyncio.Queue()

    def on_notify(_conn: Any, _pid: int, _channel: str, payload: object) -> None:
        pending.put_nowait(str(payload))

    async def worker() -> None:
        while True:
            user = await pending.get()
            batch = {user}
            while not pending.empty():
                batch.add(pending.get_nowait())
            try:
                await service.disconnect(batch, why="notified")
                await asyncio.sleep(RECHECK_S)
                await service.disconnect(batch, why="notified")
            except (*NATS_UNREACHABLE, TimeoutError) as exc:
                log.warning("auth: cannot disconnect %s now: %r", sorted(batch), exc)

    runner = asyncio.create_task(worker())
    try:
        while not stop.is_set():
            try:
                conn = await postgres.connect(dsn)
            except TransientError:
                await _wait(stop, 1.0)
                continue
            try:
                await conn.add_listener(credentials.ACCESS_CHANNEL, on_notify)
                while not stop.is_set() and not conn.is_closed():
                    await _wait(stop, 1.0)
            finally:
                with contextlib.suppress(Exception):
                    await conn.close()
    finally:
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner


async def _sweeps(service: AuthService, interval: float, stop: asyncio.Event) -> None:
    while not await _wait(stop, interval):
        try:
            await service.sweep()
        except (*NATS_UNREACHABLE, TimeoutError, TransientError, OSError,
                PgError) as exc:
            log.warning("auth: sweep skipped: %r", exc)


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` or until ``stop``; whether ``stop`` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


def _read_seed(path: Any, setting: str) -> bytes:
    if path is None:
        raise ConfigError(f"the auth service needs {setting} (docs/security.md)",
                          code="NATS_AUTH_CONFIG")
    try:
        with open(path, "rb") as f:
            return f.read().strip()
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path}: {exc.strerror}",
                          code="NATS_AUTH_CONFIG") from exc


async def run_auth(settings: Settings, *, stop: asyncio.Event,
                   hooks: ProcessHooks | None = None) -> None:
    """Serve authorization requests until ``stop`` is set."""
    issuer = _read_seed(settings.auth.issuer_seed_file, "auth.issuer_seed_file")
    # Read now to fail early with the setting's name (nats-py reads the file itself later).
    _read_seed(settings.auth.control_seed_file, "auth.control_seed_file")
    pool = await postgres.create_pool(settings.postgres(), postgres.streaming_pool(8))
    nc = control = None
    try:
        nc = await connect_nats(settings.nats, name="tideway-auth")
        control_settings = settings.nats.model_copy(
            update={"nkey_seed_file": settings.auth.control_seed_file, "creds_file": None,
                    "user": None, "password": None})
        control = await connect_nats(control_settings, name="tideway-auth-control")
        service = AuthService(settings, pool=pool, nc=nc, control=control, issuer=issuer,
                              observer=hooks.auth if hooks is not None else None)
        sub = await nc.subscribe(AUTH_SUBJECT, queue=QUEUE, cb=service.on_request)
        await nc.flush()
        if hooks is not None:
            hooks.ready("auth", postgres_check(pool), _connected("nats", nc),
                        _connected("nats_control", control))
        log.info("auth: answering authorization requests%s",
                 " (open broker: devices without credentials are let in)"
                 if settings.nats.open_broker else "")
        listener = asyncio.create_task(_listen(service, settings.postgres(), stop))
        sweeper = asyncio.create_task(_sweeps(service, settings.auth.sweep_interval_s, stop))
        try:
            await stop.wait()
        finally:
            with contextlib.suppress(*NATS_UNREACHABLE):
                await sub.unsubscribe()
            await service.drain()
            for task in (listener, sweeper):
                task.cancel()
            await asyncio.gather(listener, sweeper, return_exceptions=True)
    finally:
        if hooks is not None:
            await hooks.stopping("auth")
        for client in (nc, control):
            if client is not None:
                with contextlib.suppress(*NATS_UNREACHABLE):
                    await client.close()
        await pool.close()


def _connected(name: str, nc: Nats) -> Check:
    async def probe() -> None:
        if not nc.is_connected:
            raise ConnectionError("not connected to NATS")

    return Check(name=name, probe=probe)
