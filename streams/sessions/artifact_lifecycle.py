"""What the intake stages learn about an artifact, written back to its row (spec 000 §6.1).

``artifacts.status`` starts ``uploaded``. ``artifact_validate`` passing moves every artifact of
the run to ``validated``; failing on bad input (a non-retriable code) moves the artifact it
names to ``rejected`` - the stage names the offending file first in its message (``a.nmea:
sha256 ... does not match``), and a message naming no artifact of the run rejects none.
``artifact_classify`` writes ``format_detected`` and, where the upload declared none,
``content_type`` (:func:`stages.batch.artifact_classify.content_type`).

Artifacts are shared by runs (one row per tenant and content hash), so the statements only
move ``uploaded`` forward: a reprocess never un-rejects or re-validates a file, and a
transient failure (storage unreachable) says nothing about the file and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from stages.batch.artifact_classify import content_type
from streams.jobs.executor import ArtifactRef

# $1 artifact ids, $2 new status ('validated' | 'rejected').
_SET_STATUS: Final = """
UPDATE artifacts SET status = $2 WHERE id = ANY($1::uuid[]) AND status = 'uploaded'
"""

# $1 [{id, format, content_type}]
_SET_FORMAT: Final = """
UPDATE artifacts a
SET format_detected = x.format, content_type = coalesce(a.content_type, x.content_type)
FROM jsonb_to_recordset($1::jsonb) AS x(id uuid, format text, content_type text)
WHERE a.id = x.id
"""


async def record_validation(
    db: Any, artifacts: Sequence[ArtifactRef], *, passed: bool, message: str = ""
) -> None:
    """``artifact_validate`` passed (all validated) or refused its input (the named one)."""
    if passed:
        await db.execute(_SET_STATUS, [a.id for a in artifacts], "validated")
        return
    named = [a.id for a in artifacts if message.startswith(f"{a.filename}:")]
    if named:
        await db.execute(_SET_STATUS, named, "rejected")


async def record_classification(
    db: Any, artifacts: Sequence[ArtifactRef], summary: Mapping[str, Any]
) -> None:
    """Write ``artifact_classify``'s format (and media type) onto each artifact it names."""
    by_name = {a.filename: a for a in artifacts}
    rows = [
        {
            "id": str(by_name[e["name"]].id),
            "format": e["format"],
            "content_type": content_type(e["format"], compressed=bool(e.get("compressed"))),
        }
        for e in summary.get("artifacts", [])
        if isinstance(e, Mapping) and e.get("name") in by_name and e.get("format")
    ]
    if rows:
        await db.execute(_SET_FORMAT, rows)
