"""A device's recent parameter values from ClickHouse, bounded for drawing (the console's device
page, ``GET /v1/devices/{device}/series``).

Two statements over the analytics table. The first finds the device's first numeric reading in
the window; the buckets then span from it to ``until``, not the whole window, so a device that
started sending five minutes ago is charted over five minutes rather than squeezed into the last
tenth of an hour. The bucket width is a round step (:data:`STEPS`) of at least the span over
:data:`MAX_POINTS` - 1, so buckets start on round times and there are at most ``MAX_POINTS``.
The second statement averages the device's numeric values into those buckets per parameter, for
at most :data:`MAX_PARAMETERS` parameters; a bucket without readings has no point (a gap).

Averaging is also why the statement needs no ``FINAL``: a value the ReplacingMergeTree has not
merged away yet is the same value twice, which leaves the bucket's average unchanged. Booleans
are stored as 1 and 0, so their average is the share of true readings in the bucket: the
statement is the same, and the caller, which knows from the device's schema which parameters
are boolean (:func:`parameter_series`'s ``booleans``), says so in the answer (``kind``). Text
values (``value`` is NULL) are not charted.

ClickHouse answers its ``DateTime64(6, 'UTC')`` columns as naive datetimes; every time leaves
here with its UTC offset, so a browser never reads a bucket as its own local time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any, Final

from schemas.api import ParameterSeries, SeriesPoint
from streams.clickhouse import ClickHouse, ident

__all__ = ["MAX_PARAMETERS", "MAX_POINTS", "STEPS", "bucket_step", "parameter_series"]

MAX_POINTS: Final = 240
MAX_PARAMETERS: Final = 24
STEPS: Final = tuple(
    dt.timedelta(seconds=s)
    for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600)
)
"""The bucket widths: round steps, so that buckets start on round times (they are aligned to the
epoch, hence to whole minutes and hours in every zone whose offset is whole quarter hours)."""

_FIRST: Final = """
SELECT minOrNull(measured_at)
FROM {db}.{table}
WHERE tenant = {{tenant:String}} AND device = {{device:String}}
  AND measured_at >= {{since:DateTime64(6, 'UTC')}}
  AND measured_at <= {{until:DateTime64(6, 'UTC')}}
  AND value IS NOT NULL
"""

_SERIES: Final = """
SELECT parameter, any(unit) AS unit,
       groupArray((bucket, v)) AS points
FROM (
    SELECT parameter, any(unit) AS unit,
           toStartOfInterval(measured_at, INTERVAL {{step_us:UInt64}} MICROSECOND) AS bucket,
           avg(value) AS v
    FROM {db}.{table}
    WHERE tenant = {{tenant:String}} AND device = {{device:String}}
      AND measured_at >= {{since:DateTime64(6, 'UTC')}}
      AND measured_at <= {{until:DateTime64(6, 'UTC')}}
      AND value IS NOT NULL
    GROUP BY parameter, bucket
    ORDER BY parameter, bucket
)
GROUP BY parameter
ORDER BY parameter
LIMIT {max_parameters}
"""


def bucket_step(span: dt.timedelta) -> dt.timedelta:
    """The smallest of :data:`STEPS` that cuts ``span`` into fewer than :data:`MAX_POINTS`
    buckets (the largest step when none does)."""
    return next((s for s in STEPS if s * (MAX_POINTS - 1) >= span), STEPS[-1])


def _utc(t: dt.datetime) -> dt.datetime:
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)


async def parameter_series(
    clickhouse: ClickHouse,
    table: str,
    *,
    tenant: str,
    device: str,
    now: dt.datetime,
    window: dt.timedelta,
    booleans: Collection[str] = (),
) -> tuple[dt.timedelta, list[ParameterSeries]]:
    """The bucket width and each charted parameter with its unit, its kind (``boolean`` for the
    names in ``booleans``) and its bucket points, oldest first."""
    since = now - window
    where = {"tenant": tenant, "device": device, "since": since, "until": now}
    db, t = clickhouse.database, ident(table)
    ((first,),) = await clickhouse.query_rows(_FIRST.format(db=db, table=t), where)
    if first is None:
        return bucket_step(window), []
    step = bucket_step(now - _utc(first))
    sql = _SERIES.format(db=db, table=t, max_parameters=MAX_PARAMETERS)
    step_us = step // dt.timedelta(microseconds=1)
    rows: list[tuple[Any, ...]] = await clickhouse.query_rows(sql, {**where, "step_us": step_us})
    return step, [
        ParameterSeries(
            parameter=name,
            unit=unit,
            kind="boolean" if name in booleans else "number",
            points=[SeriesPoint(t=_utc(at), value=v) for at, v in points],
        )
        for name, unit, points in rows
    ]
