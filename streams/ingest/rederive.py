"""Re-derive recorded envelopes after a fix (``tideway replay --reprocess``).

A corrected mutate or derived expression (a new schema version assigned to the devices) leaves
the values recorded before it wrong. A reprocess reads the envelopes of a window again (the
replay's ephemeral consumer), evaluates each through the pipeline's own
:meth:`~streams.ingest.pipeline.Pipeline.prepare` — the device's *current* schema version, the
same function live data goes through — and, for each envelope that completed before and
completes now with other values (or under another version), writes the correction:

1. **the sinks first**, as the live pipeline publishes before it records (both idempotent):
   the analytics rows again (ClickHouse replaces an envelope's rows by their key; a parameter
   the correction leaves without a value has its old row deleted first), and the hot state,
   only where it still holds this very envelope (a newer measurement stays);
2. **then Postgres, in one transaction per batch**: the telemetry row's values and layout (the
   layout names the schema version) replaced in place, the row's ``updated_at`` set, and what
   it held kept in ``telemetry_corrections`` with the time and the reprocess's id — so
   ``messages show`` tells which version produced which values, and when. The update only
   applies while the row still holds what was read (a concurrent correction wins, this one
   counts it as unchanged next time).

So a second reprocess of the same window finds every value equal and changes nothing, and a
reprocess killed at any point is finished by running it again: a batch whose sinks were written
but whose transaction never committed is written again, to the same result.

An envelope whose *status* the current version would change (a tightened limit refusing what
was accepted, a fixed rule accepting what was refused) is not re-recorded: its status, stage
logs and dead letters are the record of what happened when it arrived. It is counted by
transition (``status_changes``); ``tideway schema test --device`` shows them in detail.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from stages.ingest.evaluate import Evaluation
from stages.ingest.plan import Fate
from stages.ingest.status import Status
from streams.ingest.analytics import Analytics
from streams.ingest.hot_state import HotState
from streams.ingest.pipeline import Pipeline
from streams.ingest.schema_trial import ParameterDiff

__all__ = ["ReprocessReport", "rederive_batch"]

# What each envelope's telemetry row holds now, by dedupe key digest.
_CURRENT = """
SELECT u.h::text AS key, m.id, m.received_at, m.status::text AS status,
       t.values_layout, t.parameter_list::text AS parameter_list, l.schema_version_id,
       telemetry_values(t.values_layout, t.parameter_list)::text AS values_json
FROM unnest($1::uuid[]) AS u(h)
JOIN LATERAL (SELECT k.message_id, k.received_at FROM ingest_dedupe_keys k
              WHERE k.key_hash = u.h LIMIT 1) AS k ON true
JOIN ingestion_messages m ON m.id = k.message_id AND m.received_at = k.received_at
JOIN device_telemetry_logs t ON t.ingestion_message_id = m.id AND t.received_at = m.received_at
JOIN telemetry_value_layouts l ON l.id = t.values_layout
"""

# One correction: kept, then applied while the row still holds what was read.
_CORRECT = """
WITH corrected AS (
    UPDATE device_telemetry_logs t
    SET values_layout = $4, parameter_list = $5::text::json, updated_at = clock_timestamp()
    WHERE t.ingestion_message_id = $1 AND t.received_at = $2
      AND t.values_layout = $6 AND t.parameter_list::text = $7::text
    RETURNING t.ingestion_message_id
)
INSERT INTO telemetry_corrections (ingestion_message_id, received_at, reprocess_id,
                                   previous_layout, previous_values, values_layout,
                                   parameter_list)
