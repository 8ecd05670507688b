"""Build the :class:`JobContext` of claimed jobs from the rows the claim statement returns.

The claim statement already joins each job's run (config, versions, artifacts) and the outputs
of its succeeded ancestors, so a batch of jobs costs no extra round trip.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from streams.jobs.executor import ArtifactRef, JobContext, UpstreamDataset
from streams.jobs.model import ClaimedJob, Row, RunVersions


def context_from_row(row: Row) -> JobContext:
    """The context of the claimed job in ``row`` (a row of ``sql.CLAIM``)."""
    datasets: dict[str, UpstreamDataset] = {}
    summaries: dict[str, Mapping[str, Any]] = {}
    for upstream in row["upstream"]:
        summaries[upstream["name"]] = upstream["output"] or {}
        for d in upstream["datasets"]:
            datasets[d["name"]] = UpstreamDataset(
                name=d["name"],
                job=upstream["name"],
                dataset_type=d["dataset_type"],
                storage_url=d["storage_url"],
                content_hash=d["content_hash"],
                schema_version=d["schema_version"],
                row_count=d["row_count"],
                stats=d["stats"] or {},
            )
    return JobContext(
        job=ClaimedJob.from_row(row),
        session_id=row["session_id"],
        config=row["config"] or {},
        versions=RunVersions(
            parser=row["parser_version"],
            pipeline=row["pipeline_version"],
            fusion=row["fusion_version"],
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
            for a in row["artifacts"]
        ),
        datasets=datasets,
        summaries=summaries,
        traceparent=row["traceparent"],
    )
