"""Every statement of the job engine, by name (asyncpg ``$n`` parameters).

Conventions
-----------
- ``$1`` is always ``now`` (``NULL`` means the database clock), so tests can move time.
- Every UPDATE that moves a job names the state it expects, and the ones made on behalf of a
  worker also name ``locked_by`` and the attempt number: a reaped or cancelled attempt can never
  overwrite what happened after it. The trigger from migration ``0003_jobs`` refuses any
  transition outside ``stages.jobs.job_state`` on top of that.
- A job reaching a terminal state decrements ``processing_runs.jobs_open`` in the same statement;
  the transaction that brings it to 0 finalises the run (the counter update takes the run row's
  lock, so exactly one transaction sees 0).
- Dependents are released with a counter too (``jobs.deps_pending``): two dependencies finishing
  in concurrent transactions both decrement the row under its lock, and whichever reaches 0
  moves it to ``queued`` (or ``skipped`` when a hard dependency did not succeed).
- Statements that make jobs runnable ``pg_notify`` the jobs channel with the pool name, so idle
  workers wake within milliseconds; the notification is delivered at commit.
"""

from __future__ import annotations

from typing import Final

NOW: Final = "SELECT coalesce($1::timestamptz, now()) AS now"

# Opens the claim's transaction in one message (no parameters, so the simple protocol carries
# several statements):
# - a transaction-level advisory lock serialises claims, so the running counts CLAIM reads
#   (per tenant, heavy jobs) cannot be raced past the limits; CLAIM, sent next, takes its
#   snapshot after the lock is granted. The key is an arbitrary constant.
# - the planner is told not to scan tables or bitmaps for this transaction only. The jobs
#   table churns faster than its statistics: with stale ones the planner believes few jobs are
#   queued and sorts all of them, where walking ix_jobs_claim reads only the few it takes.
# - the commit does not wait for its WAL flush: a claim lost in a database crash leaves the
#   job queued, its worker's completion is then refused by the guards and the job simply runs
#   again. Completions, which record results, keep synchronous commits.
CLAIM_LOCK: Final = "SELECT pg_advisory_xact_lock(6075895573793101)"
CLAIM_BEGIN: Final = (
    "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off; "
    "SET LOCAL enable_bitmapscan = off; SET LOCAL synchronous_commit = off; " + CLAIM_LOCK
)

