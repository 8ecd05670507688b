"""Write canonical streams as a FIT activity file with Garmin's encoder (``garmin-fit-sdk``).

Used for synthetic sessions (``tideway sessions synth --format fit``) and round-trip tests.
FIT ``record`` timestamps are whole seconds, so GNSS is resampled to 1 Hz at whole seconds by
linear interpolation of position, altitude and speed (picking the nearest fix instead would
shift positions by up to half a sample period in time). AUX channels the reader maps
(heart rate, cadence, power, temperature) are written on records whose second they fall on;
IMU has no FIT record form and is not written. The encoder builds the file in memory.

:func:`write_activity` (a session's export, ``tideway sessions export --format fit``) adds what
a device writes around the records: timer events, one ``lap`` message per lap with its exact
time, and the ``session`` and ``activity`` messages.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa
from garmin_fit_sdk import Encoder, Profile

from stages.batch import canonical

_SEMICIRCLES_PER_DEG: Final = 2**31 / 180.0
_S: Final = 1_000_000
_SPEED16_MAX: Final = 65.535  # m/s: the largest a 16-bit FIT speed field (scale 1000) holds
_AUX_FIELDS: Final = {
    canonical.HEART_RATE: "heart_rate",
    canonical.CADENCE: "cadence",
    "power": "power",
    canonical.TEMPERATURE: "temperature",
}
# Message numbers by profile name ("file_id" -> 0, "record" -> 20), from the SDK's profile.
_MESG: Final = {str(name): int(num) for num, name in Profile["types"]["mesg_num"].items()}


def _utc(us: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(us / _S, tz=dt.UTC)


def _interp(at: np.ndarray, ts: np.ndarray, col: pa.ChunkedArray) -> np.ndarray | None:
    values = col.to_numpy(zero_copy_only=False).astype(np.float64)
    ok = ~np.isnan(values)
    if not ok.any():
        return None
    out: np.ndarray = np.interp(at, ts[ok], values[ok])
    return out


def write(streams: Mapping[str, pa.Table]) -> bytes:
    """Serialise canonical GNSS (+ mapped AUX channels) as a FIT activity file."""
    enc = Encoder()
    seconds = _seconds(streams)
    _file_id(enc, seconds)
    _records(enc, streams, seconds)
    return bytes(enc.close())


@dataclass(frozen=True, kw_only=True)
class FitLap:
    """One lap message: its crossings (µs since the epoch), its exact time and its figures."""

    start_us: int
    end_us: int
    time_s: float
    distance_m: float | None = None
    avg_speed_mps: float | None = None
    max_speed_mps: float | None = None


def write_activity(
    streams: Mapping[str, pa.Table], laps: Sequence[FitLap], *, distance_m: float | None
) -> bytes:
    """A whole activity: the records of :func:`write` between a timer start and stop event,
    one ``lap`` message per lap, then the ``session`` and ``activity`` messages.

    FIT datetimes are whole seconds, so a lap's ``start_time`` and ``timestamp`` are its
    crossings truncated to the second; its ``total_elapsed_time`` and ``total_timer_time``
    carry the lap time exactly (the field's resolution is 1 ms). Without laps, one lap covers
    the recording, as a device writes when its lap button was never pressed. ``distance_m``
    is the session's (the records do not carry one)."""
    enc = Encoder()
    seconds = _seconds(streams)
    _file_id(enc, seconds)
    first = int(seconds[0]) * _S if seconds.size else 0
    last = int(seconds[-1]) * _S if seconds.size else 0
    enc.write_mesg({"mesg_num": _MESG["event"], "timestamp": _utc(first), "event": "timer",
                    "event_type": "start"})  # fmt: skip
    _records(enc, streams, seconds)
    enc.write_mesg({"mesg_num": _MESG["event"], "timestamp": _utc(last), "event": "timer",
                    "event_type": "stop_all"})  # fmt: skip
    trigger = "position_lap"
    if not laps:
        trigger = "session_end"
        laps = [FitLap(start_us=first, end_us=last, time_s=(last - first) / _S,
                       distance_m=distance_m)]  # fmt: skip
    for i, lap in enumerate(laps):
        enc.write_mesg({"mesg_num": _MESG["lap"], "message_index": i,
                        "timestamp": _utc(lap.end_us), "start_time": _utc(lap.start_us),
                        "event": "lap", "event_type": "stop", "lap_trigger": trigger,
                        **_figures(lap.time_s, lap.distance_m, lap.avg_speed_mps,
                                   lap.max_speed_mps)})  # fmt: skip
    span_s = (last - first) / _S
    speeds = [lap.max_speed_mps for lap in laps if lap.max_speed_mps is not None]
    avg = distance_m / span_s if distance_m is not None and span_s > 0 else None
    top = max(speeds) if speeds else None
    enc.write_mesg({"mesg_num": _MESG["session"], "message_index": 0, "timestamp": _utc(last),
                    "start_time": _utc(first), "event": "session", "event_type": "stop",
                    "trigger": "activity_end", "sport": "generic", "first_lap_index": 0,
                    "num_laps": len(laps),
                    **_figures(span_s, distance_m, avg, top)})  # fmt: skip
    enc.write_mesg({"mesg_num": _MESG["activity"], "timestamp": _utc(last),
                    "total_timer_time": span_s, "num_sessions": 1, "type": "manual",
                    "event": "activity", "event_type": "stop"})  # fmt: skip
    return bytes(enc.close())


def _figures(
    time_s: float, distance_m: float | None, avg: float | None, top: float | None
) -> dict[str, Any]:
    """A lap's or a session's times, distance and speeds as FIT fields. The 16-bit speed
    fields end at 65.535 m/s, so the 32-bit ``enhanced_`` ones always carry the speed and the
    plain ones only when it fits (a race car is faster)."""
    out: dict[str, Any] = {"total_elapsed_time": time_s, "total_timer_time": time_s}
    if distance_m is not None:
        out["total_distance"] = distance_m
    for name, value in (("avg_speed", avg), ("max_speed", top)):
        if value is not None:
            out[f"enhanced_{name}"] = value
            if value < _SPEED16_MAX:
                out[name] = value
    return out


def _seconds(streams: Mapping[str, pa.Table]) -> np.ndarray:
    """The whole seconds the GNSS rows span (the records' times)."""
    gnss = streams.get(canonical.GNSS, canonical.empty(canonical.GNSS))
    ts = gnss.column("ts").cast(pa.int64()).to_numpy().astype(np.float64)
    if not ts.size:
        return np.zeros(0, dtype=np.int64)
    first, last = int(np.ceil(ts[0] / _S)), int(np.floor(ts[-1] / _S))
    return np.arange(first, last + 1, dtype=np.int64)


def _file_id(enc: Encoder, seconds: np.ndarray) -> None:
    start = _utc(int(seconds[0]) * _S) if seconds.size else dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    enc.write_mesg(
        {
            "mesg_num": _MESG["file_id"],
            "type": "activity",
            "manufacturer": "development",
            "product": 0,
            "serial_number": 1,
            "time_created": start,
        }
    )


def _records(enc: Encoder, streams: Mapping[str, pa.Table], seconds: np.ndarray) -> None:
    """One ``record`` per second of ``seconds``: GNSS interpolated to it, AUX on it."""
    gnss = streams.get(canonical.GNSS, canonical.empty(canonical.GNSS))
    aux = streams.get(canonical.AUX, canonical.empty(canonical.AUX))
    ts = gnss.column("ts").cast(pa.int64()).to_numpy().astype(np.float64)
    at = seconds.astype(np.float64) * _S
    cols = {
        name: _interp(at, ts, gnss.column(name))
        for name in ("lat_deg", "lon_deg", "alt_m", "speed_mps")
    }
    by_second: dict[int, dict[str, float]] = {}
    for t, ch, v in zip(
        aux.column("ts").cast(pa.int64()).to_pylist(),
        aux.column("channel").to_pylist(),
        aux.column("value").to_pylist(),
        strict=True,
    ):
        if ch in _AUX_FIELDS and t % _S == 0:
            by_second.setdefault(t // _S, {})[_AUX_FIELDS[ch]] = v
    for i, sec in enumerate(seconds.tolist()):
        rec: dict[str, Any] = {"mesg_num": _MESG["record"], "timestamp": _utc(sec * _S)}
        lat, lon, alt, speed = (cols[n] for n in ("lat_deg", "lon_deg", "alt_m", "speed_mps"))
        if lat is not None and lon is not None:
            rec["position_lat"] = round(float(lat[i]) * _SEMICIRCLES_PER_DEG)
            rec["position_long"] = round(float(lon[i]) * _SEMICIRCLES_PER_DEG)
        if alt is not None:
            rec["enhanced_altitude"] = float(alt[i])
        if speed is not None:
            rec["enhanced_speed"] = float(speed[i])
        rec.update(by_second.get(sec, {}))
        enc.write_mesg(rec)
