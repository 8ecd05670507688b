"""Queue semantics against a real Postgres: claim order, limits, chaining, retries, reaping."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import asyncpg
import pytest

from stages.jobs.dag import DEFAULT_DAG, Dep, JobSpec
from stages.jobs.errors import ErrorSource, describe
from streams.adapters import postgres
from streams.jobs import queue
from streams.jobs.model import DatasetRecord, JobResult, Outcome
from tests.integration.jobs.conftest import CH, Owner, job_states, make_owner, start_run

NOOP = {"noop": JobSpec(name="noop")}
T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
TRANSIENT = describe(
    "STORAGE_UNAVAILABLE", "object store timed out", retriable=True, source=ErrorSource.STORAGE
)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


async def claim(
    conn: asyncpg.Connection,
    worker: str = "w1",
    *,
    limit: int = 10,
    tenant: int = 64,
    heavy: int = 8,
    now: dt.datetime | None = None,
    **kw: object,
) -> list[queue.ClaimedJob]:
    return await queue.claim(
        conn,
        worker_id=worker,
        limit=limit,
        tenant_max_running=tenant,
        heavy_max_running=heavy,
        now=now,
        **kw,
    )  # type: ignore[arg-type]


async def test_claim_takes_priority_first_then_oldest(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    old = await start_run(conn, owner, dag=NOOP)
    await asyncio.sleep(0.01)
    urgent = await start_run(conn, owner, dag=NOOP, priority=5)
    await asyncio.sleep(0.01)
    young = await start_run(conn, owner, dag=NOOP)
    first = await claim(conn, limit=1)
    rest = await claim(conn, limit=5)
    assert [j.run_id for j in first + rest] == [urgent, old, young]
    assert first[0].priority == 5 and first[0].attempt == 1
    status = await conn.fetchval("SELECT status FROM processing_runs WHERE id = $1", old)
    assert status == "running"


async def test_per_tenant_running_limit(conn: asyncpg.Connection, owner: Owner) -> None:
    other = await make_owner(conn, "globex")
    for _ in range(5):
        await start_run(conn, owner, dag=NOOP)
    for _ in range(2):
        await start_run(conn, other, dag=NOOP)
    got = await claim(conn, tenant=2)
    assert sorted(j.tenant_id == owner.tenant_id for j in got) == [False, False, True, True]
    assert await claim(conn, tenant=2) == []
    mine = next(j for j in got if j.tenant_id == owner.tenant_id)
    assert (
        await queue.complete(conn, mine, JobResult(), channel=CH, dag=DEFAULT_DAG)
        is Outcome.APPLIED
    )
    [next_one] = await claim(conn, tenant=2)
    assert next_one.tenant_id == owner.tenant_id


async def test_concurrent_claims_never_exceed_the_tenant_limit(
    pg_dsn: str, conn: asyncpg.Connection, owner: Owner
) -> None:
    for _ in range(30):
        await start_run(conn, owner, dag=NOOP)
    conns = [await postgres.connect(pg_dsn) for _ in range(8)]
    try:
        batches = await asyncio.gather(
            *(claim(c, f"w{i}", limit=3, tenant=5) for i, c in enumerate(conns))
        )
    finally:
        for c in conns:
            await c.close()
    claimed = [j.id for batch in batches for j in batch]
    assert len(claimed) == len(set(claimed)) == 5
    assert await conn.fetchval("SELECT count(*) FROM jobs WHERE state = 'running'") == 5


async def test_global_heavy_limit_and_pools(conn: asyncpg.Connection, owner: Owner) -> None:
    dag = {
        "fuse": JobSpec(name="fuse", pool="heavy", heavy=True),
        "light": JobSpec(name="light", pool="io"),
    }
    for _ in range(3):
        await start_run(conn, owner, dag=dag)
    io_only = await claim(conn, pools=["io"])
    assert [j.name for j in io_only] == ["light"] * 3
    heavy = await claim(conn, heavy=2)
    assert [j.name for j in heavy] == ["fuse", "fuse"]
    assert await claim(conn, heavy=2) == []
    await queue.complete(conn, heavy[0], JobResult(), channel=CH, dag=DEFAULT_DAG)
    assert [j.name for j in await claim(conn, heavy=2)] == ["fuse"]


async def test_claim_only_takes_types_the_worker_can_run(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    await start_run(conn, owner, dag={"a": JobSpec(name="a"), "b": JobSpec(name="b")})
    assert [j.name for j in await claim(conn, job_types=["b"])] == ["b"]
    assert await claim(conn, job_types=["zzz"]) == []


async def test_complete_records_everything_and_releases_dependents(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    dag = {
        "a": JobSpec(name="a"),
        "b": JobSpec(name="b"),
        "c": JobSpec(name="c", deps=(Dep(on="a"), Dep(on="b", hard=False))),
    }
    run_id = await start_run(conn, owner, dag=dag)
    a, b = sorted(await claim(conn), key=lambda j: j.name)
    result = JobResult(
        summary={"rows": 3},
        idempotency_key="k" * 64,
        metrics={"rows_written": 3},
        datasets=[
            DatasetRecord(
                name="gnss",
                storage_url="file:///d/gnss.parquet",
                content_hash="c" * 64,
                schema_version="s1",
                row_count=3,
                stats={"hz": 10},
            )
        ],
    )
    assert (
        await queue.complete(conn, a, result, now=at(5), channel=CH, dag=DEFAULT_DAG)
        is Outcome.APPLIED
    )
    assert (await job_states(conn, run_id))["c"] == "created"  # still waits for b
    assert (
        await queue.complete(conn, b, JobResult(), channel=CH, dag=DEFAULT_DAG)
        is Outcome.APPLIED
    )
    assert (await job_states(conn, run_id))["c"] == "queued"
    row = await conn.fetchrow("SELECT * FROM jobs WHERE id = $1", a.id)
    assert row["state"] == "succeeded" and row["output"] == {"rows": 3}
    assert row["idempotency_key"] == "k" * 64
    attempt = await conn.fetchrow("SELECT * FROM job_attempts WHERE job_id = $1", a.id)
    assert attempt["status"] == "succeeded" and attempt["attempt_number"] == 1
    assert attempt["worker_id"] == "w1" and attempt["metrics"]["rows_written"] == 3
    assert attempt["metrics"]["duration_s"] >= 0
    ds = await conn.fetchrow("SELECT * FROM derived_datasets WHERE run_id = $1", run_id)
    assert (ds["name"], ds["job_id"], ds["row_count"]) == ("gnss", a.id, 3)
    [ctx] = await queue.claim_contexts(
        conn, worker_id="w1", limit=10, tenant_max_running=9, heavy_max_running=1
    )
    c = ctx.job
    assert set(ctx.datasets) == {"gnss"} and ctx.summaries["a"] == {"rows": 3}
    assert ctx.artifacts[0].id == owner.artifact_id
    assert ctx.input_hashes == tuple(sorted([ctx.artifacts[0].sha256, "c" * 64]))
    assert (
        await queue.complete(conn, c, JobResult(), channel=CH, dag=DEFAULT_DAG)
        is Outcome.APPLIED
    )
    run = await conn.fetchrow("SELECT * FROM processing_runs WHERE id = $1", run_id)
    assert run["status"] == "succeeded" and run["jobs_open"] == 0
    assert run["completed_at"] is not None and run["summary"]["jobs"] == {"succeeded": 3}


async def test_datasets_are_immutable(conn: asyncpg.Connection, owner: Owner) -> None:
    run_id = await start_run(conn, owner, dag=NOOP)
    [job] = await claim(conn)
    await queue.complete(
        conn,
        job,
        JobResult(
            datasets=[
                DatasetRecord(
                    name="x", storage_url="file:///x", content_hash="h", schema_version="1"
                )
            ]
        ),
        channel=CH,
        dag=DEFAULT_DAG,
    )
    with pytest.raises(asyncpg.exceptions.CheckViolationError, match="immutable"):
        await conn.execute(
            "UPDATE derived_datasets SET storage_url = 'file:///y' WHERE run_id = $1", run_id
        )


async def test_transient_failure_waits_then_succeeds(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    run_id = await start_run(conn, owner, dag=NOOP)
    [job] = await claim(conn, now=at(0))
    failed = await queue.fail(
        conn, job, TRANSIENT, schedule=(30.0, 120.0), u=0.5, now=at(1), channel=CH, dag=DEFAULT_DAG
    )
    assert failed.outcome is Outcome.APPLIED and failed.state == "retry_wait"
    row = await conn.fetchrow("SELECT * FROM jobs WHERE id = $1", job.id)
    assert row["next_run_at"] == at(1 + 30 * 0.9)
    assert row["last_error_code"] == "STORAGE_UNAVAILABLE"
    assert await queue.promote(conn, now=at(20), channel=CH) == 0
    assert await claim(conn, now=at(20)) == []
    assert await queue.promote(conn, now=at(40), channel=CH) == 1
    [again] = await claim(conn, now=at(41))
    assert again.id == job.id and again.attempt == 2
    assert (
        await queue.complete(conn, again, JobResult(), now=at(42), channel=CH, dag=DEFAULT_DAG)
        is Outcome.APPLIED
    )
    attempts = await conn.fetch(
        "SELECT * FROM job_attempts WHERE job_id = $1 ORDER BY attempt_number", job.id
    )
    assert [(a["attempt_number"], a["status"]) for a in attempts] == [
        (1, "failed"),
        (2, "succeeded"),
    ]
    first = attempts[0]
    assert (
        first["error_type"],
        first["error_source"],
        first["error_sub_type"],
        first["error_severity"],
    ) == ("transient_error", "storage", "STORAGE_UNAVAILABLE", 2)
    assert first["metrics"]["duration_s"] == 1.0
    assert await conn.fetchval("SELECT status FROM processing_runs WHERE id=$1", run_id) == (
        "succeeded"
    )


async def test_retries_stop_after_max_attempts(conn: asyncpg.Connection, owner: Owner) -> None:
    run_id = await start_run(conn, owner, dag={"noop": JobSpec(name="noop")})
    for attempt in (1, 2, 3):
        await queue.promote(conn, now=at(attempt * 1000), channel=CH)
        [job] = await claim(conn, now=at(attempt * 1000))
        assert job.attempt == attempt
        out = await queue.fail(
            conn, job, TRANSIENT, dag=DEFAULT_DAG, schedule=(1.0,), u=0.0, now=at(attempt * 1000),
            channel=CH,
        )
        assert out.state == ("failed" if attempt == 3 else "retry_wait")
    run = await conn.fetchrow("SELECT * FROM processing_runs WHERE id = $1", run_id)
    assert run["status"] == "failed" and run["failure_reason"] == "noop: NOOP_FAILED"
    severity = await conn.fetchval(
        "SELECT error_severity FROM job_attempts WHERE attempt_number = 3"
    )
    assert severity == 3  # transient (2), one higher because it lost a critical job


async def test_non_retriable_critical_failure_fails_the_run_and_stops_the_rest(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    run_id = await start_run(conn, owner)
    bad = describe("UNSUPPORTED_FORMAT", "not NMEA", retriable=False, source=ErrorSource.STAGE)
    order = await drive_with(conn, {"parse_raw": bad})
    assert order == ["artifact_validate", "artifact_classify", "parse_raw"]
    states = await job_states(conn, run_id)
    assert states["parse_raw"] == "failed"
    assert {states[n] for n in states if n not in order} == {"cancelled"}
    reasons = await conn.fetch(
        "SELECT DISTINCT skip_reason FROM jobs WHERE run_id = $1 AND state = 'cancelled'", run_id
    )
    assert [r["skip_reason"] for r in reasons] == ["RUN_FAILED"]
    run = await conn.fetchrow("SELECT * FROM processing_runs WHERE id = $1", run_id)
    assert run["status"] == "failed" and run["failure_reason"] == "parse_raw: PARSE_RAW_FAILED"
    assert run["completed_at"] is not None and run["jobs_open"] == 0
    session = await conn.fetchrow("SELECT * FROM sessions WHERE id = $1", owner.session_id)
    assert session["status"] == "failed" and session["active_run_id"] is None


async def drive_with(conn: asyncpg.Connection, behaviours: dict[str, object]) -> list[str]:
    from tests.integration.jobs.helpers import drive

    return await drive(conn, behaviours)


async def test_partial_success_when_lap_detection_fails(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    run_id = await start_run(conn, owner)
    broken = describe(
        "NO_START_LINE", "no start/finish crossing", retriable=False, source=ErrorSource.STAGE
    )
    order = await drive_with(conn, {"detect_laps": broken})
    states = await job_states(conn, run_id)
    assert states["detect_laps"] == "failed"
    assert states["detect_segments"] == states["compute_metrics"] == "skipped"
    for name in ("build_indexes", "materialise_clickhouse", "publish_session"):
        assert states[name] == "succeeded", name
    assert order.index("build_indexes") > order.index("detect_laps")  # waited softly
    skip = await conn.fetchval(
        "SELECT skip_reason FROM jobs WHERE run_id = $1 AND name = 'compute_metrics'", run_id
    )
    assert skip == "LAP_DETECTION_FAILED"
    run = await conn.fetchrow("SELECT * FROM processing_runs WHERE id = $1", run_id)
    assert run["status"] == "partial"
    assert run["features_available"]["laps"] is False
    assert run["features_available"]["fusion"] is True
    assert run["feature_reasons"] == {
        "laps": "LAP_DETECTION_FAILED",
        "segments": "LAP_DETECTION_FAILED",
        "lap_compare": "LAP_DETECTION_FAILED",
    }
    pointer = await conn.fetchval(
        "SELECT active_run_id FROM sessions WHERE id = $1", owner.session_id
    )
    assert pointer == run_id


async def test_capabilities_from_upstream_gate_fusion(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    run_id = await start_run(conn, owner)
    order = await drive_with(
        conn, {"parse_raw": JobResult(summary={"capabilities": {"imu": False, "gnss": True}})}
    )
    assert "fuse_gnss_imu" not in order and "fuse_quality_summary" not in order
    rows = await conn.fetch(
        "SELECT name, state, skip_reason FROM jobs WHERE run_id = $1 AND name LIKE 'fuse%'", run_id
    )
    assert {(r["name"], r["state"], r["skip_reason"]) for r in rows} == {
        ("fuse_gnss_imu", "skipped", "NO_IMU_STREAM"),
        ("fuse_quality_summary", "skipped", "NO_IMU_STREAM"),
    }
    run = await conn.fetchrow("SELECT * FROM processing_runs WHERE id = $1", run_id)
    assert run["status"] == "succeeded"
    assert run["feature_reasons"] == {"fusion": "NO_IMU_STREAM", "fusion_quality": "NO_IMU_STREAM"}
    assert run["gating"] == [
        {
            "job": "fuse_gnss_imu",
            "reason": "NO_IMU_STREAM",
            "source": "capabilities",
            "detail": "no IMU stream in the session",
            "reported_by": "parse_raw",
        }
    ]


async def test_a_reaped_attempt_can_never_complete(conn: asyncpg.Connection, owner: Owner) -> None:
    run_id = await start_run(conn, owner, dag=NOOP)
    [zombie] = await claim(conn, "w-old", now=at(0))
    reaped = await queue.reap(
        conn,
        stale_after_s=60,
        schedule=(5.0,),
        rand=lambda: 0.0,
        now=at(30),
        channel=CH,
        dag=DEFAULT_DAG,
    )
    assert reaped == []  # heartbeat still fresh
    [r] = await queue.reap(
        conn, dag=DEFAULT_DAG, stale_after_s=60, schedule=(5.0,), rand=lambda: 0.0,
        now=at(61), channel=CH,
    )
    assert (r.job_id, r.previous, r.state, r.code) == (
        zombie.id,
        "running",
        "retry_wait",
        "WORKER_LOST",
    )
    record = DatasetRecord(
        name="out", storage_url="file:///o", content_hash="h", schema_version="1"
    )
    assert (
        await queue.complete(
            conn, zombie, JobResult(datasets=[record]), channel=CH, dag=DEFAULT_DAG
        )
        is Outcome.LOST
    )
    assert (
        await queue.fail(
            conn, zombie, TRANSIENT, dag=DEFAULT_DAG, schedule=(1.0,), u=0.0, channel=CH
        )
    ).outcome is (Outcome.LOST)
    await queue.promote(conn, now=at(70), channel=CH)
    [fresh] = await claim(conn, "w-new", now=at(70))
    assert fresh.attempt == 2
    # Even after the new claim the zombie's attempt number does not match.
    assert (
        await queue.complete(
            conn, zombie, JobResult(datasets=[record]), dag=DEFAULT_DAG, channel=CH
        )
        is Outcome.LOST
    )
    assert (
        await queue.complete(conn, fresh, JobResult(datasets=[record]), channel=CH, dag=DEFAULT_DAG)
        is Outcome.APPLIED
    )
    assert (
        await conn.fetchval("SELECT count(*) FROM derived_datasets WHERE run_id = $1", run_id) == 1
    )
    statuses = await conn.fetch(
        "SELECT attempt_number, status, error_sub_type, worker_id "
        "FROM job_attempts ORDER BY attempt_number"
    )
    assert [tuple(s) for s in statuses] == [
        (1, "failed", "WORKER_LOST", "w-old"),
        (2, "succeeded", None, "w-new"),
    ]


async def test_the_reaper_never_touches_a_completed_job(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    await start_run(conn, owner, dag=NOOP)
    [job] = await claim(conn, now=at(0))
    await queue.complete(conn, job, JobResult(), now=at(1), channel=CH, dag=DEFAULT_DAG)
    assert (
        await queue.reap(
            conn, dag=DEFAULT_DAG, stale_after_s=1, schedule=(1.0,), rand=lambda: 0.0,
            now=at(3600), channel=CH,
        )
        == []
    )
    assert await conn.fetchval("SELECT state FROM jobs WHERE id = $1", job.id) == "succeeded"


async def test_hard_timeout_is_reaped_despite_heartbeats(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    dag = {"slow": JobSpec(name="slow", soft_timeout_s=5, hard_timeout_s=10, critical=False)}
    run_id = await start_run(conn, owner, dag=dag)
    [job] = await claim(conn, now=at(0))
    held = await queue.heartbeat(conn, worker_id="w1", jobs=[job], now=at(9))
    assert held == {job.id: "running"}
    [r] = await queue.reap(
        conn, dag=DEFAULT_DAG, stale_after_s=600, schedule=(5.0,), rand=lambda: 0.0,
        now=at(11), channel=CH,
    )
    assert r.code == "HARD_TIMEOUT" and r.state == "retry_wait"
    assert await queue.heartbeat(conn, worker_id="w1", jobs=[job], now=at(12)) == {}
    status = await conn.fetchval("SELECT status FROM job_attempts WHERE job_id = $1", job.id)
    assert status == "timed_out"
    assert run_id


async def test_cancelling_a_run_mid_flight(conn: asyncpg.Connection, owner: Owner) -> None:
    dag = {
        "a": JobSpec(name="a"),
        "b": JobSpec(name="b", deps=(Dep(on="a"),)),
        "c": JobSpec(name="c", critical=False),
    }
    run_id = await start_run(conn, owner, dag=dag)
    [a] = await claim(conn, job_types=["a"])
    summary = await queue.cancel_run(conn, run_id, dag=DEFAULT_DAG)
    assert (summary.cancelled, summary.requested, summary.status) == (2, 1, "cancelled")
    assert await job_states(conn, run_id) == {
        "a": "cancel_requested",
        "b": "cancelled",
        "c": "cancelled",
    }
    assert await queue.cancel_requested(conn, a.id)
    run = await conn.fetchrow("SELECT * FROM processing_runs WHERE id = $1", run_id)
    assert run["status"] == "cancelled" and run["completed_at"] is None
    # The worker finished anyway: the result is refused and the cancel must be acknowledged.
    assert (
        await queue.complete(conn, a, JobResult(), channel=CH, dag=DEFAULT_DAG)
        is Outcome.CANCEL_REQUESTED
    )
    ack = await queue.acknowledge_cancel(conn, a, channel=CH, dag=DEFAULT_DAG)
    assert ack.outcome is Outcome.APPLIED and ack.state == "cancelled"
    run = await conn.fetchrow("SELECT * FROM processing_runs WHERE id = $1", run_id)
    assert run["status"] == "cancelled" and run["completed_at"] is not None
    attempt = await conn.fetchrow("SELECT status, error_sub_type FROM job_attempts")
    assert tuple(attempt) == ("cancelled", "CANCELLED")
    assert await claim(conn) == []


async def test_cancelling_one_optional_job_skips_its_hard_dependents(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    run_id = await start_run(conn, owner)
    ids = {
        r["name"]: r["id"]
        for r in await conn.fetch("SELECT name, id FROM jobs WHERE run_id = $1", run_id)
    }
    assert (
        await queue.cancel_job(conn, ids["detect_laps"], channel=CH, dag=DEFAULT_DAG)
        == "cancelled"
    )
    await drive_with(conn, {})
    states = await job_states(conn, run_id)
    assert states["detect_segments"] == states["compute_metrics"] == "skipped"
    run = await conn.fetchrow("SELECT * FROM processing_runs WHERE id = $1", run_id)
    assert run["status"] == "partial" and run["feature_reasons"]["laps"] == "CANCELLED"
    assert run["feature_reasons"]["lap_compare"] == "CANCELLED"


async def test_cancelling_a_critical_job_cancels_the_run(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    run_id = await start_run(conn, owner)
    job_id = await conn.fetchval(
        "SELECT id FROM jobs WHERE run_id = $1 AND name = 'publish_session'", run_id
    )
    assert await queue.cancel_job(conn, job_id, channel=CH, dag=DEFAULT_DAG) == "cancelled"
    run = await conn.fetchrow("SELECT * FROM processing_runs WHERE id = $1", run_id)
    assert run["status"] == "cancelled" and run["completed_at"] is not None
    assert set((await job_states(conn, run_id)).values()) == {"cancelled"}
    with pytest.raises(Exception, match="no job"):
        await queue.cancel_job(conn, uuid.uuid4(), channel=CH, dag=DEFAULT_DAG)


async def test_enqueue_is_idempotent_on_its_key(conn: asyncpg.Connection, owner: Owner) -> None:
    first = await start_run(conn, owner, key="upload-1")
    again = await start_run(conn, owner, key="upload-1")
    assert first == again
    assert await conn.fetchval("SELECT count(*) FROM processing_runs") == 1
    assert await conn.fetchval("SELECT count(*) FROM jobs") == 16


async def test_session_pointer_is_blue_green(conn: asyncpg.Connection, owner: Owner) -> None:
    older = await start_run(conn, owner, dag=NOOP)
    [older_job] = await claim(conn)
    newer = await start_run(conn, owner, dag=NOOP)
    [newer_job] = await claim(conn)
    await queue.complete(conn, newer_job, JobResult(), channel=CH, dag=DEFAULT_DAG)
    await queue.complete(
        conn, older_job, JobResult(), channel=CH, dag=DEFAULT_DAG
    )  # finishes late: must not take over
    pointer = "SELECT active_run_id FROM sessions WHERE id = $1"
    assert await conn.fetchval(pointer, owner.session_id) == newer
    failing = await start_run(conn, owner, dag=NOOP)
    [job] = await claim(conn)
    bad = describe("X", "x", retriable=False, source=ErrorSource.STAGE)
    await queue.fail(conn, job, bad, schedule=(1.0,), u=0.0, channel=CH, dag=DEFAULT_DAG)
    assert await conn.fetchval("SELECT status FROM processing_runs WHERE id=$1", failing) == (
        "failed"
    )
    assert await conn.fetchval(pointer, owner.session_id) == newer
    assert older != newer


async def test_retry_makes_a_new_linked_run(conn: asyncpg.Connection, owner: Owner) -> None:
    run_id = await start_run(conn, owner, config={"skip_fusion": True})
    bad = describe("UNSUPPORTED_FORMAT", "x", retriable=False, source=ErrorSource.STAGE)
    await drive_with(conn, {"parse_raw": bad})
    again = await queue.retry_run(conn, run_id, requested_by="alice", channel=CH, dag=DEFAULT_DAG)
    assert again.created
    row = await conn.fetchrow("SELECT * FROM processing_runs WHERE id = $1", again.run_id)
    assert row["retry_of"] == run_id and row["requested_by"] == "alice"
    assert row["config"] == {"skip_fusion": True} and row["status"] == "pending"
    await drive_with(conn, {})
    assert (
        await conn.fetchval("SELECT status FROM processing_runs WHERE id = $1", again.run_id)
        == "succeeded"
    )
    assert (
        await conn.fetchval("SELECT status FROM processing_runs WHERE id = $1", run_id) == "failed"
    )
    from streams.errors import UsageError

    with pytest.raises(UsageError):
        await queue.retry_run(conn, again.run_id, channel=CH, dag=DEFAULT_DAG)
