"""A device's recent parameter values from ClickHouse, bounded for drawing (the console's device
page, ``GET /v1/devices/{device}/series``).

One statement over the analytics table: the device's numeric values of the last ``window``,
averaged into at most :data:`MAX_POINTS` time buckets per parameter, for at most
:data:`MAX_PARAMETERS` parameters. Averaging is also why the statement needs no ``FINAL``: a
value the ReplacingMergeTree has not merged away yet is the same value twice, which leaves the
bucket's average unchanged. Text values (``value`` is NULL) are not charted.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Final

from streams.clickhouse import ClickHouse, ident

__all__ = ["MAX_PARAMETERS", "MAX_POINTS", "parameter_series"]

MAX_POINTS: Final = 240
MAX_PARAMETERS: Final = 24

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


async def parameter_series(
    clickhouse: ClickHouse,
    table: str,
    *,
    tenant: str,
    device: str,
    now: dt.datetime,
    window: dt.timedelta,
) -> list[dict[str, Any]]:
    """Each charted parameter with its unit and ``[(time, value)]`` points, oldest first."""
    step_us = max(1, int(window / dt.timedelta(microseconds=1)) // MAX_POINTS)
    sql = _SERIES.format(db=clickhouse.database, table=ident(table), max_parameters=MAX_PARAMETERS)
    rows = await clickhouse.query_rows(
        sql,
        {"tenant": tenant, "device": device, "since": now - window, "until": now,
         "step_us": step_us},
    )  # fmt: skip
    return [
        {"parameter": name, "unit": unit, "points": [{"t": t, "value": v} for t, v in points]}
        for name, unit, points in rows
    ]
