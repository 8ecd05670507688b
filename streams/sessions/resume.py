"""Resume: a retried run reuses the verified outputs of the runs it retries (spec 003).

Theory of operation
-------------------
``tideway runs retry`` starts a new run linked to the old one by ``retry_of``, with the same
artifacts, config and pinned versions. A chain of retries (C retries B, which retried A) is one
*lineage*, named by its first run (A). Within a lineage the job idempotency key of spec 000
§8.1 is computed with the lineage's id where it would use the run's id, so a job whose inputs,
config and versions are unchanged has the same key in every run of the chain; a run that is not
a retry is its own lineage, and its keys are what they always were.

Before a pure-stage job of a retried run computes anything, :func:`resume_job` looks for a
succeeded job of the same name and key among the earlier runs of the lineage (newest first),
reads each of its recorded datasets back and checks the sha256. When every file verifies the
job succeeds at once with those datasets (the same immutable files, now recorded for the new run
too) and that job's summary; the stage does not run. A file that is missing or does not verify
makes the job compute again, into the new run's own directory - nothing is ever overwritten.

Reused files stay where they are: the new run's dataset rows point into the earlier run's
directory. Retention follows those rows (``streams.retention.batch``): it never removes a
directory a kept run points into, nor a run an open retry may still reuse.

Which jobs are reused follows from the key: a job downstream of one that is computed again (the
job that failed, or one whose outputs did not verify) sees other input hashes, hence another
key, and runs. ``materialise_clickhouse`` and ``publish_session`` always run, since the rows
they load and check are keyed by the new run.

A run that is not a retry pays one small query per worker process (its lineage, cached).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from streams.errors import PermanentError
from streams.jobs.model import DatasetRecord, JobResult
from streams.objects import ObjectStore

__all__ = ["Lineages", "resume_job"]

log = logging.getLogger(__name__)

# The run and the runs it retries, newest first: [run, retry_of, its retry_of, ..., first].
_LINEAGE: Final = """
WITH RECURSIVE chain(id, retry_of, depth) AS (
    SELECT id, retry_of, 0 FROM processing_runs WHERE id = $1
    UNION ALL
    SELECT r.id, r.retry_of, c.depth + 1
    FROM processing_runs r JOIN chain c ON r.id = c.retry_of
)
SELECT coalesce(array_agg(id ORDER BY depth), '{}') FROM chain
"""

# Succeeded jobs called $2 with key $3 in the runs $1, in the order of $1 (newest run first),
# each with its recorded datasets. uq_jobs_run_name finds them. Never from a run whose outputs
# retention has begun to remove (marked before anything goes; streams.retention.batch): its
# files may be going, and once its dataset rows are gone the job would look like one that
# produced nothing.
_EARLIER_JOBS: Final = """
SELECT j.id, j.run_id, j.output,
       coalesce((SELECT jsonb_agg(jsonb_build_object(
                    'name', d.name, 'dataset_type', d.dataset_type,
                    'storage_url', d.storage_url, 'content_hash', d.content_hash,
                    'schema_version', d.schema_version, 'row_count', d.row_count,
                    'bytes', d.bytes, 'stats', d.stats,
                    'time_range_start', d.time_range_start,
                    'time_range_end', d.time_range_end) ORDER BY d.name)
                 FROM derived_datasets d WHERE d.job_id = j.id), '[]'::jsonb) AS datasets
FROM jobs j JOIN processing_runs r ON r.id = j.run_id AND r.outputs_removed_at IS NULL
WHERE j.run_id = ANY($1::uuid[]) AND j.name = $2 AND j.state = 'succeeded'
  AND j.idempotency_key = $3
ORDER BY array_position($1::uuid[], j.run_id)
"""


class Lineages:
    """Each run's lineage (itself, then the runs it retries), cached: it never changes."""

    def __init__(self, max_runs: int = 4096) -> None:
        self._max = max_runs
        self._known: OrderedDict[uuid.UUID, tuple[uuid.UUID, ...]] = OrderedDict()

    async def of(self, pool: Any, run_id: uuid.UUID) -> tuple[uuid.UUID, ...]:
        """``(run_id, retry_of, ..., first run)``; ``(run_id,)`` for a run that is no retry."""
        chain = self._known.get(run_id)
        if chain is None:
            found = await pool.fetchval(_LINEAGE, run_id)
            chain = tuple(found) or (run_id,)
            self._known[run_id] = chain
            while len(self._known) > self._max:
                self._known.popitem(last=False)
        return chain


async def resume_job(
    pool: Any,
    store: ObjectStore,
    *,
    earlier_runs: Sequence[uuid.UUID],
    job_name: str,
    key: str,
) -> JobResult | None:
    """The result of an earlier run's job with the same ``key``, if all its files verify."""
    if not earlier_runs:
        return None
    rows = await pool.fetch(_EARLIER_JOBS, list(earlier_runs), job_name, key)
    for row in rows:
        datasets = [_record(d) for d in row["datasets"]]
        try:
            await asyncio.gather(*(asyncio.to_thread(_verify, store, d) for d in datasets))
        except PermanentError as exc:  # missing or corrupt: compute the job again
            log.warning(
                "job %s cannot reuse the outputs of run %s: %s", job_name, row["run_id"], exc
            )
            continue
        return JobResult(
            summary=dict(row["output"] or {}),
            datasets=datasets,
            idempotency_key=key,
            metrics={
                "reused": True,
                "resumed_from_run": str(row["run_id"]),
                "resumed_from_job": str(row["id"]),
            },
        )
    return None


def _verify(store: ObjectStore, d: DatasetRecord) -> None:
    store.read(store.key(d.storage_url), sha256=d.content_hash)


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _record(d: Mapping[str, Any]) -> DatasetRecord:
    return DatasetRecord(
        name=d["name"],
        dataset_type=d["dataset_type"],
        storage_url=d["storage_url"],
        content_hash=d["content_hash"],
        schema_version=d["schema_version"],
        row_count=d["row_count"],
        bytes=d["bytes"],
        stats=d["stats"] or {},
        time_range_start=_when(d["time_range_start"]),
        time_range_end=_when(d["time_range_end"]),
    )
