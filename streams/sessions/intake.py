"""Intake: the one consumer of session notices; turns an upload into a planned processing run.

Theory of operation
-------------------
Every handoff path (CLI, HTTP API, device bucket) ends in a notice on the SESSIONS stream
(work-queue retention, separate from TELEMETRY). The durable pull consumer ``intake`` takes a
notice and, in ONE Postgres transaction, records:

1. the tenant and device (created on first use, see ``streams.registry``);
2. one ``artifacts`` row per file, idempotent on ``(tenant, sha256)``;
3. the ``sessions`` row and the processing run with its artifact-set hash, pinned versions,
   config and the planned jobs (``streams.sessions.run_creation.create_run``). The run's
   idempotency key is the artifact-set hash, so the same upload twice is one run.

Only then is the notice acked; a crash before the commit redelivers it and the second attempt
finds (or creates) exactly the same rows. Files named in ``objects`` are first copied from the
JetStream object-store bucket into the object store at their content address (the bucket
itself checks the object's SHA-256 digest while reading).

What intake tells JetStream is decided by the one acknowledgement table that ``tideway
ingest`` uses too (:mod:`stages.ack_policy`), with the same backoff:

* accepted (run recorded, new or found) → ``RECORDED``: ack;
* a notice that can never succeed (a malformed body or subject, a missing artifact or bucket
  object, refused by validation) → ``NEVER_SUCCEEDS``: dead letter, then term;
* Postgres, the object store or NATS down, a connection lost under the transaction, or a
  statement cut off by ``postgres_timeouts.command_s`` (``PG_TIMEOUT``) → ``UNAVAILABLE``:
  nak with the shared backoff (``retry.redelivery_backoff()``, capped at
  ``retry.redelivery_cap_s``) for as long as the outage lasts — the consumer has no
  JetStream delivery limit;
* anything else (a bug, a statement Postgres refuses for this notice) → ``RETRY``: nak with the
  same backoff until ``consumer.max_deliver`` deliveries, then dead-lettered like a notice
  that can never succeed, so a poison notice cannot cycle forever.

A notice is terminated only once its dead letter is stored: if that publish fails, the notice
is nak'ed and tried again - a notice is never dropped. Dead letters are listed, shown and
redriven (published again as notices) by ``tideway sessions dlq``
(:mod:`streams.sessions.dead_letters`).

Every Postgres call intake makes has the batch side's time limits (``postgres_timeouts``); an
intake started while Postgres is down waits for it (:func:`streams.adapters.outage.wait_out`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import tempfile
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    ObjectStoreConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from pydantic import ValidationError

from schemas import error_codes as codes
from schemas.errors import stack, unexpected
from schemas.run_config import explain
from stages.ack_policy import AckDecision, Action, Disposition, budget_spent, decide
from streams.adapters import postgres
from streams.adapters.errors import (
    NATS_UNREACHABLE,
    PG_LOST,
    BucketNotFound,
    DigestMismatch,
    JsBadRequest,
    NatsError,
    NatsTimeout,
    ObjectNotFound,
    PgError,
    pg_not_now,
    pg_unavailable,
)
from streams.adapters.nats import (
    ONE_SHOT_ATTEMPTS,
    JetStreamContext,
    Msg,
    connect_nats,
    ensure_stream,
)
from streams.adapters.outage import Outage, wait_out
from streams.config import Settings
from streams.errors import PermanentError, TransientError, UsageError
from streams.names import Names
from streams.objects import ObjectStore, artifact_key
from streams.observability import tracing
from streams.observability.events import IntakeObserver, ProcessHooks
from streams.observability.readiness import nats_check, object_store_check, postgres_check
from streams.sessions.notice import NoticeArtifact, SessionNotice
from streams.sessions.run_creation import IntakeResult, RunRequest, create_run
from streams.sessions.upload import receipt_for, store_file

__all__ = ["IntakeResult", "accept_notice", "provision_sessions", "run_intake"]

log = logging.getLogger(__name__)

STREAM_MAX_AGE_S = 7 * 24 * 3600.0
BUCKET_TTL_S = 7 * 24 * 3600.0
ACK_WAIT_S = 120.0
_FETCH = 16


async def provision_sessions(settings: Settings) -> None:
    """Create (or update) the SESSIONS stream, its DLQ, the intake consumer and the bucket."""
    names = Names(namespace=settings.namespace)
    nc = await connect_nats(settings.nats, name="tideway-provision", attempts=ONE_SHOT_ATTEMPTS)
    try:
        js = nc.jetstream()
        replicas = settings.stream.replicas
        await ensure_stream(
            js,
            StreamConfig(
                name=names.sessions_stream,
                subjects=[names.sessions_subjects],
                retention=RetentionPolicy.WORK_QUEUE,
                storage=StorageType.FILE,
                max_age=STREAM_MAX_AGE_S,
                duplicate_window=settings.stream.duplicate_window_s,
                num_replicas=replicas,
            ),
        )
        await ensure_stream(
            js,
            StreamConfig(
                name=names.sessions_dead_letter_stream,
                subjects=[names.sessions_dead_letter_subjects],
                retention=RetentionPolicy.LIMITS,
                storage=StorageType.FILE,
                max_age=30 * 24 * 3600.0,
                num_replicas=replicas,
            ),
        )
        consumer = ConsumerConfig(
            durable_name=names.intake_durable,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=ACK_WAIT_S,
            # No delivery limit, as for ingest: an outage only defers notices, and the end of
            # one that keeps failing is decided by ``stages.ack_policy`` (a dead letter), not
            # by JetStream silently giving up on it. Re-provisioning a consumer created with a
            # limit lifts it (``max_deliver`` is editable in place).
            max_deliver=-1,
            filter_subject=names.sessions_subjects,
        )
        try:
            await js.add_consumer(names.sessions_stream, consumer)
        except JsBadRequest as exc:  # exists with other settings: keep it
            log.warning("intake consumer kept as it is: %s", exc)
        try:
            await js.object_store(names.session_bucket)
        except BucketNotFound:
            await js.create_object_store(
                names.session_bucket,
                ObjectStoreConfig(ttl=BUCKET_TTL_S, storage=StorageType.FILE, replicas=replicas),
            )
    except (NatsError, OSError) as exc:
        raise TransientError(f"cannot provision SESSIONS: {exc}", code="NATS_PROVISION") from exc
    finally:
        await nc.close()


@dataclass(frozen=True, kw_only=True)
class _Intake:
    settings: Settings
    names: Names
    pool: Any
    store: ObjectStore
    js: JetStreamContext
    rand: random.Random = field(default_factory=random.Random)
    """The draws of the nak delays' jitter (pass a seeded one to pin them)."""
    observer: IntakeObserver | None = None