# $2 limit, $3 worker id, $4 pools (NULL = any), $5 job types (NULL = any),
# $6 running jobs allowed per tenant, $7 running heavy jobs allowed globally,
# $8 active (started, unfinished) runs allowed per tenant unless the tenant's own
# ``tenants.max_active_runs`` says otherwise (NULL: only the tenants' own limits).
#
# Active runs (spec 000 §12): a run becomes active at its first claim (``started`` below
# moves it pending -> running) and stays so until it is finalised. A tenant at its limit has
# only the jobs of its running runs claimed; its pending runs wait, queued, and are never
# refused. Below the limit, the claim admits new runs in priority order until the limit,
# counting each new run once however many of its jobs it takes. Jobs of running runs are
# always eligible, so a started run can always finish and free its place. The running runs are
# read through the partial index ix_processing_runs_running (migration 0015): a handful of
# rows per tenant, whatever the history.
CLAIM: Final = f"""
WITH p AS ({NOW}),
running_runs AS (
    SELECT r.id, r.tenant_id FROM processing_runs r WHERE r.status = 'running'
),
runs_active AS (
    SELECT rr.tenant_id, count(*) AS n, coalesce(min(t.max_active_runs), $8::int) AS cap
    FROM running_runs rr JOIN tenants t ON t.id = rr.tenant_id
    GROUP BY rr.tenant_id
),
active AS (
    SELECT tenant_id, count(*) AS n, count(*) FILTER (WHERE heavy) AS heavy_n
    FROM jobs WHERE state IN ('running', 'cancel_requested')
    GROUP BY tenant_id
),
heavy_free AS (SELECT $7::int - coalesce(sum(heavy_n), 0)::int AS n FROM active),
candidates AS (
    SELECT j.id, j.run_id, j.tenant_id, j.heavy, j.priority, j.created_at
    FROM jobs j
    WHERE j.state = 'queued'
      -- attempts lost to their worker are not the job's own (lost_count, migration 0009)
      AND j.attempt_count - j.lost_count < j.max_attempts
      AND ($4::text[] IS NULL OR j.pool = ANY($4::text[]))
      AND ($5::text[] IS NULL OR j.job_type = ANY($5::text[]))
      -- NOT IN (a hashed subplan) keeps the walk on ix_jobs_claim; NOT EXISTS or an array
      -- filter make the planner sort every queued job instead (tenant_id is never NULL).
      AND j.tenant_id NOT IN (SELECT tenant_id FROM active WHERE n >= $6)
      -- a tenant at its active-run limit: only jobs of its started runs
      AND (j.tenant_id NOT IN (SELECT tenant_id FROM runs_active WHERE n >= cap)
           OR j.run_id IN (SELECT id FROM running_runs))
      AND (NOT j.heavy OR (SELECT n FROM heavy_free) > 0)
    ORDER BY j.priority DESC, j.created_at
    -- A small margin for rows the per-tenant and heavy ranking below drops (tenants already
    -- at their limit are excluded above). Every locked row costs a write, so no more.
    LIMIT $2::int + 8
    FOR UPDATE OF j SKIP LOCKED
),
-- Tenants the claim could take past their active-run limit: their started runs plus every run
-- their candidates belong to exceed it. Only their candidates are ranked run by run below; a
-- tenant further from its limit has all of them admitted, without reading their runs (3 of the
-- claim's 29 buffer reads a job, EXPLAIN of a 128-job claim).
near AS (
    SELECT c.tenant_id
    FROM candidates c JOIN tenants t ON t.id = c.tenant_id
    LEFT JOIN runs_active f ON f.tenant_id = c.tenant_id
    GROUP BY c.tenant_id, t.max_active_runs, f.n
    HAVING coalesce(f.n, 0) + count(DISTINCT c.run_id) > coalesce(t.max_active_runs, $8::int)
),
-- New runs are admitted up to the tenant's active-run limit, best first (each counted once).
admitted AS (
    SELECT id, tenant_id, heavy, priority, created_at FROM candidates
    WHERE tenant_id NOT IN (SELECT tenant_id FROM near)
    UNION ALL
    SELECT id, tenant_id, heavy, priority, created_at FROM (
        SELECT c.*, r.status = 'pending' AS new_run,
               dense_rank() OVER (
                   PARTITION BY c.tenant_id, r.status = 'pending'
                   ORDER BY r.priority DESC, r.created_at, r.id
               ) AS run_rank,
               coalesce(f.n, 0) AS active_runs,
               coalesce(f.cap, t.max_active_runs, $8::int) AS runs_cap
        FROM candidates c
        JOIN processing_runs r ON r.id = c.run_id
        JOIN tenants t ON t.id = c.tenant_id
        LEFT JOIN runs_active f ON f.tenant_id = c.tenant_id
        WHERE c.tenant_id IN (SELECT tenant_id FROM near)
    ) ranked_runs
    WHERE NOT new_run OR runs_cap IS NULL OR active_runs + run_rank <= runs_cap
),
chosen AS (
    SELECT id FROM (
        SELECT c.id, c.heavy, c.priority, c.created_at,
               coalesce(a.n, 0) + row_number() OVER (
                   PARTITION BY c.tenant_id ORDER BY c.priority DESC, c.created_at, c.id
               ) AS tenant_slot,
               sum(c.heavy::int) OVER (ORDER BY c.priority DESC, c.created_at, c.id) AS heavy_slot
        FROM admitted c LEFT JOIN active a ON a.tenant_id = c.tenant_id
    ) ranked
    WHERE tenant_slot <= $6 AND (NOT heavy OR heavy_slot <= (SELECT n FROM heavy_free))
    ORDER BY priority DESC, created_at, id
    LIMIT $2
),
claimed AS (
    UPDATE jobs j
    SET state = 'running', attempt_count = j.attempt_count + 1, locked_at = p.now,
        locked_by = $3, heartbeat_at = p.now, next_run_at = NULL, updated_at = p.now,
        started_at = coalesce(j.started_at, p.now)
    FROM chosen c, p
    WHERE j.id = c.id AND j.state = 'queued'
    RETURNING j.id, j.run_id, j.tenant_id, j.name, j.job_type, j.pool, j.critical, j.heavy,
              j.priority, j.attempt_count, j.lost_count, j.max_attempts, j.soft_timeout_s,
              j.hard_timeout_s, j.locked_by, j.locked_at, j.payload, j.created_at
),
-- The attempt's history row exists while it runs (spec 004); its end completes it. Each claim
-- numbers a new attempt, so the insert cannot conflict (and a claim lost in a crash loses its
-- row with it).
-- The claimed jobs' runs, read once per run (a batch holds jobs of a few runs): the attempt
-- rows and the contexts below join this instead of probing processing_runs for every job.
runs_of AS (
    SELECT r.id, r.session_id, r.config, r.parser_version, r.pipeline_version, r.fusion_version,
           r.traceparent
    FROM processing_runs r WHERE r.id IN (SELECT run_id FROM claimed)
),
opened AS (
    INSERT INTO job_attempts
        (job_id, attempt_number, worker_id, status, step_type, started_at, trace_id)
    SELECT c.id, c.attempt_count, $3, 'running', c.job_type, c.locked_at,
           substr(r.traceparent, 4, 32)
    FROM claimed c JOIN runs_of r ON r.id = c.run_id
),
started AS (
    UPDATE processing_runs r
    SET status = 'running', started_at = coalesce(r.started_at, p.now), updated_at = p.now
    FROM p
    WHERE r.id IN (SELECT run_id FROM claimed) AND r.status = 'pending'
),
-- Materialised: computed once per run, not once per claimed job (a job joins its run's row).
run_artifacts_json AS MATERIALIZED (
    SELECT ra.run_id, jsonb_agg(jsonb_build_object(
               'id', a.id, 'sha256', a.sha256, 'storage_url', a.storage_url,
               'filename', a.filename, 'bytes', a.bytes, 'content_type', a.content_type,
               'format_detected', a.format_detected) ORDER BY ra.position) AS artifacts
    FROM run_artifacts ra JOIN artifacts a ON a.id = ra.artifact_id
    WHERE ra.run_id IN (SELECT run_id FROM claimed)
    GROUP BY ra.run_id
)
-- Each job comes back with what its executor needs (saves two round trips per batch): the
-- run's session, config, versions and ordered artifacts, and the outputs of its succeeded
-- ancestors (through any edge, transitively - never parallel branches).
SELECT c.*, r.session_id, r.config, r.parser_version, r.pipeline_version, r.fusion_version,
       r.traceparent,
       coalesce(ra.artifacts, '[]'::jsonb) AS artifacts,
       coalesce((
           WITH RECURSIVE anc(id) AS (
               SELECT e.depends_on_id FROM job_edges e WHERE e.job_id = c.id
               UNION
               SELECT e.depends_on_id FROM anc JOIN job_edges e ON e.job_id = anc.id
           )
           SELECT jsonb_agg(jsonb_build_object(
               'name', u.name, 'output', u.output,
               'datasets', coalesce((
                   SELECT jsonb_agg(jsonb_build_object(
                       'name', d.name, 'dataset_type', d.dataset_type,
                       'storage_url', d.storage_url, 'content_hash', d.content_hash,
                       'schema_version', d.schema_version, 'row_count', d.row_count,
                       'stats', d.stats) ORDER BY d.name)
                   FROM derived_datasets d WHERE d.job_id = u.id), '[]'::jsonb)))
           FROM anc JOIN jobs u ON u.id = anc.id
           WHERE u.state = 'succeeded'), '[]'::jsonb) AS upstream
FROM claimed c JOIN runs_of r ON r.id = c.run_id
LEFT JOIN run_artifacts_json ra ON ra.run_id = c.run_id
ORDER BY c.priority DESC, c.created_at, c.id
"""

