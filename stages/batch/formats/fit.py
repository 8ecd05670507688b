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
(both already m/s and metres). A record without a position keeps its speed as the AUX channel
``speed`` (m/s: indoor sessions, or a receiver without a fix). Heart rate, cadence, power and
temperature become AUX channels (``heart_rate``, ``cadence``, ``power``, ``temperature``)
whether or not the record has a position. Heart rate recorded by a strap
in ``hr`` messages (swimming: the strap stores beats under water and the watch writes them
afterwards) becomes ``heart_rate`` too: each message holds several ``filtered_bpm`` values
with their ``event_timestamp`` (1/1024 s of device time, in full or packed as 12-bit deltas);
a message with a ``timestamp`` and one event anchors device time to real time, and every
value is placed at ``anchor + (event - anchor event)``, across the 32-bit counter's
roll-over. Developer fields are ignored. Device-recorded ``lap`` messages are kept in
``stats`` (``device_laps``) as a hint next to detected laps.

Timestamps count seconds from 1989-12-31T00:00:00Z; fitdecode returns absolute ones as UTC
datetimes. Values below 0x10000000 are, per the FIT protocol, seconds since the device powered
on; they are counted in ``relative_timestamps``. With a ``session_date`` (the upload's
``--date``) they are rebased so the earliest lands at 00:00:00 UTC of that day (spacing, so
every duration, unchanged; ``dated_from: "session_date"``); without one they are read from
the FIT epoch (``dated_from: "fit_epoch"``: the date, around 1990, is not real).