async def run_intake(
    settings: Settings, *, stop: asyncio.Event, hooks: ProcessHooks | None = None
) -> None:
    """Consume session notices until ``stop`` is set.

    ``hooks``: the process's observability (readiness checks, the fetch loop's heartbeat,
    notices counted by outcome)."""
    names = Names(namespace=settings.namespace)
    limits = settings.postgres_timeouts
    pool = await wait_out(
        lambda: postgres.create_pool(
            settings.postgres(), postgres.batch_pool(postgres.INTAKE_POOL, limits)
        ),
        stop=stop, outage=Outage("postgres"), initial_s=limits.retry_initial_s,
        max_s=limits.retry_max_s,
    )
    if pool is None:  # stopped before Postgres came up
        return
    try:
        nc = await connect_nats(settings.nats, name="tideway-intake")
    except BaseException:
        await pool.close()
        raise
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe_bind(names.intake_durable, stream=names.sessions_stream)
        store = ObjectStore(settings.objects())
        beat = None
        if hooks is not None:
            hooks.ready(
                "intake",
                nats_check(nc, stream=names.sessions_stream, durable=names.intake_durable),
                postgres_check(pool),
                object_store_check(store),
            )
            beat = hooks.heartbeat("intake-fetch")
        ctx = _Intake(
            settings=settings, names=names, pool=pool, store=store, js=js,
            observer=hooks.intake if hooks is not None else None,
        )
        while not stop.is_set():
            if beat is not None:
                beat.tick()
            try:
                msgs = await sub.fetch(_FETCH, timeout=0.5)
            except (NatsTimeout, TimeoutError):
                continue
            except NatsError as exc:
                log.warning("intake fetch failed: %s", exc)
                await asyncio.sleep(settings.retry.redelivery_delay_s)
                continue
            for msg in msgs:
                await _handle(ctx, msg)
    finally:
        if hooks is not None:
            await hooks.stopping("intake")
        with contextlib.suppress(*NATS_UNREACHABLE):  # a server that is gone: nothing to drain
            await nc.close()
        await pool.close()


