"""Handing a whole-session file to Tideway: store the artifacts, then publish a notice.

The CLI (``tideway sessions upload``) and the HTTP API both end here: each file is streamed to
its content address in the object store (``artifacts/<tenant>/<aa>/<sha256>``, hashed while it
is written), then one :class:`~streams.sessions.notice.SessionNotice` is published on
``sessions.<tenant>.<device>`` with the artifact-set hash as its ``Nats-Msg-Id`` (JetStream
drops a duplicate publish inside its window; intake is idempotent beyond it). The receipt
carries the session id, derived from the artifacts (see ``notice``), and the artifact-set
hash that intake uses as the run's idempotency key, so a caller can find and wait for the run.

Devices take a third path without the object store: they put the file into the JetStream
object-store bucket and publish a notice naming it (:func:`device_upload` does exactly that,
for tests and device simulators).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from streams.config import Settings
from streams.errors import TransientError, UsageError
from streams.names import Names
from streams.objects import ObjectStore
from streams.sessions.notice import (
    NoticeArtifact,
    SessionNotice,
    artifact_set_hash,
    session_id_for,
)
from streams.sessions.tenancy import check_device, check_tenant

__all__ = [
    "UploadReceipt",
    "device_upload",
    "publish_notice",
    "store_file",
    "upload_files",
]

_CHUNK = 1 << 20


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


async def publish_notice(
    js: JetStreamContext, subject: str, notice: SessionNotice, *, msg_id: str
) -> None:
    """Publish ``notice`` on ``subject`` and wait for the stream's acknowledgement."""
    try:
        await js.publish(subject, notice.encode(), headers={"Nats-Msg-Id": msg_id}, timeout=10)
    except (TimeoutError, nats.errors.Error, OSError) as exc:
        raise TransientError(f"cannot publish session notice: {exc}", code="NATS_PUBLISH") from exc


async def upload_files(
    settings: Settings,
    *,
    tenant: str,
    device: str,
    paths: Sequence[Path],
    priority: int = 0,
    config: Mapping[str, Any] | None = None,
    requested_by: str = "cli",
) -> UploadReceipt:
    """Store ``paths`` as one session's artifacts and notify intake; returns the receipt."""
    check_tenant(tenant)
    check_device(device)
    if not paths:
        raise UsageError("name at least one file to upload")
    store = ObjectStore(settings.objects())
    limit = settings.worker.max_artifact_bytes
    stored = [await asyncio.to_thread(store_file, store, tenant, p, max_bytes=limit) for p in paths]
    receipt = receipt_for(
        tenant=tenant, device=device, artifacts=stored, names=Names(namespace=settings.namespace)
    )
    notice = SessionNotice(
        artifacts=tuple(stored),
        priority=priority,
        config=dict(config or {}),
        requested_by=requested_by,
    )
    nc = await connect_nats(settings)
    try:
        await publish_notice(
            nc.jetstream(), receipt.subject, notice, msg_id=f"{tenant}:{receipt.artifact_set_hash}"
        )
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
    priority: int = 0,
    config: Mapping[str, Any] | None = None,
) -> None:
    """What a device does: put ``data`` into the session bucket as ``name``, publish a notice."""
    names = Names(namespace=settings.namespace)
    nc = await connect_nats(settings)
    try:
        js = nc.jetstream()
        bucket = await js.object_store(names.session_bucket)
        await bucket.put(name, data)
        notice = SessionNotice(
            objects=(name,), priority=priority, config=dict(config or {}), requested_by="device"
        )
        subject = names.sessions_subject(tenant, device)
        await publish_notice(js, subject, notice, msg_id=f"{tenant}:{device}:object:{name}")
    finally:
        await nc.close()


async def connect_nats(settings: Settings, *, persistent: bool = False) -> NatsClient:
    """A NATS connection; ``persistent`` ones (intake, API) reconnect for ever."""
    try:
        return await nats.connect(
            settings.nats(), connect_timeout=5, max_reconnect_attempts=-1 if persistent else 2
        )
    except (nats.errors.Error, OSError) as exc:
        raise TransientError(f"cannot connect to NATS: {exc}", code="NATS_UNAVAILABLE") from exc