SELECT $1, $2, $3, $6, $7::text::json, $4, $5::text::json FROM corrected
"""

# A message row that names its version itself (not a lean one) names the new one.
_MESSAGE_VERSION = """
UPDATE ingestion_messages SET schema_version_id = $3::text::uuid, schema_topic_id = $4::text::uuid
WHERE id = $1 AND received_at = $2 AND schema_version_id IS NOT NULL
"""


@dataclass(kw_only=True)
class ReprocessReport:
    """What a reprocess found and did (or, in a dry run, would do)."""

    reprocess_id: str
    dry_run: bool
    corrected: int = 0
    """Envelopes whose values were (would be) corrected."""
    unchanged: int = 0
    """Recorded envelopes the current version gives the same values."""
    status_changes: Counter[str] = field(default_factory=Counter)
    """``"old → new"``: envelopes whose status the current version would change (not
    re-recorded)."""
    not_recorded: int = 0
    """Envelopes of the window never recorded (a plain ``replay`` records them)."""
    duplicates: int = 0
    parameters: dict[str, ParameterDiff] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"reprocess_id": self.reprocess_id, "corrected": self.corrected,
                "unchanged": self.unchanged,
                "status_changes": dict(self.status_changes.most_common()),
                "not_recorded": self.not_recorded, "duplicates": self.duplicates,
                "parameters": {k: v.as_dict() for k, v in sorted(self.parameters.items())}}


@dataclass(frozen=True, slots=True)
class _Correction:
    ev: Evaluation
    message_id: int
    received_at: Any
    layout: int
    values_list: str
    old_values: dict[str, Any]


async def rederive_batch(pipeline: Pipeline, receipts: Sequence[Any], report: ReprocessReport
                         ) -> None:
    """Re-derive one batch of receipts (see the module docstring)."""
    evaluations, fates, _ = await pipeline.prepare(receipts)
    recorded: list[Evaluation] = []
    for ev, fate in zip(evaluations, fates, strict=True):
        if fate.fate is Fate.NEW:
            report.not_recorded += 1
        elif fate.fate is Fate.DUPLICATE:
            report.duplicates += 1
        else:
            recorded.append(ev)
    pool = pipeline.resources.pool
    async with pool.acquire() as conn:
        rows = {r["key"].replace("-", ""): r for r in await conn.fetch(
            _CURRENT, [uuid.UUID(ev.key_digest) for ev in recorded])}
    corrections: list[_Correction] = []
    for ev in recorded:
        row = rows.get(ev.key_digest)
        if row is None:  # a record without telemetry (refused before validate): nothing to fix
            report.unchanged += 1
            continue
        old_status, new_status = row["status"], ev.status.value
        if old_status != new_status:
            report.status_changes[f"{old_status} → {new_status}"] += 1
            continue
        old_values = orjson.loads(row["values_json"])
        same_version = ev.binding is not None and ev.binding.schema_version_id == \
            row["schema_version_id"]
        if ev.status is not Status.COMPLETED or (old_values == ev.values and same_version):
            report.unchanged += 1
            continue
        report.corrected += 1
        _count(report, old_values, ev.values or {})
        corrections.append(_Correction(ev, row["id"], row["received_at"], row["values_layout"],
                                       row["parameter_list"], old_values))
    if report.dry_run or not corrections:
        return
    await _sinks(pipeline, corrections)
    await _record(pipeline, corrections, report.reprocess_id)


def _count(report: ReprocessReport, old: dict[str, Any], new: dict[str, Any]) -> None:
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        diff = report.parameters.setdefault(name, ParameterDiff())
        if a is None:
            diff.appeared += 1
        elif b is None:
            diff.disappeared += 1
        else:
            diff.add(a, b)


async def _sinks(pipeline: Pipeline, corrections: Sequence[_Correction]) -> None:
    evs = [c.ev for c in corrections]
    analytics: Analytics = pipeline.analytics
    # A parameter that no longer has a value keeps its old row unless the envelope's rows go.
    emptied = [c.ev.key for c in corrections
               if any(v is not None and (c.ev.values or {}).get(k) is None
                      for k, v in c.old_values.items())]
    await analytics.withdraw(emptied)
    await analytics.insert(Analytics.rows(evs))
    hot = HotState(pipeline.resources.redis)
    for c, item in zip(corrections, pipeline.publisher.hot_items(evs), strict=True):
        held = await pipeline.resources.redis.hget(item.key, item.topic)
        if held is None:
            continue
        try:
            holder = orjson.loads(held).get("message_key")
        except orjson.JSONDecodeError:
            continue
        if holder == c.ev.key:  # still this measurement: put the corrected one in its place
            await hot.withdraw(item._replace(doc=held if isinstance(held, bytes)
                                             else held.encode()), item)


async def _record(pipeline: Pipeline, corrections: Sequence[_Correction],
                  reprocess_id: str) -> None:
    layouts = pipeline.recorder.layouts
    keys = [(c.ev.binding.version_text, c.ev.binding.program.topic,  # type: ignore[union-attr]
             tuple(c.ev.values or ())) for c in corrections]
    await layouts.ensure(pipeline.resources.pool, keys)
    rid = uuid.UUID(reprocess_id)
    async with pipeline.resources.pool.acquire() as conn, conn.transaction():
        for c, key in zip(corrections, keys, strict=True):
            values = orjson.dumps(list((c.ev.values or {}).values())).decode()
            await conn.execute(_CORRECT, c.message_id, c.received_at, rid, layouts.ids[key],
                               values, c.layout, c.values_list)
            binding = c.ev.binding
            assert binding is not None
            await conn.execute(_MESSAGE_VERSION, c.message_id, c.received_at,
                               binding.version_text, binding.topic_id_text)

