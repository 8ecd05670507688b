"""Garmin FIT activity files: reader (via ``fitdecode``) into the canonical streams.

Decoder choice
--------------
``bench/fit_decoders.py`` compared ``fitdecode`` and Garmin's ``garmin-fit-sdk`` on the ten real
files in ``../shared/data/fit`` (results in ``bench/results/fit_decoders.json``). The SDK was
about 1.5x faster (Wahoo ride, 13,471 records: 1.45 s against 2.15 s) but refuses
``compressed-speed-distance.fit`` (compressed-timestamp headers: "Compressed timestamp
messages are not currently supported") and returns partial messages from the truncated file
next to its error list. ``fitdecode`` read every valid file, including the Coros file with
misaligned field sizes (a warning, not an error), and raises a typed exception
(``FitHeaderError``, ``FitEOFError``, ``FitCRCError``) for the corrupt ones. Tolerance of real
files decides: ``fitdecode``.

Mapping
-------
``record`` messages become GNSS rows when they carry a position (semicircles to degrees:
``value * 180 / 2**31``); speed prefers ``enhanced_speed`` and altitude ``enhanced_altitude``
(both already m/s and metres). Heart rate, cadence, power and temperature become AUX channels
(``heart_rate``, ``cadence``, ``power``, ``temperature``) whether or not the record has a
position. Developer fields are ignored. Device-recorded ``lap`` messages are kept in ``stats``
(``device_laps``) as a hint next to detected laps. Timestamps count seconds from
1989-12-31T00:00:00Z; fitdecode returns absolute ones as UTC datetimes. Values below
0x10000000 are, per the FIT protocol, seconds since the device powered on: they are read
from the FIT epoch too (keeping durations right) and counted in ``relative_timestamps`` so
the absolute date is known not to be real.

Errors: a damaged or cut-off file ends in ``FIT_CORRUPT``; a valid FIT file whose ``file_id``
type is not ``activity`` (settings, workouts, courses...) ends in ``FIT_NOT_ACTIVITY``. Nothing
is returned for either, so nothing half-read is written. The decoder gets an in-memory
``BytesIO``: this module does no I/O.
"""

from __future__ import annotations

import datetime as dt
import importlib
import io
import threading
import warnings
from collections.abc import Mapping
from typing import Any, Final

import fitdecode
import pyarrow as pa

from schemas import error_codes as codes
from schemas.errors import unexpected
from stages.batch import canonical
from stages.batch.contract import SessionStageError
from stages.batch.formats.parsed import ParsedSession
from stages.batch.formats.spec import FormatSpec, Head, Sniffed, dateless, one_layout

__all__ = ["FIT_SIGNATURE", "SPEC", "is_fit", "read", "sniff", "write"]

FIT_SIGNATURE: Final = b".FIT"
FIT_EPOCH: Final = dt.datetime(1989, 12, 31, tzinfo=dt.UTC)
_DEG_PER_SEMICIRCLE: Final = 180.0 / 2**31
_AUX_FIELDS: Final = (
    ("heart_rate", canonical.HEART_RATE),
    ("cadence", canonical.CADENCE),
    ("power", "power"),
    ("temperature", canonical.TEMPERATURE),
)
_LAP_FIELDS: Final = ("total_elapsed_time", "total_timer_time", "total_distance")


def is_fit(head: bytes) -> bool:
    """Whether ``head`` starts with a FIT file header (size 12 or 14, ``.FIT`` at 8-11)."""
    return len(head) >= 12 and head[0] in (12, 14) and head[8:12] == FIT_SIGNATURE


def _us(value: Any) -> int | None:
    """A FIT timestamp (datetime, or raw seconds from the FIT epoch) to UTC microseconds."""
    if isinstance(value, dt.datetime):
        return round(value.timestamp() * 1_000_000)
    if isinstance(value, int | float):
        return round(((FIT_EPOCH.timestamp()) + value) * 1_000_000)
    return None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _first(values: dict[str, Any], *names: str) -> float | None:
    for name in names:
        value = _num(values.get(name))
        if value is not None:
            return value
    return None


def _values(msg: fitdecode.FitDataMessage) -> dict[str, Any]:
    """Field name to value, built once per message (``get_value`` scans the fields each time).

    Developer fields are left out: they are the device maker's, not the FIT profile's.
    """
    return {
        f.name: f.value
        for f in msg.fields
        if not isinstance(f.field_def, fitdecode.types.DevFieldDefinition)
    }


# ``warnings.catch_warnings`` swaps the process-wide filter list (Python 3.11 has no
# per-thread warning context), and the worker runs stages in threads: two reads at once
# restored each other's filters mid-read, so a warning escaped one read's count, or was
# raised inside it where warnings are errors (tests/unit/stages/batch/formats/test_fit.py).
# One read at a time costs no parallelism: fitdecode is pure Python and holds the GIL.
_COUNTING_WARNINGS = threading.Lock()


