"""Write canonical streams as a FIT activity file with Garmin's encoder (``garmin-fit-sdk``).

Used for synthetic sessions (``tideway sessions synth --format fit``) and round-trip tests.
FIT ``record`` timestamps are whole seconds, so GNSS is resampled to 1 Hz at whole seconds by
linear interpolation of position, altitude and speed (picking the nearest fix instead would
shift positions by up to half a sample period in time). AUX channels the reader maps
(heart rate, cadence, power, temperature) are written on records whose second they fall on;
IMU has no FIT record form and is not written. The encoder builds the file in memory.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import pyarrow as pa
from garmin_fit_sdk import Encoder, Profile

from stages.batch import canonical

_SEMICIRCLES_PER_DEG: Final = 2**31 / 180.0
_S: Final = 1_000_000
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
    gnss = streams.get(canonical.GNSS, canonical.empty(canonical.GNSS))
    aux = streams.get(canonical.AUX, canonical.empty(canonical.AUX))
    ts = gnss.column("ts").cast(pa.int64()).to_numpy().astype(np.float64)
    if ts.size:
        first, last = int(np.ceil(ts[0] / _S)), int(np.floor(ts[-1] / _S))
        seconds = np.arange(first, last + 1, dtype=np.int64)
    else:
        seconds = np.zeros(0, dtype=np.int64)
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
    start = _utc(int(seconds[0]) * _S) if seconds.size else dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    enc = Encoder()
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
    return bytes(enc.close())
