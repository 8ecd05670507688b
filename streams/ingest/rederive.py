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
from streams.ingest.schema_trial import ParameterDiff, tally

__all__ = ["ReprocessReport", "rederive_batch"]

# What each envelope's telemetry row holds now, by dedupe key digest; the telemetry rows read
# over the batch's receipt window and joined in bulk (schema_trial._RECORDED says why).
_CURRENT = """
WITH m AS (
    SELECT k.key_hash, m.id, m.received_at, m.status
    FROM unnest($1::uuid[]) AS u(h)
    JOIN ingest_dedupe_keys k ON k.key_hash = u.h
    JOIN ingestion_messages m ON m.id = k.message_id AND m.received_at = k.received_at
)
SELECT m.key_hash::text AS key, m.id, m.received_at, m.status::text AS status,
       t.values_layout, t.parameter_list::text AS parameter_list, l.schema_version_id,
       telemetry_values(t.values_layout, t.parameter_list)::text AS values_json
FROM m
JOIN (SELECT t.ingestion_message_id, t.received_at, t.values_layout, t.parameter_list
      FROM device_telemetry_logs t
      WHERE t.received_at BETWEEN (SELECT min(received_at) FROM m)
                              AND (SELECT max(received_at) FROM m)) AS t
  ON t.ingestion_message_id = m.id AND t.received_at = m.received_at
JOIN telemetry_value_layouts l ON l.id = t.values_layout
"""

# The batch's corrections in one statement (arrays, one element per envelope): each applied
# while its row still holds what was read, then kept. The rows are found over the batch's
# receipt window ($7, $8: BRIN on received_at) and joined in bulk, not probed one by one.
_CORRECT = """
WITH c AS (
    SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::int[], $4::text[], $5::int[],
                         $6::text[]) AS c(id, rx, layout, list, old_layout, old_list)
),
corrected AS (
    UPDATE device_telemetry_logs t
    SET values_layout = c.layout, parameter_list = c.list::json,
        updated_at = clock_timestamp()
    FROM c
    WHERE t.received_at BETWEEN $7 AND $8
      AND t.ingestion_message_id = c.id AND t.received_at = c.rx
      AND t.values_layout = c.old_layout AND t.parameter_list::text = c.old_list
    RETURNING c.id, c.rx, c.layout, c.list, c.old_layout, c.old_list
)
INSERT INTO telemetry_corrections (ingestion_message_id, received_at, reprocess_id,
                                   previous_layout, previous_values, values_layout,
                                   parameter_list)
SELECT id, rx, $9, old_layout, old_list::json, layout, list::json FROM corrected
"""

# A message row that names its version itself (not a lean one) names the new one.
_MESSAGE_VERSION = """
UPDATE ingestion_messages m
SET schema_version_id = v.version::uuid, schema_topic_id = v.topic::uuid
FROM unnest($1::bigint[], $2::timestamptz[], $3::text[], $4::text[]) AS v(id, rx, version, topic)
WHERE m.id = v.id AND m.received_at = v.rx AND m.schema_version_id IS NOT NULL
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
            _CURRENT, [ev.key_digest for ev in recorded])}
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
        tally(report.parameters, old_values, ev.values or {})
        corrections.append(_Correction(ev, row["id"], row["received_at"], row["values_layout"],
                                       row["parameter_list"], old_values))
    if report.dry_run or not corrections:
        return
    await _sinks(pipeline, corrections)
    await _record(pipeline, corrections, report.reprocess_id)


async def _sinks(pipeline: Pipeline, corrections: Sequence[_Correction]) -> None:
    evs = [c.ev for c in corrections]
    analytics: Analytics = pipeline.analytics
    # A parameter that no longer has a value keeps its old row unless the envelope's rows go.
    emptied = [c.ev.key for c in corrections
               if any(v is not None and (c.ev.values or {}).get(k) is None
                      for k, v in c.old_values.items())]
    await analytics.withdraw(emptied)
    await analytics.insert(Analytics.rows(evs))
    # The hot state: only where its field still holds one of these envelopes (one pipelined
    # read of each field the batch touches, then a compare-and-set for each it holds).
    redis = pipeline.resources.redis
    items = pipeline.publisher.hot_items(evs)
    fields = sorted({(i.key, i.topic) for i in items})
    async with redis.pipeline(transaction=False) as pipe:
        for key, topic in fields:
            pipe.hget(key, topic)
        held = dict(zip(fields, await pipe.execute(), strict=True))
    swaps = []
    for c, item in zip(corrections, items, strict=True):
        doc = held.get((item.key, item.topic))
        if doc is None:
            continue
        raw = doc if isinstance(doc, bytes) else doc.encode()
        try:
            holder = orjson.loads(raw).get("message_key")
        except orjson.JSONDecodeError:
            continue
        if holder == c.ev.key:  # still this measurement: put the corrected one in its place
            swaps.append((item._replace(doc=raw), item))
    if swaps:
        await HotState(redis).replace_many(swaps)


async def _record(pipeline: Pipeline, corrections: Sequence[_Correction],
                  reprocess_id: str) -> None:
    layouts = pipeline.recorder.layouts
    keys = [(c.ev.binding.version_text, c.ev.binding.program.topic,  # type: ignore[union-attr]
             tuple(c.ev.values or ())) for c in corrections]
    await layouts.ensure(pipeline.resources.pool, keys)
    rid = uuid.UUID(reprocess_id)
    received = [c.received_at for c in corrections]
    async with pipeline.resources.pool.acquire() as conn, conn.transaction():
        await conn.execute(
            _CORRECT, [c.message_id for c in corrections], received,
            [layouts.ids[key] for key in keys],
            [orjson.dumps(list((c.ev.values or {}).values())).decode() for c in corrections],
            [c.layout for c in corrections], [c.values_list for c in corrections],
            min(received), max(received), rid)
        await conn.execute(
            _MESSAGE_VERSION, [c.message_id for c in corrections], received,
            [c.ev.binding.version_text for c in corrections],  # type: ignore[union-attr]
            [c.ev.binding.topic_id_text for c in corrections])  # type: ignore[union-attr]