# $2 worker id, $3 jobs [{id, attempt, output, idempotency_key, metrics}],
# $4 datasets [{job_id, name, dataset_type, storage_url, ...}], $5 notify channel.
COMPLETE: Final = f"""
WITH p AS ({NOW}),
input AS (
    SELECT * FROM jsonb_to_recordset($3::jsonb)
        AS x(id uuid, attempt int, output jsonb, idempotency_key text, metrics jsonb)
),
done AS (
    UPDATE jobs j
    SET state = 'succeeded', output = i.output,
        idempotency_key = coalesce(i.idempotency_key, j.idempotency_key),
        heartbeat_at = NULL, finished_at = p.now, updated_at = p.now
    FROM input i, p
    -- ids as an array: the primary key finds the rows (matching state = 'running' alone, the
    -- planner would read every running job through ix_jobs_active)
    WHERE j.id = ANY ((SELECT array_agg(id) FROM input)::uuid[]) AND j.id = i.id
      AND j.state = 'running' AND j.locked_by = $2 AND j.attempt_count = i.attempt
    RETURNING j.id, j.run_id, j.job_type, j.attempt_count, j.locked_at, i.metrics, p.now
),
-- Completes the attempt row the claim opened: a plain UPDATE (an upsert would try the insert
-- first and pay an index probe per row; job_attempts' fillfactor leaves room for the new
-- version on the same page, so the update is HOT and touches no index).
attempts AS (
    UPDATE job_attempts a
    SET status = 'succeeded', ended_at = d.now,
        metrics = coalesce(d.metrics, '{{}}'::jsonb)
                  || jsonb_build_object('duration_s', extract(epoch FROM d.now - d.locked_at))
    FROM done d
    WHERE a.job_id = d.id AND a.attempt_number = d.attempt_count
    RETURNING a.job_id
),
-- An attempt claimed before migration 0009 has no row yet: write it whole.
attempts_unopened AS (
    INSERT INTO job_attempts
        (job_id, attempt_number, worker_id, status, step_type, started_at, ended_at, metrics,
         trace_id)
    SELECT d.id, d.attempt_count, $2, 'succeeded', d.job_type, d.locked_at, d.now,
           coalesce(d.metrics, '{{}}'::jsonb)
           || jsonb_build_object('duration_s', extract(epoch FROM d.now - d.locked_at)),
           -- the run's trace id (traceparent is 00-<trace id>-<span id>-<flags>)
           (SELECT substr(r.traceparent, 4, 32) FROM processing_runs r WHERE r.id = d.run_id)
    FROM done d
    WHERE d.id NOT IN (SELECT job_id FROM attempts)
),
datasets AS (
    INSERT INTO derived_datasets
        (run_id, job_id, name, dataset_type, storage_url, content_hash, schema_version,
         row_count, bytes, stats, time_range_start, time_range_end)
    SELECT d.run_id, d.id, x.name, x.dataset_type, x.storage_url, x.content_hash,
           x.schema_version, x.row_count, x.bytes, coalesce(x.stats, '{{}}'::jsonb),
           x.time_range_start, x.time_range_end
    FROM jsonb_to_recordset($4::jsonb) AS x(
        job_id uuid, name text, dataset_type text, storage_url text, content_hash text,
        schema_version text, row_count bigint, bytes bigint, stats jsonb,
        time_range_start timestamptz, time_range_end timestamptz)
    JOIN done d ON d.id = x.job_id
),
resolved AS (
    SELECT e.job_id, count(*)::int AS n
    FROM job_edges e JOIN done d ON d.id = e.depends_on_id
    GROUP BY e.job_id
),
released AS (
    UPDATE jobs j
    SET deps_pending = j.deps_pending - r.n,
        state = CASE WHEN j.deps_pending > r.n THEN 'created'
                     WHEN j.skip_reason IS NULL THEN 'queued' ELSE 'skipped' END,
        finished_at = CASE WHEN j.deps_pending = r.n AND j.skip_reason IS NOT NULL
                           THEN p.now END,
        updated_at = p.now
    FROM resolved r, p
    WHERE j.id = r.job_id AND j.state = 'created'
    RETURNING j.id, j.run_id, j.name, j.critical, j.state, j.pool, j.skip_reason
),
closed AS (
    SELECT run_id, count(*)::int AS n FROM (
        SELECT run_id FROM done UNION ALL SELECT run_id FROM released WHERE state = 'skipped'
    ) t GROUP BY run_id
),
runs AS (
    UPDATE processing_runs r SET jobs_open = r.jobs_open - c.n, updated_at = p.now
    FROM closed c, p WHERE r.id = c.run_id
    RETURNING r.id, r.jobs_open
),
woken AS (
    SELECT pg_notify($5, pool) FROM (SELECT DISTINCT pool FROM released WHERE state = 'queued') q
)
SELECT
    (SELECT coalesce(array_agg(id), '{{}}') FROM done) AS done,
    (SELECT coalesce(jsonb_agg(jsonb_build_object(
        'id', id, 'run_id', run_id, 'name', name, 'critical', critical, 'reason', skip_reason)),
        '[]') FROM released WHERE state = 'skipped') AS skipped,
    (SELECT coalesce(array_agg(id), '{{}}') FROM runs WHERE jobs_open = 0) AS finished_runs,
    (SELECT count(*) FROM woken) AS woken
"""