async def _handle(ctx: _Intake, msg: Msg) -> None:
    """Handle one notice, then settle it as :mod:`stages.ack_policy` decides."""
    delivered = msg.metadata.num_delivered or 1
    outcome = await _attempt(ctx, msg)
    disposition, code, message = outcome.disposition, outcome.code, outcome.message
    # What the dead letter calls the failure (spec 003): refused for what it is, or a failure
    # a retry could have fixed that kept failing until the delivery budget ran out.
    error_type = "permanent" if disposition is Disposition.NEVER_SUCCEEDS else "transient"
    max_deliver = ctx.settings.consumer.max_deliver
    if disposition is Disposition.RETRY and budget_spent(
        delivered=delivered, max_deliver=max_deliver
    ):
        disposition = Disposition.NEVER_SUCCEEDS
        message = f"gave up after {delivered} deliveries: {message}"
    backoff = ctx.settings.retry.redelivery_backoff()
    decision = decide(disposition, delivered=delivered, backoff=backoff, rand=ctx.rand.random)
    dead = _DeadLetter(code=code, message=message, error_type=error_type, delivered=delivered,
                       stack_trace=outcome.stack_trace)
    if decision.action is Action.DEAD_LETTER and not await _dead_letter(ctx, msg, dead):
        # Terminating now would drop the notice: keep it until its dead letter is stored.
        decision = decide(
            Disposition.UNAVAILABLE, delivered=delivered, backoff=backoff, rand=ctx.rand.random
        )
    elif decision.action is Action.NAK:
        log.warning("intake deferred (%s, delivery %d): %s", code, delivered, message)
    await _settle(msg, decision)
    if ctx.observer is not None:
        if decision.action is Action.DEAD_LETTER:
            ctx.observer.on_dead_letter(code=code)
        ctx.observer.on_notice(outcome=_outcome_label(decision, outcome))


def _outcome_label(decision: AckDecision, outcome: _Outcome) -> str:
    """The ``outcome`` label of a handled notice (a small fixed set)."""
    if decision.action is Action.ACK:
        return "planned" if outcome.created else "duplicate"
    if decision.action is Action.DEAD_LETTER:
        return "rejected"
    return "deferred"


@dataclass(frozen=True, kw_only=True, slots=True)
class _Outcome:
    """Where a notice stands after one attempt to accept it (a row of the ack table)."""

    disposition: Disposition
    code: str = ""
    message: str = ""
    created: bool = False
    """Accepted: whether the notice made a new run (not one that existed already)."""
    tenant: str = ""
    intake: IntakeResult | None = None
    """Accepted: the session and run."""
    stack_trace: str | None = None
    """A bug or a refused statement: where it was raised (:func:`schemas.errors.stack`)."""


# Postgres's ways of saying "not now" rather than "not this notice": the server cannot be
# reached or the connection died under the transaction (``PG_LOST``), or a refusal in a
# SQLSTATE class that passes by itself (``pg_not_now``, as the ingest recorder reads them). A
# closed pool is none of these: that is a bug (``RETRY``).


