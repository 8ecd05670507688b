"""Handing a whole-session file to Tideway: store the artifacts, then publish a notice.

The CLI (``tideway sessions upload``) and the HTTP API both end here (:class:`StagedUpload`):
each file is streamed to a temporary key, hashed while it is written; only when the whole
request has been validated are the files promoted to their content address in the object
store (``artifacts/<tenant>/<aa>/<sha256>``), then one
:class:`~streams.sessions.notice.SessionNotice` is published on
``sessions.<tenant>.<device>`` with the artifact-set hash as its ``Nats-Msg-Id`` (JetStream
drops a duplicate publish inside its window; intake is idempotent beyond it). The receipt
carries the session id, derived from the artifacts (see ``notice``), and the artifact-set
hash that intake uses as the run's idempotency key, so a caller can find and wait for the run.

A refused upload stores nothing: validation fails before promotion - so does the tenant's
daily quota, which :meth:`StagedUpload.publish` reserves first (:mod:`streams.sessions.quotas`;
``QUOTA_EXCEEDED``) - and the temporary files are dropped. When the notice cannot be
published after promotion - NATS not connected: nothing was handed over - the reservation is
given back and the files this upload put there are removed again (a notice that was handed
over but not acknowledged may still arrive: its files stay, :class:`NoticeInDoubt`, and the
client's retry of the same upload meets the stored notice) - unless content addressing shares
one with someone else: an object
that was already there, one an ``artifacts`` row (an accepted session) refers to, or one another
upload in this process is still handling. (An identical upload in another process that has
published but not yet been recorded by intake is not seen; its notice would then be
dead-lettered as ``OBJECT_MISSING`` - never a recorded session without its file.)

Devices take a third path without the object store: they put the file into the JetStream
object-store bucket and publish a notice naming it (:func:`device_upload` does exactly that,
for tests and device simulators).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import logging
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from streams.adapters import postgres
from streams.adapters.errors import PG_CLOSED, NatsError, NatsTimeout
from streams.adapters.nats import ONE_SHOT_ATTEMPTS, Nats, connect_nats
from streams.adapters.outage import describe
from streams.config import QuotaSettings, Settings
from streams.errors import TransientError, UsageError
from streams.identity.devices import connect_device
from streams.identity.ids import check_device, check_tenant
from streams.names import Names
from streams.objects import ObjectStore, ObjectWriter, StoredObject, artifact_key
from streams.observability import tracing
from streams.sessions import priorities, quotas
from streams.sessions.notice import (
    NoticeArtifact,
    SessionNotice,
    artifact_set_hash,
    check_file_name,
    session_id_for,
)

__all__ = [
    "NoticeInDoubt",
    "StagedUpload",
    "UploadReceipt",
    "device_upload",
    "publish_notice",
    "store_file",
    "upload_files",
]

log = logging.getLogger(__name__)

_CHUNK = 1 << 20

# Which artifacts of an accepted session share content with the given ones (by tenant name, so
# the CLI, which knows no tenant id, can ask too).
_REFERENCED = """
SELECT a.sha256 FROM artifacts a JOIN tenants t ON t.id = a.tenant_id
WHERE t.name = $1 AND a.sha256 = ANY($2::text[])
"""

# Artifact keys that uploads in this process have promoted and not yet finished with (a count
# per key: two identical uploads share one object).
_IN_FLIGHT: collections.Counter[str] = collections.Counter()

Connect = Callable[[], AbstractAsyncContextManager[Any]]



class StagedUpload:
    """One upload's files: staged while the request is read, stored only once it is accepted.

    ``add`` streams a file to a temporary key; ``artifacts`` describes the staged files so the
    caller can validate the whole upload and build its notice; ``publish`` promotes them to
    their content address and publishes the notice. Leaving the ``async with``
    block any other way drops the staged files and removes the promoted ones nobody else
    shares (see the module docstring). ``connect`` opens a Postgres connection for that check
    and for the quota reservation; ``limits`` are the ``quotas`` settings.
    """

    def __init__(self, store: ObjectStore, tenant: str, *, max_bytes: int, connect: Connect,
                 limits: QuotaSettings):
        self._store = store
        self._tenant = tenant
        self._max = max_bytes
        self._connect = connect
        self._limits = limits
        self._staged: list[tuple[str, ObjectWriter]] = []
        self._stored: list[StoredObject] = []
        self._registered: list[str] = []
        self._published = False

    async def __aenter__(self) -> StagedUpload:
        return self

    async def add(self, name: str, chunks: AsyncIterable[bytes]) -> None:
        """Stage one file called ``name`` (checked before a byte is written)."""
        check_file_name(name)
        writer = await asyncio.to_thread(self._store.writer, max_bytes=self._max)
        self._staged.append((name, writer))
        async for chunk in chunks:
            await asyncio.to_thread(writer.write, chunk)
        if writer.size == 0:
            raise UsageError(f"{name} is empty")

    @property
    def artifacts(self) -> tuple[NoticeArtifact, ...]:
        """The staged files as the notice names them."""
        return tuple(NoticeArtifact(name=n, sha256=w.sha256, size=w.size) for n, w in self._staged)

    async def publish(
        self,
        nc: Nats,
        receipt: UploadReceipt,
        notice: SessionNotice,
        *,
        traceparent: str | None,
    ) -> None:
        """Reserve the files against the tenant's daily quotas (``QUOTA_EXCEEDED``: nothing
        is stored), promote them, then publish ``notice``: the files belong to intake now.

        The notice's ``Nats-Msg-Id`` is the tenant and artifact-set hash, so JetStream drops a
        second publish of the same upload inside its duplicate window.
        """
        if not self._staged:
            raise UsageError("no file in the upload")
        reservation = await self._reserve()
        try:
            await self._commit()
            await publish_notice(
                nc,
                receipt.subject,
                notice,
                msg_id=f"{self._tenant}:{receipt.artifact_set_hash}",
                traceparent=traceparent,
            )
        except NoticeInDoubt:
            # The notice may still be stored: the files and the reservation stay with it
            # (an upload either becomes a run or is refused with nothing stored).
            self._published = True
            raise
        except BaseException:
            if reservation is not None:
                try:
                    async with self._connect() as conn:
                        await quotas.release(conn, reservation)
                except Exception:  # the upload's own error is the one to report
                    log.exception("could not give back a quota reservation")
            raise
        self._published = True

    async def _reserve(self) -> quotas.Reservation | None:
        """The quota reservation, or ``None`` while Postgres is unavailable: an upload made
        during an outage is accepted uncounted - its notice waits on the stream for intake
        (no upload is lost in an outage), and the quotas are checked again once it is back."""
        try:
            async with self._connect() as conn:
                return await quotas.reserve(
                    conn, tenant=self._tenant, artifacts=len(self._staged),
                    size=sum(w.size for _, w in self._staged), limits=self._limits,
                )
        except (TransientError, TimeoutError, *PG_CLOSED) as exc:  # Postgres cannot answer now
            log.warning("daily quotas not checked, Postgres is unavailable: %s", describe(exc))
            return None

    async def _commit(self) -> None:
        """Promote every staged file to its content address."""
        if not self._staged:
            raise UsageError("no file in the upload")
        keys = dict.fromkeys(artifact_key(self._tenant, w.sha256) for _, w in self._staged)
        for key in keys:  # before promoting: from now on the objects may be ours
            _IN_FLIGHT[key] += 1
            self._registered.append(key)
        while self._staged:
            _, writer = self._staged[0]
            stored = await asyncio.to_thread(
                writer.commit, artifact_key(self._tenant, writer.sha256)
            )
            self._staged.pop(0)
            self._stored.append(stored)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            for _, writer in self._staged:
                await asyncio.to_thread(writer.abort)
            self._staged.clear()
            if not self._published:
                await self._remove_unshared()
        except Exception:  # the caller's own error is the one to report; this is housekeeping
            log.exception("could not clean up after a refused upload")
        finally:
            for key in self._registered:
                _IN_FLIGHT[key] -= 1
                if _IN_FLIGHT[key] <= 0:
                    del _IN_FLIGHT[key]
            self._registered.clear()

    async def _remove_unshared(self) -> None:
        mine = [s for s in self._stored if s.created and _IN_FLIGHT[s.key] == 1]
        if not mine:
            return
        try:
            async with self._connect() as conn:
                rows = await conn.fetch(_REFERENCED, self._tenant, [s.sha256 for s in mine])
        except Exception as exc:  # cannot tell whether it is shared: keeping it is safe
            log.warning("keeping %d stored upload file(s): %s", len(mine), exc)
            return
        referenced = {r["sha256"] for r in rows}
        for s in mine:
            if s.sha256 not in referenced:
                await asyncio.to_thread(self._store.discard_artifact, s.key)


@contextlib.asynccontextmanager
async def _postgres(settings: Settings) -> AsyncIterator[Any]:
    conn = await postgres.connect(settings.postgres(), limits=settings.postgres_timeouts)
    try:
        yield conn
    finally:
        await conn.close()


async def _file_chunks(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as f:
        while block := await asyncio.to_thread(f.read, _CHUNK):
            yield block


@dataclass(frozen=True, kw_only=True)
class UploadReceipt:
    """What an upload produced: the session id (known before intake runs) and the run id.

    ``run_id`` is ``None`` until intake has created the run; :func:`streams.sessions.progress.
    wait_for_run` resolves it from ``artifact_set_hash`` (the run's idempotency key).
    """

    tenant: str
    device: str
    session_id: uuid.UUID
    run_id: uuid.UUID | None
    artifact_set_hash: str
    artifacts: tuple[NoticeArtifact, ...]
    subject: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "device": self.device,
            "session_id": str(self.session_id),
            "run_id": str(self.run_id) if self.run_id else None,
            "artifact_set_hash": self.artifact_set_hash,
            "artifacts": [a.model_dump() for a in self.artifacts],
            "subject": self.subject,
        }


def store_file(store: ObjectStore, tenant: str, path: Path, *, max_bytes: int) -> NoticeArtifact:
    """Stream ``path`` to its content address (blocking; run it in a thread)."""
    if not path.is_file():
        raise UsageError(f"{path} is not a file")

    def chunks() -> Any:
        with path.open("rb") as f:
            while block := f.read(_CHUNK):
                yield block

    stored = store.put_artifact(tenant, chunks(), max_bytes=max_bytes)
    return NoticeArtifact(name=path.name, sha256=stored.sha256, size=stored.size)


def receipt_for(
    *, tenant: str, device: str, artifacts: Sequence[NoticeArtifact], names: Names
) -> UploadReceipt:
    """The receipt for a notice naming ``artifacts`` (ids are derived, see ``notice``)."""
    set_hash = artifact_set_hash(tenant, [a.sha256 for a in artifacts])
    session_id = session_id_for(tenant, set_hash)
    return UploadReceipt(
        tenant=tenant,
        device=device,
        session_id=session_id,
        run_id=None,
        artifact_set_hash=set_hash,
        artifacts=tuple(artifacts),
        subject=names.sessions_subject(tenant, device),
    )


class NoticeInDoubt(TransientError):
    """The notice was handed to the connection but its acknowledgement never came: it may be
    stored (a reconnecting client sends what it buffered), so what it names must stay."""


async def publish_notice(
    nc: Nats, subject: str, notice: SessionNotice, *, msg_id: str,
    traceparent: str | None = None,
) -> None:
    """Publish ``notice`` on ``subject`` and wait for the stream's acknowledgement.

    ``traceparent`` (the upload's trace) travels as a header for intake to continue.

    Two failures, told apart because they call for opposite clean-ups: a connection that is
    not connected now refuses at once (``TransientError`` ``NATS_PUBLISH``): nothing was
    handed over, so nothing of it can arrive later - nats-py would otherwise buffer the
    notice while it reconnects and send it after the caller has answered 503 and removed
    the files (issue 27). A publish that was handed over and not acknowledged is
    :class:`NoticeInDoubt`: it may still arrive, and a retry of the same upload (same
    ``Nats-Msg-Id``) finds it stored and its run made.
    """
    if not nc.is_connected:
        raise TransientError("cannot publish the session notice: NATS is not connected",
                             code="NATS_PUBLISH")
    headers = {"Nats-Msg-Id": msg_id}
    if traceparent is not None:
        headers["traceparent"] = traceparent
    try:
        await nc.jetstream().publish(subject, notice.encode(), headers=headers, timeout=10)
    except (TimeoutError, NatsTimeout) as exc:
        raise NoticeInDoubt(
            f"the session notice was sent but not acknowledged ({describe(exc)}); it may "
            "still arrive: retrying the same upload is safe", code="NATS_PUBLISH") from exc
    except (NatsError, OSError) as exc:  # refused: no stream, an API error, no send
        raise TransientError(f"cannot publish session notice: {describe(exc)}",
                             code="NATS_PUBLISH") from exc


async def upload_files(
    settings: Settings,
    *,
    tenant: str,
    device: str,
    paths: Sequence[Path],
    priority: int = priorities.UPLOAD,
    config: Mapping[str, Any] | None = None,
    requested_by: str = "cli",
    date: dt.date | None = None,
    traceparent: str | None = None,
) -> UploadReceipt:
    """Store ``paths`` as one session's artifacts and notify intake; returns the receipt.

    ``date`` is the day the session was recorded, for files that carry no date themselves.
    The upload is a ``session.upload`` span continuing ``traceparent`` (a new trace without
    one) when tracing is on; the notice carries its trace context to intake.
    """
    with tracing.continue_trace("session.upload", traceparent,
                                {"tideway.tenant": tenant}) as trace:
        return await _upload_files(settings, tenant=tenant, device=device, paths=paths,
                                   priority=priority, config=config,
                                   requested_by=requested_by, date=date, traceparent=trace)


async def _upload_files(
    settings: Settings,
    *,
    tenant: str,
    device: str,
    paths: Sequence[Path],
    priority: int,
    config: Mapping[str, Any] | None,
    requested_by: str,
    date: dt.date | None,
    traceparent: str | None,
) -> UploadReceipt:
    check_tenant(tenant)
    check_device(device)
    if not paths:
        raise UsageError("name at least one file to upload")
    for p in paths:
        check_file_name(p.name)
        if not p.is_file():
            raise UsageError(f"{p} is not a file")
    staged = StagedUpload(
        ObjectStore(settings.objects()),
        tenant,
        max_bytes=settings.worker.max_artifact_bytes,
        connect=lambda: _postgres(settings),
        limits=settings.quotas,
    )
    async with staged:
        for p in paths:
            await staged.add(p.name, _file_chunks(p))
        names = Names(namespace=settings.namespace)
        receipt = receipt_for(tenant=tenant, device=device, artifacts=staged.artifacts, names=names)
        notice = SessionNotice(
            artifacts=staged.artifacts,
            priority=priority,
            config=dict(config or {}),
            requested_by=requested_by,
            date=date,
        )
        nc = await connect_nats(settings.nats, name="tideway-upload", attempts=ONE_SHOT_ATTEMPTS)
        try:
            await staged.publish(nc, receipt, notice, traceparent=traceparent)
        finally:
            await nc.close()
    return receipt


async def device_upload(
    settings: Settings,
    *,
    tenant: str,
    device: str,
    name: str,
    data: bytes,
    priority: int = priorities.DEVICE,
    config: Mapping[str, Any] | None = None,
    secret: str | None = None,
) -> None:
    """What a device does: put ``data`` into the session bucket as ``name``, publish a notice.

    ``secret``: the device's credential (``tideway devices credentials issue``), which a
    broker that authenticates devices requires; without it the connection is the process's
    own (a broker without device credentials, or ``nats.open_broker``)."""
    names = Names(namespace=settings.namespace)
    if secret is None:  # one attempt's worth of retries, as every one-shot command
        nc = await connect_nats(settings.nats, name="tideway-device-upload",
                                attempts=ONE_SHOT_ATTEMPTS)
    else:
        nc = await connect_device(settings.nats, tenant=tenant, device=device, secret=secret,
                                  name="tideway-device-upload", attempts=ONE_SHOT_ATTEMPTS)
    try:
        js = nc.jetstream()
        bucket = await js.object_store(names.session_bucket)
        await bucket.put(name, data)
        notice = SessionNotice(
            objects=(name,), priority=priority, config=dict(config or {}), requested_by="device"
        )
        subject = names.sessions_subject(tenant, device)
        with tracing.continue_trace("session.device_upload", None,
                                    {"tideway.tenant": tenant}) as trace:
            await publish_notice(nc, subject, notice, msg_id=f"{tenant}:{device}:object:{name}",
                                 traceparent=trace)
    finally:
        await nc.close()