# Dependents of jobs that ended without success. $2 [{id, reason}], $3 notify channel.
# A hard edge passes the reason on (the dependent will be skipped); a soft edge only counts.
RESOLVE: Final = f"""
WITH p AS ({NOW}),
input AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS x(id uuid, reason text)),
resolved AS (
    SELECT e.job_id, count(*)::int AS n, min(i.reason) FILTER (WHERE e.hard) AS reason
    FROM job_edges e JOIN input i ON i.id = e.depends_on_id
    GROUP BY e.job_id
),
released AS (
    UPDATE jobs j
    SET deps_pending = j.deps_pending - r.n,
        skip_reason = coalesce(j.skip_reason, r.reason),
        state = CASE WHEN j.deps_pending > r.n THEN 'created'
                     WHEN coalesce(j.skip_reason, r.reason) IS NULL THEN 'queued'
                     ELSE 'skipped' END,
        finished_at = CASE WHEN j.deps_pending = r.n
                                AND coalesce(j.skip_reason, r.reason) IS NOT NULL
                           THEN p.now END,
        updated_at = p.now
    FROM resolved r, p
    WHERE j.id = r.job_id AND j.state = 'created'
    RETURNING j.id, j.run_id, j.name, j.critical, j.state, j.pool, j.skip_reason
),
closed AS (
    SELECT run_id, count(*)::int AS n FROM released WHERE state = 'skipped' GROUP BY run_id
),
runs AS (
    UPDATE processing_runs r SET jobs_open = r.jobs_open - c.n, updated_at = p.now
    FROM closed c, p WHERE r.id = c.run_id
    RETURNING r.id, r.jobs_open
),
woken AS (
    SELECT pg_notify($3, pool) FROM (SELECT DISTINCT pool FROM released WHERE state = 'queued') q
)
SELECT
    (SELECT coalesce(jsonb_agg(jsonb_build_object(
        'id', id, 'run_id', run_id, 'name', name, 'critical', critical, 'reason', skip_reason)),
        '[]') FROM released WHERE state = 'skipped') AS skipped,
    (SELECT coalesce(array_agg(id), '{{}}') FROM runs WHERE jobs_open = 0) AS finished_runs,
    (SELECT count(*) FROM woken) AS woken
"""