async def _attempt(ctx: _Intake, msg: Msg) -> _Outcome:
    """Accept the notice; what failed, if anything, as a disposition with its reason code."""
    try:
        tenant, device = _parse_subject(ctx.names, msg.subject)
        notice = SessionNotice.model_validate_json(msg.data)
        # The notice carries its upload's trace context: accepting it is a span of that trace,
        # and the run it makes stores it for the job attempts.
        with tracing.continue_trace("session.intake", (msg.headers or {}).get("traceparent"),
                                    {"tideway.tenant": tenant}) as traceparent:
            result = await accept_notice(
                ctx.settings,
                ctx.pool,
                ctx.store,
                tenant=tenant,
                device=device,
                notice=notice,
                js=ctx.js,
                traceparent=traceparent,
            )
    except TransientError as exc:
        return _Outcome(disposition=Disposition.UNAVAILABLE, code=exc.code, message=str(exc))
    except TimeoutError:  # asyncpg's command_timeout (before PG_LOST: it is an OSError)
        return _Outcome(
            disposition=Disposition.UNAVAILABLE, code="PG_TIMEOUT",
            message="a Postgres statement ran past postgres_timeouts.command_s",
        )
    except ValidationError as exc:  # by key and kind: pydantic's own text quotes the input
        return _Outcome(disposition=Disposition.NEVER_SUCCEEDS, code="BAD_NOTICE",
                        message=f"invalid session notice: {explain(exc, root='notice')}")
    except (UsageError, PermanentError) as exc:
        return _Outcome(disposition=Disposition.NEVER_SUCCEEDS, code=exc.code, message=str(exc))
    except PG_LOST as exc:
        gone = pg_unavailable(exc)
        return _Outcome(disposition=Disposition.UNAVAILABLE, code=gone.code, message=str(gone))
    except PgError as exc:
        busy = pg_not_now(exc)
        if busy is not None:
            return _Outcome(disposition=Disposition.UNAVAILABLE, code=busy.code, message=str(busy))
        return _Outcome(disposition=Disposition.RETRY, code=codes.PG_ERROR,
                        message=f"Postgres: {exc}", stack_trace=stack(exc))
    except Exception as exc:  # a bug: keep the notice (redelivered) rather than lose it
        log.exception("intake failed on a notice on %s", msg.subject)
        return _Outcome(
            disposition=Disposition.RETRY, code="INTAKE_CRASHED", message=unexpected(exc),
            stack_trace=stack(exc),
        )
    log.info(
        "intake %s run %s (%s)",
        result.session_id,
        result.run_id,
        "new" if result.created else "duplicate",
    )
    return _Outcome(disposition=Disposition.RECORDED, created=result.created, tenant=tenant,
                    intake=result)


async def _settle(msg: Msg, decision: AckDecision) -> None:
    """Send JetStream the decision (a dead letter is already stored when this terminates)."""
    if decision.action is Action.ACK:
        await msg.ack()
    elif decision.action is Action.DEAD_LETTER:
        await msg.term()
    else:
        await msg.nak(delay=decision.delay_s)


def _parse_subject(names: Names, subject: str) -> tuple[str, str]:
    prefix = names.sessions_subject("", "").removesuffix(".")  # "<ns.>sessions."
    rest = subject.removeprefix(prefix)
    parts = rest.split(".")
    if rest == subject or len(parts) != 2:
        raise UsageError(f"not a session notice subject: {subject}")
    return parts[0], parts[1]


@dataclass(frozen=True, kw_only=True, slots=True)
class _DeadLetter:
    """Why a notice is dead-lettered (spec 003's DLQ fields, with the notice's own code)."""

    code: str
    message: str
    error_type: str
    """``permanent`` (it can never succeed as it is) or ``transient`` (retries ran out)."""
    delivered: int
    stack_trace: str | None


def _first_seen(msg: Msg) -> datetime:
    """When the notice was stored in SESSIONS (the stream timestamp every delivery carries)."""
    stamp = getattr(msg.metadata, "timestamp", None)
    return stamp.astimezone(UTC) if isinstance(stamp, datetime) else datetime.now(UTC)


