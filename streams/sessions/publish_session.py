"""publish_session: the run's summary for the UI, and what its content actually offers.

``publish_session`` is the last job of a run and only runs when every required job succeeded.
It first runs the run's health check (``streams.sessions.verify``: every dataset read back and
hash-checked, every materialised dataset's ClickHouse rows counted); a run that fails it fails
here with ``RUN_VERIFICATION_FAILED`` and never takes the session's pointer. It then gathers
the upstream summaries - each read as the typed model its job declares in the DAG
(:mod:`stages.jobs.summaries`), never by job name and key - into one run summary (stored in
``processing_runs.summary``): the file format, the streams and their sizes, the time range,
laps (count, best lap), segments (corners, straights, jumps), fusion health, the materialised
ClickHouse tables and the datasets. The engine then finalises the run in the same
completion transaction and - the run having ended succeeded or partial - moves the session's
active pointer to it and marks the session query-ready (blue/green, ``reprocess``); the
pointer's move writes ``session.published`` in that transaction (:mod:`streams.domain_events`),
so no event announces a run whose completion was then refused.

Job states say whether a feature's job *ran*; the content says whether it *found* anything. A
lap detector that succeeds on a road that never closes found no laps (``TRACK_NOT_CLOSED``).
The summary's ``features`` map records that second view per feature
(``{"laps": {"available": false, "reason": "TRACK_NOT_CLOSED"}}``), and the run reducer
(``stages.jobs.run_state.reduce_run``, when the engine finalises the run) combines both: a
feature is available only when its job succeeded *and* its content is there. The run stores
that one answer; every reader shows it as stored.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import orjson

from stages.jobs import summaries as out
from stages.jobs.drift import DriftLimits, compare
from stages.jobs.graph import Dag
from streams.clickhouse import ClickHouse
from streams.jobs.executor import Executor, JobContext
from streams.jobs.model import JobResult
from streams.sessions.executor_resources import ExecutorResources
from streams.sessions.verify import DatasetToCheck, VerificationFailed, verify_run

__all__ = ["publish_executor", "run_summary"]

S = TypeVar("S", bound=out.Summary)

_SET_SUMMARY: Final = """
UPDATE processing_runs SET summary = summary || $2::jsonb, updated_at = now() WHERE id = $1
"""

def run_summary(ctx: JobContext, dag: Dag) -> dict[str, Any]:
    """The run summary from the upstream summaries and datasets of ``ctx``, each summary read
    as the model its job declares in ``dag``."""

    def read(model: type[S]) -> S:
        return dag.summary(model, ctx.summaries)

    parsed, metrics = read(out.ParseSummary), read(out.MetricsSummary)
    indexes, segs = read(out.IndexesSummary), read(out.SegmentsSummary)
    quality = read(out.FusionQualitySummary)
    return {
        "session_id": str(ctx.session_id),
        "format": read(out.ClassifySummary).format,
        "streams": parsed.rows,
        "capabilities": parsed.capabilities,
        "time_range": {
            "start": indexes.session_start,
            "end": indexes.session_end,
            "t0_us": read(out.TimelineSummary).t0_us,
        },
        "laps": {
            "count": read(out.LapsSummary).lap_count,
            "best_lap": metrics.best_lap,
            "best_lap_time_s": metrics.best_lap_time_s,
            "mean_lap_time_s": metrics.mean_lap_time_s,
            "median_lap_time_s": metrics.median_lap_time_s,
            "max_speed_mps": metrics.max_speed_mps,
        },
        "distance_m": metrics.distance_m,
        "segments": {
            "corners": segs.corner_count,
            "straights": segs.straight_count,
            "jumps": segs.jump_count,
        },
        "fusion": {
            "healthy": quality.healthy,
            "flags": quality.flags,
        },
        "materialised": read(out.MaterialiseSummary).tables,
        "datasets": {d.name: d.row_count for d in ctx.datasets.values()},
        "features": dag.content_features(ctx.summaries),
    }


# The run's session's active run, when this run would replace it: a reprocess, backfill or
# retry (an upload's run has an idempotency key), of a session some other run is active for.
_ACTIVE = """
SELECT a.id, a.summary FROM processing_runs r
JOIN sessions s ON s.id = r.session_id
JOIN processing_runs a ON a.id = s.active_run_id
WHERE r.id = $1 AND r.idempotency_key IS NULL AND a.id <> r.id
"""


async def _drift_against_active(pool: Any, run_id: Any, summary: dict[str, Any],
                                settings: Any) -> dict[str, Any] | None:
    """The drift gate's report on this run against the session's active run (``None``: not
    gated). An exceeded report keeps the engine from moving the session's pointer
    (``FINALISE_RUNS``); the run still ends succeeded, and an operator may promote it."""
    if not settings.drift.enabled:
        return None
    active = await pool.fetchrow(_ACTIVE, run_id)
    if active is None or not active["summary"]:
        return None
    before = active["summary"]
    if isinstance(before, str | bytes):
        before = orjson.loads(before)
    limits = settings.drift
    report = compare(before, summary, DriftLimits(
        max_lap_count_change=limits.max_lap_count_change,
        max_lap_time_change=limits.max_lap_time_change,
        max_distance_change=limits.max_distance_change,
        max_speed_change=limits.max_speed_change,
        max_sample_change=limits.max_sample_change))
    return {**report, "against_run": str(active["id"])}


def publish_executor(executors: ExecutorResources) -> Executor:
    """The ``publish_session`` executor: check the run, then write its summary (the engine then
    points the session at it)."""

    settings = executors.settings

    async def execute(ctx: JobContext, /) -> JobResult:
        ctx.checkpoint()
        pool = await executors.db()
        report = await verify_run(
            ClickHouse(settings.clickhouse(), settings.clickhouse_database),
            executors.store,
            session_id=str(ctx.session_id),
            run_id=str(ctx.job.run_id),
            datasets=[
                DatasetToCheck(
                    name=d.name, url=d.storage_url, sha256=d.content_hash, rows=d.row_count or 0
                )
                for d in ctx.datasets.values()
            ],
        )
        if not report.ok:
            await pool.execute(_SET_SUMMARY, ctx.job.run_id, {"verification": report.as_json()})
            raise VerificationFailed(report)
        ctx.checkpoint()
        summary = {**run_summary(ctx, executors.dag), "verification": report.as_json()}
        drift = await _drift_against_active(pool, ctx.job.run_id, summary, settings)
        if drift is not None:
            summary["drift"] = drift
        await pool.execute(_SET_SUMMARY, ctx.job.run_id, summary)
        return JobResult(summary=summary)

    return execute