# End one attempt without success: retry_wait, failed, or (acknowledging a cancellation)
# cancelled. $2 expected locked_by, $3 job id, $4 expected attempt, $5 new state,
# $6 seconds until the retry (NULL unless retry_wait), $7 code, $8 message, $9 attempt status,
# $10 error type, $11 error source, $12 severity, $13 metrics, $14 expected state,
# $15 whether the attempt was lost to its worker (counted in lost_count, not as a failure).
# A cancelled attempt records who asked for the cancellation (jobs.cancel_source) as its
# source when known; an attempt that scheduled a retry records when (retry_at).
END_ATTEMPT: Final = f"""
WITH p AS ({NOW}),
moved AS (
    UPDATE jobs j
    SET state = $5::text, next_run_at = p.now + $6::float8 * interval '1 second',
        last_error_code = $7,
        last_error_message = $8, heartbeat_at = NULL, updated_at = p.now,
        lost_count = j.lost_count + $15::bool::int,
        finished_at = CASE WHEN $5::text IN ('failed', 'cancelled') THEN p.now END
    FROM p
    WHERE j.id = $3 AND j.state = $14::text AND j.locked_by = $2 AND j.attempt_count = $4
    RETURNING j.id, j.run_id, j.name, j.job_type, j.critical, j.locked_at, j.next_run_at,
              j.cancel_source, p.now
),
attempt AS (
    INSERT INTO job_attempts
        (job_id, attempt_number, worker_id, status, step_type, started_at, ended_at, retry_at,
         error_type, error_source, error_sub_type, error_severity, error_message, metrics,
         trace_id)
    SELECT m.id, $4, $2, $9, m.job_type, m.locked_at, m.now, m.next_run_at, $10,
           CASE WHEN $5::text = 'cancelled' THEN coalesce(m.cancel_source, $11) ELSE $11 END,
           $7, $12, $8,
           $13::jsonb || jsonb_build_object('duration_s', extract(epoch FROM m.now - m.locked_at)),
           -- the run's trace id (traceparent is 00-<trace id>-<span id>-<flags>)
           (SELECT substr(r.traceparent, 4, 32) FROM processing_runs r WHERE r.id = m.run_id)
    FROM moved m
    ON CONFLICT (job_id, attempt_number) DO UPDATE
    SET status = excluded.status, ended_at = excluded.ended_at, retry_at = excluded.retry_at,
        error_type = excluded.error_type, error_source = excluded.error_source,
        error_sub_type = excluded.error_sub_type, error_severity = excluded.error_severity,
        error_message = excluded.error_message, metrics = excluded.metrics
),
runs AS (
    UPDATE processing_runs r SET jobs_open = r.jobs_open - 1, updated_at = p.now
    FROM moved m, p
    WHERE r.id = m.run_id AND $5::text IN ('failed', 'cancelled')
    RETURNING r.jobs_open
)
SELECT m.run_id, m.name, m.job_type, m.critical, m.next_run_at,
       (SELECT jobs_open FROM runs) AS jobs_open
FROM moved m
"""

# Where a job stands now (to explain why a guarded UPDATE matched nothing).
JOB_HOLDER: Final = "SELECT state, locked_by, attempt_count FROM jobs WHERE id = $1"

# A user's cancel: the run's status under its row lock, so the check that it has not ended and
# the stop are one decision (a finalisation committing meanwhile is waited for, then seen).
LOCK_RUN_STATUS: Final = "SELECT status FROM processing_runs WHERE id = $1 FOR UPDATE"