Damage: a file cut off before its end (``FitEOFError``: the last message incomplete, no CRC)
is read up to the cut when at least one ``record`` came before it; ``stats`` then say
``truncated: true``, the byte offset of the cut and how many bytes the header promised that
are missing. A cut before any record, a broken header, a bad CRC (damage inside the data, not
a cut) or a field that cannot be decoded end in ``FIT_CORRUPT``; a valid FIT file whose
``file_id`` type is not ``activity`` (settings, workouts, courses...) in ``FIT_NOT_ACTIVITY``.
Nothing is returned for those, so nothing half-read is written. The decoder gets an in-memory
``BytesIO``: this module does no I/O.
"""

from __future__ import annotations

import datetime as dt
import importlib
import io
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import fitdecode
import pyarrow as pa

from schemas import error_codes as codes
from schemas.errors import unexpected
from stages.batch import canonical
from stages.batch.contract import SessionStageError
from stages.batch.formats.parsed import ParsedSession
from stages.batch.formats.spec import FormatSpec, Head, Sniffed, one_layout

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
_RELATIVE_LIMIT: Final = 0x10000000  # FIT: timestamps below this are since power-on
SPEED: Final = "speed"
"""AUX channel of the speed of records without a position (m/s)."""


def is_fit(head: bytes) -> bool:
    """Whether ``head`` starts with a FIT file header (size 12 or 14, ``.FIT`` at 8-11)."""
    return len(head) >= 12 and head[0] in (12, 14) and head[8:12] == FIT_SIGNATURE


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


@dataclass(frozen=True, kw_only=True)
class _Decoded:
    """The data messages of a file, decoder warnings, and where a cut-off file ends."""

    messages: list[fitdecode.FitDataMessage]
    warnings: int
    cut_at: int | None = None  # byte offset of the cut (None: the file is whole)
    missing_bytes: int = 0  # bytes the header promised beyond the cut


def _declared_size(data: bytes) -> int | None:
    """The file size the FIT header promises: header, data and the 2-byte CRC."""
    if not is_fit(data):
        return None
    return int(data[0]) + int.from_bytes(data[4:8], "little") + 2


def _messages(data: bytes) -> _Decoded:
    """Every data message and the decoder warnings (tolerated oddities); a file cut off is
    decoded up to the cut (see the module docstring for what is too damaged)."""
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
        except fitdecode.FitEOFError as exc:
            if not any(m.name == "record" for m in out):
                raise SessionStageError(
                    f"FIT file is corrupt or cut off before its first record: {exc}",
                    code=codes.FIT_CORRUPT,
                ) from exc
            declared = _declared_size(data) or len(data)
            return _Decoded(
                messages=out,
                warnings=len(seen),
                cut_at=len(data),
                missing_bytes=max(declared - len(data), 0),
            )
        except fitdecode.FitError as exc:  # its text: offsets, sizes, CRCs, definitions
            raise SessionStageError(
                f"FIT file is corrupt or cut off: {exc}", code=codes.FIT_CORRUPT
            ) from exc
        except (ValueError, KeyError, IndexError) as exc:  # their text may quote a field
            raise SessionStageError(
                f"FIT file is corrupt or cut off ({unexpected(exc)})", code=codes.FIT_CORRUPT
            ) from exc
    return _Decoded(messages=out, warnings=len(seen))


def _raw_seconds(value: Any) -> float | None:
    """A FIT timestamp as seconds since the FIT epoch (what fitdecode left raw is that)."""
    if isinstance(value, dt.datetime):
        return value.timestamp() - FIT_EPOCH.timestamp()
    if isinstance(value, int | float):
        return float(value)
    return None


def _unpack12(raw: Any) -> list[int]:
    """The 12-bit values packed little-endian in ``event_timestamp_12``'s bytes."""
    if not isinstance(raw, list | tuple | bytes) or not all(isinstance(b, int) for b in raw):
        return []
    bits = int.from_bytes(bytes(raw), "little")
    return [(bits >> (12 * i)) & 0xFFF for i in range(len(raw) * 8 // 12)]


def _hr_values(messages: list[fitdecode.FitDataMessage]) -> list[tuple[float, float]]:
    """(seconds since the FIT epoch, bpm) of every value in ``hr`` messages (see the module
    docstring). Event times are counted in 1/1024 s ticks: in full (``event_timestamp``) or as
    their low 12 bits (``event_timestamp_12``, eight to a message), which advance the last
    full count. Values before the first anchor, or whose counts disagree, are skipped."""
    out: list[tuple[float, float]] = []
    anchor: float | None = None
    anchor_ticks = last = 0
    for msg in messages:
        if msg.name != "hr":
            continue
        fields = {f.name: f for f in msg.fields}  # expanded components repeat a name
        packed = fields.get("event_timestamp_12")
        ticks: list[int] = []
        if packed is not None:
            for low in _unpack12(packed.raw_value):
                last += (low - last) & 0xFFF
                ticks.append(last)
        else:
            full = [f.value for f in msg.fields if f.name == "event_timestamp"]
            for value in full[0] if len(full) == 1 and isinstance(full[0], list | tuple) else full:
                if isinstance(value, int | float):
                    last = round(value * 1024)
                    ticks.append(last)
        bpm_field = fields.get("filtered_bpm")
        bpm = bpm_field.value if bpm_field is not None else None
        bpms = list(bpm) if isinstance(bpm, list | tuple) else [] if bpm is None else [bpm]
        when = _raw_seconds(fields["timestamp"].value) if "timestamp" in fields else None
        if when is not None and len(ticks) == 1:
            fraction = fields.get("fractional_timestamp")
            extra = fraction.value if fraction is not None else None
            anchor = when + (float(extra) if isinstance(extra, int | float) else 0.0)
            anchor_ticks = ticks[0]
        if anchor is None or len(ticks) != len(bpms):
            continue
        for tick, value in zip(ticks, bpms, strict=True):
            if not isinstance(value, int | float):
                continue
            # The 32-bit count may have rolled over since the anchor.
            out.append((anchor + ((tick - anchor_ticks) % 2**32) / 1024, float(value)))
    return out


def read(data: bytes, *, session_date: dt.date | None = None) -> ParsedSession:
    """Parse a FIT activity (plain bytes) into GNSS + AUX streams (canonical units);
    ``session_date`` dates a file whose timestamps are relative (module docstring)."""
    decoded = _messages(data)
    messages = decoded.messages
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
    aux: list[tuple[float, str, float]] = []  # (seconds since the FIT epoch, channel, value)
    laps: list[dict[str, Any]] = []
    records = relative = 0
    for msg in messages:
        if msg.name == "lap":
            values = _values(msg)
            lap: dict[str, Any] = {
                "start": _raw_seconds(values.get("start_time")),
                "end": _raw_seconds(values.get("timestamp")),
            }
            lap.update({k: _first(values, k) for k in _LAP_FIELDS})
            laps.append(lap)
            continue
        if msg.name != "record":
            continue
        values = _values(msg)
        ts = _raw_seconds(values.get("timestamp"))
        if ts is None:
            continue
        records += 1
        # fitdecode leaves values below 0x10000000 raw: FIT calls them seconds since the
        # device powered on, not since the FIT epoch, so the date they give is not real.
        relative += ts < _RELATIVE_LIMIT
        lat = _first(values, "position_lat")
        lon = _first(values, "position_long")
        speed = _first(values, "enhanced_speed", "speed")
        if lat is not None and lon is not None:
            g["ts"].append(ts)
            g["lat"].append(lat * _DEG_PER_SEMICIRCLE)
            g["lon"].append(lon * _DEG_PER_SEMICIRCLE)
            g["alt"].append(_first(values, "enhanced_altitude", "altitude"))
            g["speed"].append(speed)
        elif speed is not None:
            aux.append((ts, SPEED, speed))
        for field, channel in _AUX_FIELDS:
            value = _first(values, field)
            if value is not None:
                aux.append((ts, channel, value))
    hr = _hr_values(messages)
    aux += [(ts, canonical.HEART_RATE, bpm) for ts, bpm in hr]
    times = [*g["ts"], *(a[0] for a in aux)]
    times += [x for lap in laps for x in (lap["start"], lap["end"]) if x is not None]
    shift, dated_from = _dating([x for x in times if x < _RELATIVE_LIMIT], session_date)

    def us(seconds: float | None) -> int | None:
        if seconds is None:
            return None
        moved = seconds + shift if seconds < _RELATIVE_LIMIT else seconds
        return round((FIT_EPOCH.timestamp() + moved) * 1_000_000)

    aux.sort(key=lambda row: row[0])
    gnss = pa.table(
        {
            "ts": pa.array([us(x) for x in g["ts"]], canonical.TS_TYPE),
            "lat_deg": pa.array(g["lat"], pa.float64()),
            "lon_deg": pa.array(g["lon"], pa.float64()),
            "alt_m": pa.array(g["alt"], pa.float64()),
            "speed_mps": pa.array(g["speed"], pa.float64()),
        }
    )
    aux_table = pa.table(
        {
            "ts": pa.array([us(row[0]) for row in aux], canonical.TS_TYPE),
            "channel": pa.array([row[1] for row in aux], pa.string()),
            "value": pa.array([row[2] for row in aux], pa.float64()),
        }
    )
    device_laps = [
        {"start_us": us(lap.pop("start")), "end_us": us(lap.pop("end")), **lap} for lap in laps
    ]
    stats: dict[str, Any] = {
        "records": records,
        "records_with_position": len(g["ts"]),
        "aux_values": len(aux),
        "hr_values": len(hr),
        "speed_without_position": sum(1 for row in aux if row[1] == SPEED),
        "decoder_warnings": decoded.warnings,
        "relative_timestamps": relative,
        "dated_from": dated_from,
        "truncated": decoded.cut_at is not None,
        "device_laps": device_laps,
    }
    if decoded.cut_at is not None:
        stats["cut_at_byte"] = decoded.cut_at
        stats["missing_bytes"] = decoded.missing_bytes
    return ParsedSession(
        streams={
            canonical.GNSS: canonical.conform(canonical.GNSS, gnss),
            canonical.AUX: canonical.conform(canonical.AUX, aux_table),
        },
        stats=stats,
    )


def _dating(relative: list[float], session_date: dt.date | None) -> tuple[float, str | None]:
    """Seconds to add to relative timestamps, and where the session's date comes from
    (``None``: every timestamp is absolute)."""
    if not relative:
        return 0.0, None
    if session_date is None:
        return 0.0, "fit_epoch"
    midnight = dt.datetime.combine(session_date, dt.time(), tzinfo=dt.UTC)
    return (midnight - FIT_EPOCH).total_seconds() - min(relative), "session_date"


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
    read=read,
    write=one_layout(write),
    bad_input=frozenset({codes.FIT_CORRUPT, codes.FIT_NOT_ACTIVITY}),
)
