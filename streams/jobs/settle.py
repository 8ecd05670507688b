"""What follows a job's terminal transition, inside the same transaction.

- A *critical* job that ends without success stops its run: the run becomes ``failed`` (or
  ``cancelled`` when the job was cancelled), jobs not started are cancelled and running ones
  are asked to stop (spec 000 §7.2: the run can no longer be published).
- An *optional* job that ends without success resolves its dependents (``RESOLVE``): hard
  dependents inherit its reason and are skipped once nothing else is pending, which cascades.
- A run whose ``jobs_open`` reached 0 is finalised: the pure reducer derives its state and
  feature flags from the job outcomes and the content summary ``publish_session`` wrote (the
  run's only flags), and a succeeded or partial run takes the session's active pointer unless
  a newer run already has it.

Every function is given the DAG the runtime runs (:class:`~stages.jobs.graph.Dag`): its
feature table finalises runs, its capability gates skip jobs.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from stages.jobs.gating import Candidate, evaluate
from stages.jobs.graph import Dag
from stages.jobs.job_state import JobState
from stages.jobs.run_state import TERMINAL_RUN, JobOutcome, RunState, reduce_run
from streams.adapters.postgres import Conn
from streams.jobs import sql
from streams.jobs.model import FinishedRun

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Closed:
    """A job that just ended without success; ``reason`` is what its dependents inherit."""

    id: uuid.UUID
    run_id: uuid.UUID
    name: str
    critical: bool
    state: JobState
    reason: str

    @classmethod
    def from_json(cls, item: Mapping[str, Any], state: JobState) -> Closed:
        return cls(
            id=uuid.UUID(str(item["id"])),
            run_id=uuid.UUID(str(item["run_id"])),
            name=item["name"],
            critical=bool(item["critical"]),
            state=state,
            reason=item["reason"],
        )


async def settle(
    conn: Conn,
    *,
    dag: Dag,
    closed: Iterable[Closed] = (),
    finished_runs: Iterable[uuid.UUID] = (),
    now: Any,
    channel: str,
) -> tuple[FinishedRun, ...]:
    """Stop runs, cascade to dependents and finalise runs, until nothing is left to do.

    Returns the runs finalised (for the job observer, once the transaction commits)."""
    finished = set(finished_runs)
    pending = list(closed)
    while pending:
        for job in (j for j in pending if j.critical):
            status = RunState.CANCELLED if job.state is JobState.CANCELLED else RunState.FAILED
            if (
                await stop_run(
                    conn,
                    job.run_id,
                    status=status,
                    reason=f"{job.name}: {job.reason}",
                    job_reason=f"RUN_{status.value.upper()}",
                    now=now,
                    channel=channel,
                )
                == 0
            ):
                finished.add(job.run_id)
        optional = [{"id": str(j.id), "reason": j.reason} for j in pending if not j.critical]
        if not optional:
            break
        row = await conn.fetchrow(sql.RESOLVE, now, optional, channel)
        assert row is not None
        finished.update(row["finished_runs"])
        pending = [Closed.from_json(item, JobState.SKIPPED) for item in row["skipped"]]
    return tuple((await finalise_many(conn, finished, dag=dag, now=now)).values())


async def stop_run(
    conn: Conn,
    run_id: uuid.UUID,
    *,
    status: RunState,
    reason: str | None,
    job_reason: str,
    now: Any,
    channel: str,
) -> int:
    """Cancel what has not started, ask running jobs to stop (waking their workers on
    ``channel``); returns the run's open jobs."""
    row = await conn.fetchrow(sql.STOP_RUN, now, run_id, status.value, reason, job_reason, None)
    if row is None:
        return -1
    if row["requested"]:
        await conn.execute(sql.NOTIFY_STOP, channel)
    return int(row["jobs_open"])


async def finalise(conn: Conn, run_id: uuid.UUID, *, dag: Dag, now: Any) -> RunState | None:
    """Derive the run's final state and flags once every job has ended; move the session."""
    finished = (await finalise_many(conn, [run_id], dag=dag, now=now)).get(run_id)
    return RunState(finished.status) if finished is not None else None


async def finalise_many(
    conn: Conn, run_ids: Iterable[uuid.UUID], *, dag: Dag, now: Any
) -> dict[uuid.UUID, FinishedRun]:
    """Finalise every run of ``run_ids`` whose jobs have all ended (two statements in all)."""
    ids = sorted(set(run_ids))
    if not ids:
        return {}
    verdicts = []
    for run in await conn.fetch(sql.RUN_OUTCOMES, ids):
        if run["jobs_open"] != 0:
            continue
        outcomes = [
            JobOutcome(
                name=j["name"],
                job_type=j["job_type"],
                critical=j["critical"],
                state=JobState(j["state"]),
                skip_reason=j["skip_reason"],
                error_code=j["error_code"],
            )
            for j in run["jobs"] or []
        ]
        verdict = reduce_run(
            outcomes,
            cancelled=run["status"] == RunState.CANCELLED,
            features=dag.features,
            content=run["content"],  # publish_session's summary of what the content offers
        )
        if verdict.state not in TERMINAL_RUN:
            # jobs_open says every job ended but the jobs disagree: never finalise on a guess.
            log.error("run %s: jobs_open is 0 but the reducer says %s", run["id"], verdict.state)
            continue
        counts: dict[str, int] = {}
        for outcome in outcomes:
            counts[outcome.state.value] = counts.get(outcome.state.value, 0) + 1
        verdicts.append(
            {
                "id": str(run["id"]),
                "status": verdict.state.value,
                "failure_reason": verdict.failure_reason,
                "features_available": dict(verdict.features_available),
                "feature_reasons": dict(verdict.feature_reasons),
                "summary": {"jobs": counts},
            }
        )
    if not verdicts:
        return {}
    rows = await conn.fetch(sql.FINALISE_RUNS, now, verdicts)
    return {
        row["id"]: FinishedRun(run_id=row["id"], status=row["status"],
                               upload_to_publish_s=row["upload_to_publish_s"])
        for row in rows
    }


async def apply_gating(
    conn: Conn,
    *,
    dag: Dag,
    run_id: uuid.UUID,
    reporter: str,
    capabilities: Mapping[str, Any],
    now: Any,
) -> tuple[list[Closed], bool]:
    """Skip optional jobs that ``capabilities`` rule out; returns them and whether the run ended."""
    rows = await conn.fetch(sql.GATE_CANDIDATES, run_id)
    candidates = [Candidate(name=r["name"], job_type=r["job_type"]) for r in rows]
    decisions = evaluate(candidates, capabilities=capabilities, gates=dag.gates)
    if not decisions:
        return [], False
    ids = {r["name"]: r["id"] for r in rows}
    items = [{"id": str(ids[d.job]), "reason": d.reason} for d in decisions]
    record = [{**d.as_json(), "reported_by": reporter} for d in decisions]
    row = await conn.fetchrow(sql.GATE, now, run_id, items, record)
    assert row is not None
    names = {ids[d.job]: d.job for d in decisions}
    skipped = [
        Closed(
            id=uuid.UUID(str(item["id"])),
            run_id=run_id,
            name=names[uuid.UUID(str(item["id"]))],
            critical=False,
            state=JobState.SKIPPED,
            reason=item["reason"],
        )
        for item in row["skipped"]
    ]
    return skipped, row["jobs_open"] == 0