# Stop a whole run: not-started jobs are cancelled, running ones asked to stop.
# $2 run id, $3 run status (failed | cancelled), $4 failure reason, $5 reason for the jobs,
# $6 who asked (error source: 'operator' for a user's cancel; NULL when the run stops itself).
STOP_RUN: Final = f"""
WITH p AS ({NOW}),
stopped AS (
    UPDATE jobs j
    SET state = 'cancelled', skip_reason = coalesce(j.skip_reason, $5),
        finished_at = p.now, updated_at = p.now
    FROM p
    WHERE j.run_id = $2 AND j.state IN ('created', 'queued', 'retry_wait')
    RETURNING j.id
),
requested AS (
    UPDATE jobs j SET state = 'cancel_requested', cancel_source = $6::text, updated_at = p.now
    FROM p
    WHERE j.run_id = $2 AND j.state = 'running'
    RETURNING j.id
),
run AS (
    UPDATE processing_runs r
    SET status = CASE WHEN r.status IN ('pending', 'running') THEN $3::text ELSE r.status END,
        failure_reason = CASE WHEN r.status IN ('pending', 'running') THEN $4
                              ELSE r.failure_reason END,
        jobs_open = r.jobs_open - (SELECT count(*) FROM stopped),
        updated_at = p.now
    FROM p
    WHERE r.id = $2
    RETURNING r.jobs_open, r.status
)
SELECT (SELECT count(*) FROM stopped) AS stopped, (SELECT count(*) FROM requested) AS requested,
       run.jobs_open, run.status
FROM run
"""

# Cancel one job: not started -> cancelled, running -> cancel_requested. $2 job id,
# $3 who asked (error source).
CANCEL_JOB: Final = f"""
WITH p AS ({NOW}),
moved AS (
    UPDATE jobs j
    SET state = CASE WHEN j.state = 'running' THEN 'cancel_requested' ELSE 'cancelled' END,
        skip_reason = CASE WHEN j.state = 'running' THEN j.skip_reason
                           ELSE coalesce(j.skip_reason, 'CANCELLED') END,
        finished_at = CASE WHEN j.state = 'running' THEN NULL ELSE p.now END,
        cancel_source = $3::text, updated_at = p.now
    FROM p
    WHERE j.id = $2 AND j.state IN ('created', 'queued', 'retry_wait', 'running')
    RETURNING j.id, j.run_id, j.name, j.critical, j.state
),
runs AS (
    UPDATE processing_runs r SET jobs_open = r.jobs_open - 1, updated_at = p.now
    FROM moved m, p WHERE r.id = m.run_id AND m.state = 'cancelled'
    RETURNING r.jobs_open
)
SELECT m.run_id, m.name, m.critical, m.state, (SELECT jobs_open FROM runs) AS jobs_open
FROM moved m
"""

# Gating at run time: skip jobs that have not started. $2 run id, $3 [{id, reason}],
# $4 decisions to append to the run's gating record.
GATE: Final = f"""
WITH p AS ({NOW}),
input AS (SELECT * FROM jsonb_to_recordset($3::jsonb) AS x(id uuid, reason text)),
moved AS (
    UPDATE jobs j
    SET state = 'skipped', skip_reason = i.reason, finished_at = p.now, updated_at = p.now
    FROM input i, p
    WHERE j.id = i.id AND j.run_id = $2 AND j.state IN ('created', 'queued')
    RETURNING j.id, j.skip_reason
),
run AS (
    UPDATE processing_runs r
    SET jobs_open = r.jobs_open - (SELECT count(*) FROM moved), gating = r.gating || $4::jsonb,
        updated_at = p.now
    FROM p WHERE r.id = $2
    RETURNING r.jobs_open
)
SELECT (SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'reason', skip_reason)), '[]')
        FROM moved) AS skipped,
       (SELECT jobs_open FROM run) AS jobs_open
"""

# Gating candidates of a run: optional jobs not started yet.
GATE_CANDIDATES: Final = """
SELECT id, name, job_type FROM jobs
WHERE run_id = $1 AND NOT critical AND state IN ('created', 'queued')
"""

# $2 worker id, $3 job ids, $4 their attempt numbers. Returns the jobs still held.
HEARTBEAT: Final = f"""
WITH p AS ({NOW})
UPDATE jobs j SET heartbeat_at = p.now
FROM p, unnest($3::uuid[], $4::int[]) AS x(id, attempt)
WHERE j.id = x.id AND j.attempt_count = x.attempt AND j.locked_by = $2
  AND j.state IN ('running', 'cancel_requested')
RETURNING j.id, j.state
"""