async def _dead_letter(ctx: _Intake, msg: Msg, dead: _DeadLetter) -> bool:
    """Publish the notice to SESSIONS_DLQ with its reason; whether the stream stored it."""
    log.error("intake rejected a notice on %s (%s): %s", msg.subject, dead.code, dead.message)
    parts = msg.subject.split(".")
    tenant, device = (parts[-2], parts[-1]) if len(parts) >= 2 else ("unknown", "unknown")
    body = orjson.dumps(
        {
            "subject": msg.subject,
            "code": dead.code,
            "message": dead.message,
            "notice": msg.data.decode("utf-8", "replace"),
            "error_type": dead.error_type,
            "retry_count": max(dead.delivered - 1, 0),
            "deliveries": dead.delivered,
            "first_seen_at": _first_seen(msg).isoformat(),
            "last_seen_at": datetime.now(UTC).isoformat(),
            "stack_trace": dead.stack_trace,
        }
    )
    try:
        await ctx.js.publish(ctx.names.sessions_dead_letter_subject(tenant, device), body)
    except (NatsError, OSError, TimeoutError) as exc:  # the caller naks the notice
        log.error("could not dead-letter the notice, keeping it for redelivery: %s", exc)
        return False
    return True


async def accept_notice(
    settings: Settings,
    pool: Any,
    store: ObjectStore,
    *,
    tenant: str,
    device: str,
    notice: SessionNotice,
    js: JetStreamContext | None = None,
    traceparent: str | None = None,
) -> IntakeResult:
    """Record the notice's artifacts, session and run (idempotent); see the module docstring.

    ``traceparent`` is the upload's trace context, stored on a new run."""
    artifacts = list(notice.artifacts)
    for name in notice.objects:
        if js is None:
            raise UsageError("a notice naming bucket objects needs a JetStream connection")
        artifacts.append(await _copy_from_bucket(settings, js, store, tenant, name))
    for a in notice.artifacts:  # the uploader stored these; make sure they are really there
        exists = await asyncio.to_thread(store.exists, artifact_key(tenant, a.sha256))
        if not exists:
            raise PermanentError(
                f"artifact {a.name} ({a.sha256}) is not in the object store",
                code="ARTIFACT_MISSING",
            )
    receipt = receipt_for(
        tenant=tenant,
        device=device,
        artifacts=artifacts,
        names=Names(namespace=settings.namespace),
    )
    request = RunRequest(
        tenant=tenant,
        device=device,
        session_id=receipt.session_id,
        artifact_set_hash=receipt.artifact_set_hash,
        artifacts=tuple(_dedupe(artifacts)),
        storage_urls={a.sha256: store.url(artifact_key(tenant, a.sha256)) for a in artifacts},
        priority=notice.priority,
        config=notice.run_config(),
        requested_by=notice.requested_by,
        title=notice.title,
        traceparent=traceparent,
    )
    return await create_run(
        pool, request, namespace=settings.namespace,
        default_attempts=settings.retry.job_max_attempts,
    )


def _dedupe(artifacts: list[NoticeArtifact]) -> list[NoticeArtifact]:
    seen: set[str] = set()
    out = []
    for a in sorted(artifacts, key=lambda a: a.sha256):
        if a.sha256 not in seen:
            seen.add(a.sha256)
            out.append(a)
    return out


async def _copy_from_bucket(
    settings: Settings, js: JetStreamContext, store: ObjectStore, tenant: str, name: str
) -> NoticeArtifact:
    names = Names(namespace=settings.namespace)
    limit = settings.worker.max_artifact_bytes
    try:
        bucket = await js.object_store(names.session_bucket)
        info = await bucket.get_info(name)
        if info.size is not None and info.size > limit:
            raise PermanentError(f"{name}: {info.size} bytes exceeds {limit}", code="TOO_LARGE")
        with tempfile.TemporaryDirectory(prefix="tideway-intake-") as tmp:
            path = Path(tmp) / uuid.uuid4().hex
            with path.open("wb") as f:
                await bucket.get(name, writeinto=f)
            stored = await asyncio.to_thread(store_file, store, tenant, path, max_bytes=limit)
    except ObjectNotFound as exc:
        raise PermanentError(f"{name} is not in the session bucket", code="OBJECT_MISSING") from exc
    except DigestMismatch as exc:
        raise PermanentError(f"{name}: bucket digest mismatch", code="CHECKSUM_MISMATCH") from exc
    except (NatsError, OSError) as exc:
        raise TransientError(
            f"cannot read {name} from the bucket: {exc}", code="NATS_OBJECT"
        ) from exc
    return NoticeArtifact(name=name, sha256=stored.sha256, size=stored.size)
