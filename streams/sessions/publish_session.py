"""publish_session: the run's summary for the UI, and what its content actually offers.

``publish_session`` is the last job of a run and only runs when every required job succeeded.
It first runs the run's health check (``streams.sessions.verify``: every dataset read back and
hash-checked, every materialised dataset's ClickHouse rows counted); a run that fails it fails
here with ``RUN_VERIFICATION_FAILED`` and never takes the session's pointer. It then gathers
the upstream summaries into one run summary (stored in
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

from collections.abc import Mapping
from typing import Any, Final

from streams.clickhouse import ClickHouse
from streams.jobs.executor import Executor, JobContext
from streams.jobs.model import JobResult
from streams.sessions.executor_resources import ExecutorResources
from streams.sessions.verify import DatasetToCheck, VerificationFailed, verify_run

__all__ = ["content_features", "publish_executor", "run_summary"]

_SET_SUMMARY: Final = """
UPDATE processing_runs SET summary = summary || $2::jsonb, updated_at = now() WHERE id = $1
"""

# feature -> (job, summary flag saying the content is there, summary key with the reason,
#             the reason when the summary gives none)
_CONTENT: Final = {
    "laps": ("detect_laps", "laps_available", "reason", "NO_LAPS"),
    "segments": ("detect_segments", "segments_available", "reason", "NO_SEGMENTS"),
    "jumps": ("detect_segments", "jumps_available", "jumps_reason", "NO_JUMPS"),
    "lap_compare": ("compute_metrics", "lap_compare_available", None, "FEWER_THAN_2_VALID_LAPS"),
}


def content_features(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per feature: is its content there (from the summaries of jobs that ran), and why not."""
    out: dict[str, dict[str, Any]] = {}
    for feature, (job, flag, why, fallback) in _CONTENT.items():
        s = summaries.get(job)
        if s is None or flag not in s:
            continue
        available = bool(s[flag])
        reason = None if available else (s.get(why) if why else None) or fallback
        out[feature] = {"available": available, "reason": reason}
    fusion = summaries.get("fuse_gnss_imu")
    if fusion is not None:
        skipped = bool(fusion.get("skipped"))
        out["fusion"] = {
            "available": not skipped,
            "reason": fusion.get("reason") if skipped else None,
            "degraded": bool(fusion.get("degraded")),
        }
    return out


def run_summary(ctx: JobContext) -> dict[str, Any]:
    """The run summary from the upstream summaries and datasets of ``ctx``."""
    s = ctx.summaries
    classify, parsed = s.get("artifact_classify", {}), s.get("parse_raw", {})
    laps, metrics = s.get("detect_laps", {}), s.get("compute_metrics", {})
    segs, quality = s.get("detect_segments", {}), s.get("fuse_quality_summary", {})
    indexes, aligned = s.get("build_indexes", {}), s.get("time_align", {})
    return {
        "session_id": str(ctx.session_id),
        "format": classify.get("format"),
        "streams": parsed.get("rows"),
        "capabilities": parsed.get("capabilities"),
        "time_range": {
            "start": indexes.get("session_start"),
            "end": indexes.get("session_end"),
            "t0_us": aligned.get("t0_us"),
        },
        "laps": {
            "count": laps.get("lap_count"),
            "best_lap": metrics.get("best_lap"),
            "best_lap_time_s": metrics.get("best_lap_time_s"),
            "mean_lap_time_s": metrics.get("mean_lap_time_s"),
            "max_speed_mps": metrics.get("max_speed_mps"),
        },
        "segments": {
            "corners": segs.get("corner_count"),
            "straights": segs.get("straight_count"),
            "jumps": segs.get("jump_count"),
        },
        "fusion": {
            "healthy": quality.get("healthy"),
            "flags": quality.get("flags"),
        },
        "materialised": s.get("materialise_clickhouse", {}).get("tables", {}),
        "datasets": {d.name: d.row_count for d in ctx.datasets.values()},
        "features": content_features(s),
    }


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
        summary = {**run_summary(ctx), "verification": report.as_json()}
        await pool.execute(_SET_SUMMARY, ctx.job.run_id, summary)
        return JobResult(summary=summary)

    return execute