# retry_wait -> queued for jobs whose next_run_at has come. $2 notify channel.
PROMOTE: Final = f"""
WITH p AS ({NOW}),
due AS (
    SELECT id FROM jobs
    WHERE state = 'retry_wait' AND next_run_at <= (SELECT now FROM p)
    ORDER BY next_run_at LIMIT 1000
    FOR UPDATE SKIP LOCKED
),
promoted AS (
    UPDATE jobs j SET state = 'queued', updated_at = p.now
    FROM due d, p WHERE j.id = d.id
    RETURNING j.pool
),
woken AS (SELECT pg_notify($2, pool) FROM (SELECT DISTINCT pool FROM promoted) q)
SELECT (SELECT count(*) FROM promoted) AS promoted, (SELECT count(*) FROM woken) AS woken
"""

# Active jobs whose worker stopped heartbeating or that ran past their hard timeout.
# $2 stale_after seconds (NULL: each job's own threshold, from its type), $3 limit.
# Locked until the reaper's transaction ends.
REAP_CANDIDATES: Final = f"""
WITH p AS ({NOW})
SELECT j.id, j.run_id, j.name, j.job_type, j.state, j.attempt_count, j.lost_count,
       j.max_attempts, j.locked_by, j.critical,
       coalesce($2::float8, j.stale_after_s) AS stale_after_s,
       j.locked_at + j.hard_timeout_s * interval '1 second' < p.now AS hard_timed_out
FROM jobs j, p
WHERE j.state IN ('running', 'cancel_requested')
  AND (j.heartbeat_at < p.now - coalesce($2::float8, j.stale_after_s) * interval '1 second'
       OR j.locked_at + j.hard_timeout_s * interval '1 second' < p.now)
ORDER BY j.locked_at
LIMIT $3
FOR UPDATE OF j SKIP LOCKED
"""

# Runs (locked, in id order) with every job's outcome and what publish_session found the
# content offers (summary.features), for the reducer. $1 run ids.
RUN_OUTCOMES: Final = """
SELECT r.id, r.status, r.jobs_open, r.summary -> 'features' AS content,
       (SELECT jsonb_agg(jsonb_build_object(
            'name', j.name, 'job_type', j.job_type, 'critical', j.critical, 'state', j.state,
            'skip_reason', j.skip_reason, 'error_code', j.last_error_code))
        FROM jobs j WHERE j.run_id = r.id) AS jobs
FROM processing_runs r WHERE r.id = ANY($1::uuid[])
ORDER BY r.id
FOR UPDATE OF r
"""

# Write the reducer's verdicts, then move each run's session: blue/green, a session reads the
# newest run that ended succeeded or partial - an older run finishing late never takes the
# pointer back; a session no run ever succeeded for is marked failed.
# $2 [{id, status, failure_reason, features_available, feature_reasons, summary}].
FINALISE_RUNS: Final = f"""
WITH p AS ({NOW}),
verdict AS (
    SELECT * FROM jsonb_to_recordset($2::jsonb) AS x(
        id uuid, status text, failure_reason text, features_available jsonb,
        feature_reasons jsonb, summary jsonb)
),
run AS (
    UPDATE processing_runs r
    SET status = CASE WHEN r.status IN ('pending', 'running') THEN v.status ELSE r.status END,
        failure_reason = coalesce(r.failure_reason, v.failure_reason),
        features_available = v.features_available, feature_reasons = v.feature_reasons,
        summary = r.summary || v.summary,
        completed_at = p.now, updated_at = p.now
    FROM verdict v, p
    -- A run is finalised once: a finalised run is never rewritten (its completed_at, its
    -- flags, the session's pointer), whoever asks again.
    WHERE r.id = v.id AND r.jobs_open = 0 AND r.completed_at IS NULL
    RETURNING r.id, r.session_id, r.status, r.created_at, r.completed_at, r.idempotency_key,
              coalesce((r.summary #>> '{{drift,exceeded}}')::boolean, false) AS held
),
-- If one transaction ends several runs of a session, the newest of those is the candidate;
-- a run the drift gate held back (publish_session's summary.drift) takes no pointer.
newest AS (
    SELECT DISTINCT ON (session_id) id, session_id, created_at FROM run
    WHERE status IN ('succeeded', 'partial') AND NOT held
    ORDER BY session_id, created_at DESC
),
pointed AS (
    UPDATE sessions s
    SET active_run_id = n.id, status = 'ready', query_ready = true, updated_at = p.now
    FROM newest n, p
    WHERE s.id = n.session_id
      AND (s.active_run_id IS NULL
           OR (SELECT created_at FROM processing_runs WHERE id = s.active_run_id)
              <= n.created_at)
),
unready AS (
    UPDATE sessions s SET status = 'failed', updated_at = p.now
    FROM p
    WHERE s.id IN (SELECT session_id FROM run WHERE status NOT IN ('succeeded', 'partial'))
      AND s.id NOT IN (SELECT session_id FROM newest)
      AND s.active_run_id IS NULL AND s.status = 'pending'
)
-- Upload-to-publish (spec 000 §14's SLA) for a run that published and was created for an
-- upload (intake sets the idempotency key; reprocess and retry runs have none): from its
-- newest file's upload to now.
SELECT run.id, run.status,
       CASE WHEN run.idempotency_key IS NOT NULL AND run.status IN ('succeeded', 'partial')
            THEN extract(epoch FROM run.completed_at - (
                SELECT max(a.created_at) FROM run_artifacts ra
                JOIN artifacts a ON a.id = ra.artifact_id WHERE ra.run_id = run.id))::float8
       END AS upload_to_publish_s
FROM run
"""