def _messages(data: bytes) -> tuple[list[fitdecode.FitDataMessage], int]:
    """Every data message, and how many decoder warnings (tolerated oddities) were seen."""
    out: list[fitdecode.FitDataMessage] = []
    with _COUNTING_WARNINGS, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            with fitdecode.FitReader(
                io.BytesIO(data),
                check_crc=fitdecode.CrcCheck.RAISE,
                keep_raw_chunks=False,
            ) as reader:
                for frame in reader:
                    if isinstance(frame, fitdecode.FitDataMessage):
                        out.append(frame)
        except fitdecode.FitError as exc:  # its text: offsets, sizes, CRCs, definitions
            raise SessionStageError(
                f"FIT file is corrupt or cut off: {exc}", code=codes.FIT_CORRUPT
            ) from exc
        except (ValueError, KeyError, IndexError) as exc:  # their text may quote a field
            raise SessionStageError(
                f"FIT file is corrupt or cut off ({unexpected(exc)})", code=codes.FIT_CORRUPT
            ) from exc
    return out, len(seen)


def read(data: bytes) -> ParsedSession:
    """Parse a FIT activity (plain bytes) into GNSS + AUX streams (canonical units)."""
    messages, warned = _messages(data)
    file_types = [
        m.get_value("type", fallback=None) for m in messages if m.name == "file_id"
    ]
    if not file_types:
        raise SessionStageError("FIT file has no file_id message", code=codes.FIT_CORRUPT)
    if file_types[0] != "activity":
        raise SessionStageError(
            f"FIT file is a {file_types[0]!r} file, not an activity",
            code=codes.FIT_NOT_ACTIVITY,
        )
    g: dict[str, list[Any]] = {k: [] for k in ("ts", "lat", "lon", "alt", "speed")}
    aux_ts: list[int] = []
    aux_ch: list[str] = []
    aux_val: list[float] = []
    laps: list[dict[str, Any]] = []
    records = relative = 0
    for msg in messages:
        if msg.name == "lap":
            values = _values(msg)
            start = _us(values.get("start_time"))
            end = _us(values.get("timestamp"))
            lap: dict[str, Any] = {"start_us": start, "end_us": end}
            lap.update({k: _first(values, k) for k in _LAP_FIELDS})
            laps.append(lap)
            continue
        if msg.name != "record":
            continue
        values = _values(msg)
        raw_ts = values.get("timestamp")
        ts = _us(raw_ts)
        if ts is None:
            continue
        records += 1
        # fitdecode leaves values below 0x10000000 raw: FIT calls them seconds since the
        # device powered on, not since the FIT epoch, so the date they give is not real.
        relative += not isinstance(raw_ts, dt.datetime)
        lat = _first(values, "position_lat")
        lon = _first(values, "position_long")
        if lat is not None and lon is not None:
            g["ts"].append(ts)
            g["lat"].append(lat * _DEG_PER_SEMICIRCLE)
            g["lon"].append(lon * _DEG_PER_SEMICIRCLE)
            g["alt"].append(_first(values, "enhanced_altitude", "altitude"))
            g["speed"].append(_first(values, "enhanced_speed", "speed"))
        for field, channel in _AUX_FIELDS:
            value = _first(values, field)
            if value is not None:
                aux_ts.append(ts)
                aux_ch.append(channel)
                aux_val.append(value)
    gnss = pa.table(
        {
            "ts": pa.array(g["ts"], canonical.TS_TYPE),
            "lat_deg": pa.array(g["lat"], pa.float64()),
            "lon_deg": pa.array(g["lon"], pa.float64()),
            "alt_m": pa.array(g["alt"], pa.float64()),
            "speed_mps": pa.array(g["speed"], pa.float64()),
        }
    )
    aux = pa.table(
        {
            "ts": pa.array(aux_ts, canonical.TS_TYPE),
            "channel": pa.array(aux_ch, pa.string()),
            "value": pa.array(aux_val, pa.float64()),
        }
    )
    stats: dict[str, Any] = {
        "records": records,
        "records_with_position": len(g["ts"]),
        "aux_values": len(aux_val),
        "decoder_warnings": warned,
        "relative_timestamps": relative,
        "device_laps": laps,
    }
    return ParsedSession(
        streams={
            canonical.GNSS: canonical.conform(canonical.GNSS, gnss),
            canonical.AUX: canonical.conform(canonical.AUX, aux),
        },
        stats=stats,
    )


def write(streams: Mapping[str, pa.Table]) -> bytes:
    """Canonical streams as a FIT activity file (:func:`fit_writer.write`).

    The encoder is Garmin's ``garmin-fit-sdk``, published under Garmin's FIT Protocol License
    rather than an OSI licence, so it is an optional extra (``tideway[fit-writer]``, which
    ``dev`` includes): reading FIT needs only the MIT-licensed ``fitdecode``.
    """
    try:
        fit_writer = importlib.import_module("stages.batch.formats.fit_writer")
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("garmin_fit_sdk"):
            raise
        raise SessionStageError(
            "writing FIT needs Garmin's encoder: pip install 'tideway[fit-writer]'",
            code=codes.CONFIG_ERROR,
        ) from None
    written: bytes = fit_writer.write(streams)
    return written


def sniff(head: Head) -> Sniffed | None:
    """A FIT header, whatever else the head looks like; variant names the header size."""
    if not is_fit(head.raw):
        return None
    return Sniffed(format="fit", variant=f"header{head.raw[0]}", streams=("gnss", "aux"))


SPEC: Final = FormatSpec(
    name="fit",
    media_type="application/vnd.ant.fit",  # IANA-registered
    extensions=frozenset({"fit"}),
    sniff=sniff,
    sniff_priority=10,
    read=dateless(read),
    write=one_layout(write),
    bad_input=frozenset({codes.FIT_CORRUPT, codes.FIT_NOT_ACTIVITY}),
)
