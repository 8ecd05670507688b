"""The drift gate: a reprocess's key figures against the run it would replace (spec 003).

Spec 003 asks of a reprocess with new algorithms to "compare key metrics vs the previous good
version; alert or block if deltas exceed thresholds". :func:`compare` sets the new run's summary
(``publish_session``'s run summary) beside the active run's and checks each figure against its
limit:

==========================  =======================================  ===========================
figure                      from the run summary                     exceeds when
==========================  =======================================  ===========================
``laps``                    ``laps.count``                           it moves by more than
                                                                     ``max_lap_count_change``
``best_lap_time_s``         ``laps.best_lap_time_s``                 relative change above
``median_lap_time_s``       ``laps.median_lap_time_s``               ``max_lap_time_change``
``distance_m``              ``distance_m``                           ``max_distance_change``
``max_speed_mps``           ``laps.max_speed_mps``                   ``max_speed_change``
``samples.<stream>``        ``streams.<stream>`` (rows)              ``max_sample_change``
``feature.<name>``          ``features.<name>.available``            available before, not now
==========================  =======================================  ===========================

A figure only one side has is reported and never exceeds, except a stream or a feature the new
run lost. Pure: the caller reads the summaries and writes the report (``summary.drift``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.error_codes import DRIFT_EXCEEDED

__all__ = ["DriftLimits", "compare"]



@dataclass(frozen=True, kw_only=True)
class DriftLimits:
    """How far each key figure may move (relative changes are fractions: 0.02 = 2 %)."""

    max_lap_count_change: int = 0
    max_lap_time_change: float = 0.02
    max_distance_change: float = 0.02
    max_speed_change: float = 0.05
    max_sample_change: float = 0.05


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def _relative(before: float, after: float) -> float:
    if before == after:
        return 0.0
    return abs(after - before) / abs(before) if before else float("inf")


def compare(active: Mapping[str, Any], new: Mapping[str, Any], limits: DriftLimits
            ) -> dict[str, Any]:
    """``{"exceeded", "reason", "against_run", "checks": [...]}``: each check names the figure,
    its value before and after, the change, the limit and whether it exceeds it."""
    checks: list[dict[str, Any]] = []

    def check(figure: str, before: Any, after: Any, *, limit: float, absolute: bool = False,
              lost_exceeds: bool = False) -> None:
        b, a = _num(before), _num(after)
        if b is None or a is None:
            if before is None and after is None:
                return
            exceeded = lost_exceeds and before is not None and after is None
            checks.append({"figure": figure, "before": before, "after": after, "change": None,
                           "limit": limit, "exceeded": exceeded})
            return
        change = abs(a - b) if absolute else _relative(b, a)
        checks.append({"figure": figure, "before": before, "after": after,
                       "change": round(change, 6) if change != float("inf") else None,
                       "limit": limit, "exceeded": change > limit})

    laps_b, laps_a = active.get("laps") or {}, new.get("laps") or {}
    check("laps", laps_b.get("count"), laps_a.get("count"), limit=limits.max_lap_count_change,
          absolute=True)
    for figure in ("best_lap_time_s", "median_lap_time_s"):
        check(figure, laps_b.get(figure), laps_a.get(figure), limit=limits.max_lap_time_change)
    check("distance_m", active.get("distance_m"), new.get("distance_m"),
          limit=limits.max_distance_change)
    check("max_speed_mps", laps_b.get("max_speed_mps"), laps_a.get("max_speed_mps"),
          limit=limits.max_speed_change)
    streams_b, streams_a = active.get("streams") or {}, new.get("streams") or {}
    for stream in sorted(set(streams_b) | set(streams_a)):
        check(f"samples.{stream}", streams_b.get(stream), streams_a.get(stream),
              limit=limits.max_sample_change, lost_exceeds=True)
    features_b, features_a = active.get("features") or {}, new.get("features") or {}
    for name in sorted(set(features_b) | set(features_a)):
        had = bool((features_b.get(name) or {}).get("available"))
        has = bool((features_a.get(name) or {}).get("available"))
        if had or has:
            checks.append({"figure": f"feature.{name}", "before": had, "after": has,
                           "change": None, "limit": None, "exceeded": had and not has})
    exceeded = any(c["exceeded"] for c in checks)
    return {"exceeded": exceeded, "reason": DRIFT_EXCEEDED if exceeded else None,
            "checks": checks}