# $1 tenant, $2 session, $3 artifact set hash, $4 idempotency key, $5 requested by,
# $6-$8 versions, $9 config, $10 priority, $11 job count, $12 open jobs, $13 gating, $14 retry_of
INSERT_RUN: Final = """
INSERT INTO processing_runs
    (tenant_id, session_id, artifact_set_hash, idempotency_key, requested_by, parser_version,
     pipeline_version, fusion_version, config, priority, jobs_total, jobs_open, gating, retry_of)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $11, $12, $13::jsonb, $14)
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
RETURNING id
"""

RUN_BY_KEY: Final = """
SELECT id FROM processing_runs WHERE tenant_id = $1 AND idempotency_key = $2
"""

INSERT_RUN_ARTIFACTS: Final = """
INSERT INTO run_artifacts (run_id, artifact_id, position)
SELECT $1, a.id, a.ord - 1 FROM unnest($2::uuid[]) WITH ORDINALITY AS a(id, ord)
"""

# $1 run id, $2 tenant, $3 priority, $4 jobs, $5 edges [{job, depends_on, hard}], $6 channel.
INSERT_JOBS: Final = """
WITH inserted AS (
    INSERT INTO jobs
        (run_id, tenant_id, name, job_type, state, priority, pool, heavy, critical,
         max_attempts, deps_pending, soft_timeout_s, hard_timeout_s, stale_after_s,
         skip_reason, payload, finished_at)
    SELECT $1, $2, x.name, x.job_type, x.state, $3, x.pool, x.heavy, x.critical,
           x.max_attempts, x.deps_pending, x.soft_timeout_s, x.hard_timeout_s, x.stale_after_s,
           x.skip_reason, coalesce(x.payload, '{}'::jsonb),
           CASE WHEN x.state = 'skipped' THEN now() END
    FROM jsonb_to_recordset($4::jsonb) AS x(
        name text, job_type text, state text, pool text, heavy bool, critical bool,
        max_attempts int, deps_pending int, soft_timeout_s float8, hard_timeout_s float8,
        stale_after_s float8, skip_reason text, payload jsonb)
    RETURNING id, name, state, pool
),
edges AS (
    INSERT INTO job_edges (job_id, depends_on_id, hard)
    SELECT a.id, b.id, x.hard
    FROM jsonb_to_recordset($5::jsonb) AS x(job text, depends_on text, hard bool)
    JOIN inserted a ON a.name = x.job
    JOIN inserted b ON b.name = x.depends_on
),
woken AS (
    SELECT pg_notify($6, pool) FROM (SELECT DISTINCT pool FROM inserted WHERE state = 'queued') q
)
SELECT (SELECT count(*) FROM inserted) AS jobs, (SELECT count(*) FROM woken) AS woken
"""

RUN_FOR_RETRY: Final = """
SELECT r.id, r.tenant_id, r.session_id, r.artifact_set_hash, r.parser_version,
       r.pipeline_version, r.fusion_version, r.config, r.priority, r.status,
       coalesce(array(SELECT artifact_id FROM run_artifacts ra WHERE ra.run_id = r.id
                      ORDER BY ra.position), '{}') AS artifact_ids
FROM processing_runs r WHERE r.id = $1
"""

CANCEL_REQUESTED: Final = "SELECT state = 'cancel_requested' FROM jobs WHERE id = $1"

# Running jobs were just asked to stop (cancel_requested): wake the workers holding them, so
# they look at their jobs at once (one heartbeat) rather than at their next heartbeat. $1 the
# jobs channel; the payload names no pool, so no worker claims on it. Delivered at commit, like
# every notification, so a cancel that rolls back wakes nobody.
STOP_NOTICE: Final = "stop"
NOTIFY_STOP: Final = f"SELECT pg_notify($1, '{STOP_NOTICE}')"

# Where a job stands now (a worker deciding whether an ended attempt's outputs can go).
JOB_STATE: Final = "SELECT state FROM jobs WHERE id = $1"
