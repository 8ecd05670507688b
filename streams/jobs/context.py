"""Build the :class:`JobContext` of claimed jobs: two queries per claimed batch."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from streams.jobs import sql
from streams.jobs.executor import ArtifactRef, JobContext, UpstreamDataset
from streams.jobs.model import ClaimedJob, RunVersions
from streams.jobs.txn import Conn


async def load_contexts(conn: Conn, jobs: Sequence[ClaimedJob]) -> dict[uuid.UUID, JobContext]:
    """The context of each job: its run's config, versions and artifacts, and its ancestors'
    datasets and summaries."""
    if not jobs:
        return {}
    runs = {
        row["id"]: row for row in await conn.fetch(sql.RUN_CONTEXT, list({j.run_id for j in jobs}))
    }
    datasets: dict[uuid.UUID, dict[str, UpstreamDataset]] = {j.id: {} for j in jobs}
    summaries: dict[uuid.UUID, dict[str, dict[str, object]]] = {j.id: {} for j in jobs}
    for row in await conn.fetch(sql.UPSTREAM, [j.id for j in jobs]):
        summaries[row["job_id"]][row["name"]] = row["output"] or {}
        for d in row["datasets"]:
            datasets[row["job_id"]][d["name"]] = UpstreamDataset(
                name=d["name"],
                job=row["name"],
                dataset_type=d["dataset_type"],
                storage_url=d["storage_url"],
                content_hash=d["content_hash"],
                schema_version=d["schema_version"],
                row_count=d["row_count"],
                stats=d["stats"] or {},
            )
    contexts: dict[uuid.UUID, JobContext] = {}
    for job in jobs:
        run = runs[job.run_id]
        contexts[job.id] = JobContext(
            job=job,
            session_id=run["session_id"],
            config=run["config"] or {},
            versions=RunVersions(
                parser=run["parser_version"],
                pipeline=run["pipeline_version"],
                fusion=run["fusion_version"],
            ),
            artifacts=tuple(
                ArtifactRef(
                    id=uuid.UUID(a["id"]),
                    sha256=a["sha256"],
                    storage_url=a["storage_url"],
                    filename=a["filename"],
                    bytes=a["bytes"],
                    content_type=a["content_type"],
                    format_detected=a["format_detected"],
                )
                for a in run["artifacts"]
            ),
            datasets=datasets[job.id],
            summaries=summaries[job.id],
        )
    return contexts
