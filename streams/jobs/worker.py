"""The job worker: claim in batches, execute, complete with group commit, heartbeat, reap.

Theory of operation
-------------------
One worker process runs up to ``concurrency`` jobs at a time on one event loop:

- **Claim.** Whenever slots are free it claims up to that many jobs in one statement, loads
  their contexts in two more, and starts one task per job. It then sleeps until a ``NOTIFY`` on
  the jobs channel (sent by the transaction that made jobs runnable, so an idle worker starts
  within milliseconds), until a slot frees, or for ``poll_interval_s`` (the fallback when a
  notification is missed). A run's state changes are announced by the database itself, in
  the transaction that makes them (``streams.domain_events``); the worker also runs the relay
  that moves those events to NATS (one worker relays at a time).
- **Execute.** One task per job awaits its executor. A watchdog checks every 50 ms for jobs
  past their soft timeout and cancels them: a retriable failure (attempt ``timed_out``).
  ``Cancelled`` from a checkpoint acknowledges the cancellation; any other exception is
  translated by ``streams.jobs.failure``. A slot frees as soon as the executor returns.
- **Complete.** Successful results go through a queue to one flusher, which completes every
  result waiting at that moment in a single transaction (group commit): under load many jobs
  share a round trip, when idle each completes immediately. Under a backlog the worker also
  claims in batches (a quarter of its slots at a time) rather than one job per free slot.
- **Heartbeat.** Every ``heartbeat_s`` the worker refreshes all its jobs in one statement, and
  at once when a ``stop`` notification arrives on the jobs channel (sent by the transaction that
  asked running jobs to stop), so a cancel reaches its job in milliseconds. A job whose
  cancellation was requested is stopped: its context is flagged (``checkpoint()`` raises)
  and its task cancelled, which reaches the computation (a stage running in the compute pool
  has its process stopped, see ``streams.sessions.stage_executors``); the worker then records
  the acknowledgement. A job no longer held (reaped after a stall, hard timeout) is abandoned
  locally the same way.
- **Let go.** When an attempt that promoted outputs (``ctx.writes_to``) ends without success,
  the worker removes them in the background if its job can never use them (``cancelled``,
  ``failed``): ``streams.jobs.unrecorded``.
- **Maintain.** Every worker promotes due ``retry_wait`` jobs each poll, and reaps stale ones
  every ``min(stale_after_s / 2, 30)`` seconds (each job's own threshold, from its type, unless
  ``worker.stale_after_s`` overrides them all); both are race-free, so running them in every
  worker is safe and needs no leader.

On ``stop`` (SIGTERM) the worker **drains**: it claims nothing more and gives running jobs up
to ``worker.drain_s`` to finish; whatever is still running then is stopped like a cancelled
job and released - ``retry_wait`` due at once, counted as a lost attempt (``WORKER_DRAINED``),
not one of the job's own - so another worker takes it over without waiting for the reaper.
Then it flushes and returns. A crashed worker needs nothing: its jobs stop heartbeating and
the reaper takes them back after their type's stale threshold (and its compute-pool processes
die with it: ``streams.sessions.pool_process``).

Observability
-------------
Each step above is reported to the process's :class:`~streams.observability.events.JobObserver`
(claim; then exactly one of complete, retry scheduled, fail, cancelled or heartbeat lost per
attempt; reap; each heartbeat round; each run the worker's transactions finalised), and each
attempt logs its start and its end with ``run_id``, ``job_id``, ``job_type``, ``attempt`` and
``worker_id`` bound (spec 000 §14). An attempt's task runs with those fields bound, so anything
its executor logs carries them too.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import random
import secrets
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from schemas import error_codes as codes
from stages.jobs.errors import AttemptFailure, ErrorSource, describe
from stages.jobs.graph import Dag
from stages.jobs.job_state import JobState
from streams.adapters import postgres
from streams.adapters.errors import PgError
from streams.adapters.postgres import Conn, Pool
from streams.collector import tuned_collector
from streams.config import Settings
from streams.domain_events import EventRelay
from streams.errors import TidewayError
from streams.jobs import queue, unrecorded
from streams.jobs.executor import Cancelled, Executor, JobContext
from streams.jobs.failure import error_from_exception
from streams.jobs.model import ClaimedJob, FinishedRun, JobResult, Outcome
from streams.names import Names
from streams.objects import ObjectStore
from streams.observability import tracing
from streams.observability.events import JobEvent, JobObserver, ProcessHooks
from streams.observability.liveness import Heartbeat
from streams.observability.logs import log_context
from streams.observability.readiness import object_store_check, postgres_check

log = logging.getLogger(__name__)

_FLUSH_MAX = 256
_TICK_S = 0.05  # how often the watchdog looks for soft timeouts


def reap_interval(override_s: float | None, dag: Dag) -> float:
    """How often a worker reaps: half the shortest stale threshold it can meet - the
    configured override, else the shortest of its DAG's job types' own (a minute for the
    default DAG's I/O jobs) - kept between 0.1 and 30 s. A job whose worker died is then taken
    back within about one and a half times its threshold, whatever the DAG."""
    shortest = override_s if override_s is not None else min(
        (spec.stale_after_s for spec in dag.values()), default=60.0)
    return max(0.1, min(shortest / 2, 30.0))


def _bind_attempt(fields: Mapping[str, object]) -> None:
    """Bind an attempt's log fields in the current context, for good: the worker calls it in
    the attempt's own context (``_Running.context``), which nothing else runs in. The fields
    are ``streams.observability.logs.CONTEXT_FIELDS``, bound as ``log_context`` binds them;
    ``log_context`` itself would also read every bound field first and unbind them at the end
    of a block - about 9 µs per attempt for the claim and as much for the end's log line
    (bench/job_queue.py profile), where this costs about 1 µs."""
    structlog.contextvars.bind_contextvars(**{k: v for k, v in fields.items() if v is not None})


def default_worker_id() -> str:
    """``host:pid:random`` - unique per worker process start."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass(kw_only=True)
class _Running:
    job: ClaimedJob
    ctx: JobContext
    deadline: float  # loop time of the soft timeout
    task: asyncio.Task[None] | None = None
    slot: bool = True  # holds one of the worker's execution slots
    finishing: bool = False  # the outcome is being recorded: never abandon or time it out
    timed_out: bool = False  # stopped by the watchdog at the soft timeout
    cancelling: bool = False  # stopped because cancellation was requested: acknowledge it
    drained: bool = False  # stopped at the drain deadline: release it for another worker
    abandoned: bool = False  # no longer held in the database (reaped): drop it silently
    succeeded: bool = False  # its completion was applied
    result: JobResult | None = None
    started: float = 0.0  # loop time of the claim
    ran_s: float = 0.0  # the attempt's duration, once its executor has returned
    reported: bool = False  # its end has been reported to the observer
    span: Any = None  # the attempt's span, when tracing is on
    trace_id: str | None = None  # the run's trace (the ``trace_id`` log field)
    # The attempt's own context: its log fields bound once (``_bind_attempt``); its task runs
    # in a copy and its start and end are logged in it.
    context: contextvars.Context | None = None

    def event(self) -> JobEvent:
        job = self.job
        return JobEvent(job_id=job.id, run_id=job.run_id, job_type=job.job_type,
                        attempt=job.attempt, worker_id=job.locked_by)

    def log_fields(self) -> dict[str, object]:
        """The log context of this attempt (spec 000 §14)."""
        job = self.job
        return {"run_id": str(job.run_id), "job_id": str(job.id), "job_type": job.job_type,
                "attempt": job.attempt, "worker_id": job.locked_by, "trace_id": self.trace_id}


async def run_worker(
    settings: Settings,
    *,
    dag: Dag,
    executors: Mapping[str, Executor],
    pool: str | None,
    concurrency: int,
    stop: asyncio.Event,
    worker_id: str | None = None,
    rand: Callable[[], float] = random.random,
    hooks: ProcessHooks | None = None,
) -> None:
    """Run jobs of ``pool`` (``None``: every pool) whose type has an executor, until ``stop``.

    ``dag``: the DAG this worker runs (retry policies and failure reasons of its job types,
    the gates and features that settle and finalise runs).

    ``hooks``: the process's observability (readiness checks, the claim loop's heartbeat, the
    job observer, the queue-depth sampler)."""
    worker = _Worker(
        settings,
        dag=dag,
        executors=executors,
        pool=pool,
        concurrency=concurrency,
        stop=stop,
        worker_id=worker_id or default_worker_id(),
        rand=rand,
        hooks=hooks,
    )
    with tuned_collector():
        await worker.run()


class _Worker:
    def __init__(
        self,
        settings: Settings,
        *,
        dag: Dag,
        executors: Mapping[str, Executor],
        pool: str | None,
        concurrency: int,
        stop: asyncio.Event,
        worker_id: str,
        rand: Callable[[], float],
        hooks: ProcessHooks | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.settings = settings
        self.cfg = settings.worker
        self.max_active_runs = settings.quotas.max_active_runs
        self.dag = dag
        self.executors = dict(executors)
        self.pools = None if pool is None else [pool]
        self.concurrency = concurrency
        self.stop = stop
        self.id = worker_id
        self.rand = rand
        self.channel = Names(namespace=settings.namespace).jobs_channel
        self.wake = asyncio.Event()
        self.look = asyncio.Event()  # a job may have been asked to stop: heartbeat now
        self.running: dict[uuid.UUID, _Running] = {}  # held: executing or being recorded
        self.executing = 0
        self.backlog = False  # the last claim was full: more jobs are probably waiting
        self.min_batch = max(1, concurrency // 4)
        self.done: asyncio.Queue[_Running | None] = asyncio.Queue()
        self.db: Pool
        self.hooks = hooks
        self.observer: JobObserver | None = hooks.jobs if hooks is not None else None
        self.beat: Heartbeat | None = None
        self.store: ObjectStore | None = None  # for removing unrecorded outputs (on first use)
        self.discarding: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        dsn = self.settings.postgres()
        self.db = await postgres.create_pool(
            dsn, postgres.batch_pool(postgres.WORKER_POOL, self.settings.postgres_timeouts)
        )
        listener = await postgres.connect(dsn, limits=self.settings.postgres_timeouts)
        await listener.add_listener(self.channel, self._on_notify)
        if self.hooks is not None:
            store = ObjectStore(self.settings.objects())
            self.hooks.ready("worker", postgres_check(self.db), object_store_check(store))
            # Every worker samples the queue depth (leader-free): two statements on partial
            # indexes every sample_interval_s; dashboards take max() over workers.
            self.hooks.sample_job_queue(self.db)
            self.beat = self.hooks.heartbeat("worker-claim")
        relay = EventRelay(self.settings, self.db,
                           observer=self.hooks.relay if self.hooks is not None else None)
        relay_stop = asyncio.Event()  # the relay outlives the drain: its last runs' events
        helpers = [
            asyncio.create_task(self._flush_loop(), name="flush"),
            asyncio.create_task(relay.run(relay_stop, listener=listener), name="event-relay"),
            asyncio.create_task(self._heartbeat_loop(), name="heartbeat"),
            asyncio.create_task(self._maintain_loop(), name="maintain"),
            asyncio.create_task(self._watchdog_loop(), name="watchdog"),
            asyncio.create_task(self._stop_watch(), name="stop-watch"),
        ]
        log.info(
            "worker %s started (pool=%s, concurrency=%d)", self.id, self.pools, self.concurrency
        )
        try:
            await self._claim_loop()
            await self._drain()
        finally:
            await self.done.put(None)
            await asyncio.gather(helpers[0], return_exceptions=True)
            relay_stop.set()
            await asyncio.gather(helpers[1], return_exceptions=True)
            for task in helpers[2:]:
                task.cancel()
            await asyncio.gather(*helpers[2:], return_exceptions=True)
            await asyncio.gather(*self.discarding, return_exceptions=True)
            if self.hooks is not None:
                await self.hooks.stopping("worker")
            await listener.close()
            await self.db.close()
            log.info("worker %s stopped", self.id)

    # -- claiming ------------------------------------------------------------------------
    async def _claim_loop(self) -> None:
        while not self.stop.is_set():
            if self.beat is not None:
                self.beat.tick()
            self.wake.clear()
            # A slot frees when its executor returns, before its completion commits, so claims
            # overlap flushes; results waiting to be recorded are capped at one more round.
            free = min(self.concurrency - self.executing, 2 * self.concurrency - len(self.running))
            # Under a backlog, claim in batches: while work is running, wait until a quarter of
            # the slots are free (or the poll interval passes) rather than claim one at a time.
            if self.backlog and self.executing and free < self.min_batch:
                free = 0
            if free > 0:
                try:
                    await self._claim(free)
                except (OSError, PgError) as exc:
                    log.warning("worker %s: claim failed: %s", self.id, exc)
            # asyncio.timeout rather than wait_for, which wraps the wait in a task of its own:
            # 4 us instead of 12 us a wake-up, about one per flush and per claim.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.cfg.poll_interval_s):
                    await self.wake.wait()
                continue
            self.backlog = False  # a quiet poll interval: take any free slot next time

    async def _claim(self, limit: int) -> None:
        async with self.db.acquire() as conn:
            contexts = await queue.claim_contexts(
                conn,
                worker_id=self.id,
                limit=limit,
                pools=self.pools,
                job_types=sorted(self.executors),
                tenant_max_running=self.cfg.tenant_max_running,
                heavy_max_running=self.cfg.heavy_max_running,
                max_active_runs=self.max_active_runs,
            )
        now = asyncio.get_running_loop().time()
        for ctx in contexts:
            entry = _Running(job=ctx.job, ctx=ctx, deadline=now + ctx.job.soft_timeout_s,
                             started=now)
            self.running[ctx.job.id] = entry
            self.executing += 1
            # A span of the run's trace, from the claim to the recorded end (``_ended``).
            entry.span = tracing.start_span("job.attempt", ctx.traceparent, {
                "tideway.run_id": str(ctx.job.run_id), "tideway.job_id": str(ctx.job.id),
                "tideway.job_type": ctx.job.job_type, "tideway.attempt": ctx.job.attempt,
                "tideway.worker_id": ctx.job.locked_by})
            entry.trace_id = (tracing.trace_id_of(ctx.traceparent)
                              or tracing.span_trace_id(entry.span))
            entry.context = contextvars.copy_context()
            entry.context.run(self._spawn, entry)
        self.backlog = len(contexts) == limit
        if self.backlog:
            self.wake.set()  # the queue may hold more: look again as soon as slots free

    def _spawn(self, entry: _Running) -> None:
        """Start ``entry``'s task; runs in the attempt's own context (``entry.context``)."""
        _bind_attempt(entry.log_fields())
        with tracing.using(entry.span):
            # The task copies this context: whatever the attempt logs carries the fields, and
            # whatever it traces is a child of the attempt's span.
            log.info("job attempt started", extra={"job_name": entry.job.name})
            if self.observer is not None:
                self.observer.on_claim(entry.event())
            entry.task = asyncio.create_task(self._execute(entry), name=f"job-{entry.job.name}")

    def _on_notify(self, _conn: Conn, _pid: int, _channel: str, payload: object) -> None:
        if payload == queue.STOP_NOTICE:  # some running job was asked to stop
            self.look.set()
        elif self.pools is None or not payload or str(payload) in self.pools:
            self.wake.set()

    async def _stop_watch(self) -> None:
        await self.stop.wait()
        self.wake.set()

    async def _drain(self) -> None:
        """Wait up to ``drain_s`` for running jobs, then stop and release the rest."""
        tasks = [r.task for r in self.running.values() if r.task is not None]
        if not tasks:
            return
        log.info("worker %s draining: %d job(s) running, %gs to finish", self.id, len(tasks),
                 self.cfg.drain_s)
        _done, pending = await asyncio.wait(tasks, timeout=self.cfg.drain_s or None)
        if pending and self.cfg.drain_s > 0:
            for entry in list(self.running.values()):
                if entry.task in pending and not entry.finishing:
                    entry.drained = True
                    self._stop(entry)
        # Released jobs record their outcome in their own task; completions are flushed.
        await asyncio.gather(*tasks, return_exceptions=True)

    def _stop(self, entry: _Running) -> None:
        """Make ``entry``'s executor stop now (cancelling its task reaches the computation)."""
        entry.ctx.request_cancel()  # a threaded executor stops at a checkpoint
        if entry.task is not None:
            entry.task.cancel()

    # -- executing -----------------------------------------------------------------------
    async def _execute(self, entry: _Running) -> None:
        job, ctx = entry.job, entry.ctx
        handed_over = False
        try:
            try:
                result = await self.executors[job.job_type](ctx)
            finally:
                entry.ran_s = asyncio.get_running_loop().time() - entry.started
        except Cancelled:  # the executor stopped at a checkpoint
            if entry.abandoned:
                return
            entry.finishing = True
            await self._guarded(self._stopped(entry))
        except asyncio.CancelledError:
            if entry.abandoned:
                return  # reaped or re-claimed: the job is no longer ours
            if not (entry.timed_out or entry.cancelling or entry.drained):
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            entry.finishing = True
            await self._guarded(self._stopped(entry))
        except Exception as exc:
            entry.finishing = True
            await self._guarded(self._fail(entry, error_from_exception(exc)))
        else:
            entry.finishing = True
            entry.result = result
            self._release(entry)
            self.done.put_nowait(entry)  # the flusher records it, then lets go of the job
            handed_over = True
        finally:
            if not handed_over:
                self._let_go(entry)

    async def _stopped(self, entry: _Running) -> None:
        """Record why the worker stopped ``entry``: drained, timed out or cancelled."""
        if entry.drained:
            await self._release_drained(entry)
        elif entry.timed_out:  # the watchdog stopped the executor at the job's soft timeout
            error = describe(
                codes.SOFT_TIMEOUT,
                f"soft timeout of {entry.job.soft_timeout_s:g}s",
                retriable=True,
                source=ErrorSource.WORKER,
            )
            await self._fail(entry, error, timed_out=True)
        else:  # cancellation was requested (learnt from a heartbeat)
            await self._acknowledge(entry)

    def _release(self, entry: _Running) -> None:
        if entry.slot:
            entry.slot = False
            self.executing -= 1
            self.wake.set()

    def _let_go(self, entry: _Running) -> None:
        self._release(entry)
        if self.running.pop(entry.job.id, None) is not None:
            if not entry.reported:
                # No outcome was recorded by this worker: the job was taken from it (reaped),
                # or the database could not be reached to record one (the reaper will take it
                # back).
                self._ended(entry, "lost", error_code=codes.WORKER_LOST)
            if entry.ctx.output_dirs and not entry.succeeded:
                task = asyncio.create_task(self._discard(entry), name="discard")
                self.discarding.add(task)
                task.add_done_callback(self.discarding.discard)
        self.wake.set()

    async def _discard(self, entry: _Running) -> None:
        """Remove the outputs ``entry``'s attempt promoted if its job ended without success
        (``streams.jobs.unrecorded``); on any trouble retention sweeps them later."""
        job = entry.job
        try:
            if self.store is None:
                self.store = ObjectStore(self.settings.objects())
            state = await unrecorded.discard_if_ended(self.db, self.store, job.id,
                                                      entry.ctx.output_dirs)  # fmt: skip
        except (OSError, PgError, TidewayError) as exc:
            with log_context(**entry.log_fields()):
                log.warning("could not remove the unrecorded outputs of job %s: %s (retention"
                            " will)", job.name, exc)  # fmt: skip
            return
        if state is not None:
            with log_context(**entry.log_fields()):
                log.info("removed the unrecorded outputs of job %s (%s)", job.name, state)

    def _ended(self, entry: _Running, outcome: str, *, error_code: str = "",
               delay_s: float = 0.0) -> None:
        """Report and log the end of ``entry``'s attempt (once)."""
        if entry.reported:
            return
        entry.reported = True
        duration = entry.ran_s or asyncio.get_running_loop().time() - entry.started
        tracing.end_span(entry.span, outcome=outcome, error_code=error_code,
                         failed=outcome in ("failed", "lost"))
        level = logging.WARNING if outcome in ("failed", "lost") else logging.INFO
        if log.isEnabledFor(level):
            fields = {
                "outcome": outcome,
                "error_code": error_code,
                "duration_s": round(duration, 6),
            }
            if entry.context is not None:  # the attempt's context carries its log fields
                entry.context.run(log.log, level, "job attempt finished: %s", outcome, extra=fields)
            else:
                with log_context(**entry.log_fields()):
                    log.log(level, "job attempt finished: %s", outcome, extra=fields)
        observer = self.observer
        if observer is None:
            return
        event = entry.event()
        if outcome == "succeeded":
            observer.on_complete(event, duration_s=duration)
        elif outcome == "retry_scheduled":
            observer.on_retry_scheduled(event, duration_s=duration, error_code=error_code,
                                        delay_s=delay_s)
        elif outcome == "failed":
            observer.on_fail(event, duration_s=duration, error_code=error_code)
        elif outcome == "cancelled":
            observer.on_cancelled(event, duration_s=duration)
        else:
            observer.on_heartbeat_lost(event)

    def _runs_finished(self, runs: Sequence[FinishedRun]) -> None:
        for run in runs:
            log.info("run %s finished: %s", run.run_id, run.status,
                     extra={"run_status": run.status})
            if self.observer is not None:
                self.observer.on_run_finished(status=run.status,
                                              upload_to_publish_s=run.upload_to_publish_s)

    async def _fail(
        self, entry: _Running, error: AttemptFailure, *, timed_out: bool = False
    ) -> None:
        job = entry.job
        async with self.db.acquire() as conn:
            result = await queue.fail(
                conn,
                job,
                error,
                schedule=self.settings.retry.job_backoff_s,
                u=self._u(),
                timed_out=timed_out,
                dag=self.dag,
                channel=self.channel,
            )
            if result.outcome is Outcome.CANCEL_REQUESTED:
                result = await queue.acknowledge_cancel(
                    conn, job, dag=self.dag, channel=self.channel
                )
        self._runs_finished(result.finished_runs)
        if result.outcome is not Outcome.APPLIED:
            return  # lost: reported when the worker lets go of it
        if result.state is JobState.RETRY_WAIT:
            delay = 0.0
            if result.next_run_at is not None:
                delay = max(0.0, (result.next_run_at - datetime.now(UTC)).total_seconds())
            self._ended(entry, "retry_scheduled", error_code=error.code, delay_s=delay)
        elif result.state is JobState.CANCELLED:
            self._ended(entry, "cancelled")
        else:
            self._ended(entry, "failed", error_code=error.code)

    async def _release_drained(self, entry: _Running) -> None:
        async with self.db.acquire() as conn:
            result = await queue.release(
                conn,
                entry.job,
                max_lost=self.cfg.max_lost,
                drain_s=self.cfg.drain_s,
                dag=self.dag,
                channel=self.channel,
            )
            if result.outcome is Outcome.CANCEL_REQUESTED:
                result = await queue.acknowledge_cancel(
                    conn, entry.job, dag=self.dag, channel=self.channel
                )
        self._runs_finished(result.finished_runs)
        if result.outcome is not Outcome.APPLIED:
            return
        if result.state is JobState.RETRY_WAIT:
            self._ended(entry, "retry_scheduled", error_code=codes.WORKER_DRAINED)
        elif result.state is JobState.CANCELLED:
            self._ended(entry, "cancelled")
        else:
            self._ended(entry, "failed", error_code=codes.WORKER_DRAINED)

    async def _acknowledge(self, entry: _Running) -> None:
        async with self.db.acquire() as conn:
            result = await queue.acknowledge_cancel(
                conn, entry.job, dag=self.dag, channel=self.channel
            )
        self._runs_finished(result.finished_runs)
        if result.outcome is Outcome.APPLIED:
            self._ended(entry, "cancelled")

    async def _guarded(self, work: Awaitable[None]) -> None:
        """Record an outcome; if the database is unreachable the reaper will settle it."""
        try:
            await work
        except (OSError, PgError) as exc:
            log.warning("worker %s: could not record a job outcome: %s", self.id, exc)

    def _u(self) -> float:
        return min(max(self.rand(), 0.0), 0.999999)

    # -- completing ----------------------------------------------------------------------
    async def _flush_loop(self) -> None:
        closing = False
        while not closing:
            first = await self.done.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < _FLUSH_MAX and not self.done.empty():
                item = self.done.get_nowait()
                if item is None:
                    closing = True
                    break
                batch.append(item)
            await self._flush(batch)

    async def _flush(self, batch: list[_Running]) -> None:
        try:
            async with self.db.acquire() as conn:
                completed = await queue.complete_batch(
                    conn,
                    [(e.job, e.result or JobResult()) for e in batch],
                    dag=self.dag,
                    channel=self.channel,
                )
        except Exception as exc:
            if len(batch) > 1:  # isolate the job that broke the batch
                for entry in batch:
                    await self._flush([entry])
                return
            # Recording failed: a refused result (e.g. a dataset name clash) fails the job; if
            # the database is unreachable the failure cannot be recorded either, and the
            # reaper takes the job back once its heartbeats stop.
            await self._guarded(self._fail(batch[0], error_from_exception(exc)))
            self._let_go(batch[0])
            return
        self._runs_finished(completed.finished_runs)
        for entry in batch:
            outcome = completed.outcomes[entry.job.id]
            if outcome is Outcome.APPLIED:
                entry.succeeded = True
                self._ended(entry, "succeeded")
            elif outcome is Outcome.CANCEL_REQUESTED:
                await self._guarded(self._acknowledge(entry))
            self._let_go(entry)

    async def _watchdog_loop(self) -> None:
        """Stop executors at their soft timeout (one timer for all jobs, checked every tick)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(_TICK_S)
            now = loop.time()
            for entry in list(self.running.values()):
                if now >= entry.deadline and not (
                    entry.finishing or entry.timed_out or entry.cancelling or entry.drained
                ):
                    entry.timed_out = True
                    self._stop(entry)

    # -- heartbeats and maintenance ------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        while True:
            # Every heartbeat_s, and at once when a cancel was notified (it reaches the job
            # in milliseconds instead of up to a heartbeat later).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.cfg.heartbeat_s):
                    await self.look.wait()
            self.look.clear()
            entries = list(self.running.values())
            if not entries:
                continue
            try:
                async with self.db.acquire() as conn:
                    held = await queue.heartbeat(
                        conn, worker_id=self.id, jobs=[e.job for e in entries]
                    )
            except (OSError, PgError) as exc:
                log.warning("worker %s: heartbeat failed: %s", self.id, exc)
                continue
            if self.observer is not None:
                self.observer.on_heartbeat(worker_id=self.id, running=len(entries))
            for entry in entries:
                state = held.get(entry.job.id)
                if state is JobState.CANCEL_REQUESTED:
                    if not (entry.finishing or entry.cancelling or entry.timed_out
                            or entry.drained):
                        entry.cancelling = True
                        self._stop(entry)
                elif state is None and not entry.finishing and entry.task is not None:
                    log.warning(
                        "job %s (%s) is no longer held by %s; abandoning it",
                        entry.job.name,
                        entry.job.id,
                        self.id,
                    )
                    entry.abandoned = True
                    self._stop(entry)

    def _reaped(self, reaped_jobs: Sequence[queue.Reaped]) -> None:
        by_type: dict[str, int] = {}
        for reaped in reaped_jobs:
            with log_context(run_id=str(reaped.run_id), job_id=str(reaped.job_id),
                             job_type=reaped.job_type):
                log.warning("reaped job %s from %s: %s -> %s", reaped.name, reaped.worker,
                            reaped.code, reaped.state)
            by_type[reaped.job_type] = by_type.get(reaped.job_type, 0) + 1
            self._runs_finished(reaped.finished_runs)
        if self.observer is not None:
            for job_type, count in by_type.items():
                self.observer.on_reap(job_type=job_type, count=count)

    async def _maintain_loop(self) -> None:
        reap_every = reap_interval(self.cfg.stale_after_s, self.dag)
        loop = asyncio.get_running_loop()
        next_reap = loop.time() + reap_every * self._u()
        while True:
            try:
                async with self.db.acquire() as conn:
                    await queue.promote(conn, channel=self.channel)
                    if loop.time() >= next_reap:
                        next_reap = loop.time() + reap_every
                        reaped_jobs = await queue.reap(
                            conn,
                            stale_after_s=self.cfg.stale_after_s,
                            max_lost=self.cfg.max_lost,
                            schedule=self.settings.retry.job_backoff_s,
                            rand=self._u,
                            dag=self.dag,
                            channel=self.channel,
                        )
                        self._reaped(reaped_jobs)
            except (OSError, PgError) as exc:
                log.warning("worker %s: maintenance failed: %s", self.id, exc)
            await asyncio.sleep(min(self.cfg.poll_interval_s, reap_every))
