"""Job ``parse_raw``: artifacts to the canonical stream set (GNSS, IMU, AUX), source units.

Each artifact is decompressed, read by the reader of its format (from the
``artifact_classify`` summary when present, else sniffed again) and the streams of all
artifacts are concatenated in artifact order. Values keep the units the source used; the
``units`` map of the summary (and each field's ``unit`` metadata) says which, and
``normalise_units`` converts. Timestamps are already UTC microseconds but not yet cleaned.

Datasets: ``gnss``, ``imu``, ``aux`` (always all three; a missing stream is an empty table).

Summary: ``format`` (of the first artifact), ``formats``, ``rows`` (per stream),
``capabilities`` (``gnss``/``imu``/``aux``: stream has rows; ``gnss_quality``:
``insufficient`` below 10 fixes or median HDOP above 5, ``degraded`` above HDOP 2, else
``good`` - the fusion gate reads it), ``gnss_fix`` (at least one
valid fix), ``gnss_fix_reason`` (None, ``NO_GNSS_STREAM``, ``NO_FIX``, ``SIMULATOR_ONLY``
for demo-mode receivers or ``NO_POSITION_DATA`` for a FIT activity recorded without GNSS,
such as an indoor run), ``device_laps`` (laps the device recorded, FIT only: a hint next to
the detected laps), ``units``, ``imu_frame``, ``aux_channels``, ``readers`` (per
artifact reader counters such as NMEA ``bad_checksum``/``truncated``), ``truncated`` (names of
the files that were cut off and read up to the cut - the session holds what came before) and
``notes`` (one sentence per such file, and per FIT file dated from the FIT epoch because its
timestamps are relative, for the CLI and the run's readers). ``capabilities.gnss_reason`` is
``gnss_fix_reason`` again, for the job gates (an indoor FIT: ``NO_POSITION_DATA``). A log
without a fix is not an error here; stages that need a fix fail with ``NO_GNSS_FIX``
themselves.

Config: ``session_date`` (``YYYY-MM-DD``, from the upload's ``--date`` / ``date`` field) dates
an NMEA log that has no date of its own (such a log without it fails with
``NO_SESSION_DATE``) and a FIT file whose timestamps count from the device's power-on.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from schemas import error_codes as codes
from schemas.errors import unexpected
from stages.batch import canonical, formats
from stages.batch.artifact_validate import Limits, plain_bytes
from stages.batch.contract import SessionStageError, StageInput, StageOutput, run_config
from stages.batch.formats.parsed import FLU, ParsedSession
from stages.batch.formats.sniff import sniff

MIN_FIXES: Final = 10
DEGRADED_HDOP: Final = 2.0
INSUFFICIENT_HDOP: Final = 5.0


def _format_of(name: str, plain: bytes, classified: dict[str, Any]) -> str:
    known = classified.get(name, {}).get("format")
    if isinstance(known, str) and known in formats.FORMATS:
        return known
    found = sniff(plain)
    if found is None:
        raise SessionStageError(f"{name}: unsupported content", code=codes.UNSUPPORTED_FORMAT)
    return found.format


def _merge_units(parts: list[ParsedSession]) -> tuple[dict[str, dict[str, str]], str]:
    units: dict[str, dict[str, str]] = {}
    frame: str | None = None
    for part in parts:
        for stream, cols in part.units.items():
            if stream not in part.streams or part.streams[stream].num_rows == 0:
                continue
            have = units.setdefault(stream, {})
            for col, unit in cols.items():
                if have.setdefault(col, unit) != unit:
                    raise SessionStageError(
                        f"artifacts disagree on the unit of {stream}.{col}",
                        code=codes.UNSUPPORTED_FORMAT,
                    )
        imu = part.streams.get(canonical.IMU)
        if imu is not None and imu.num_rows:
            if frame is not None and frame != part.imu_frame:
                raise SessionStageError(
                    "artifacts disagree on the IMU frame", code=codes.UNSUPPORTED_FORMAT
                )
            frame = part.imu_frame
    return units, frame or FLU


def _session_date(config: Any) -> dt.date | None:
    return run_config(config).session_date  # a malformed one: NO_SESSION_DATE


def _fix_reason(parts: list[ParsedSession], gnss_rows: int) -> str | None:
    if gnss_rows:
        return None
    if not any(canonical.GNSS in p.streams for p in parts):
        return "NO_GNSS_STREAM"
    if any(p.stats.get("records") and not p.stats.get("records_with_position") for p in parts):
        return "NO_POSITION_DATA"
    if any(p.stats.get("simulated_epochs") for p in parts):
        return "SIMULATOR_ONLY"
    return "NO_FIX"


def gnss_quality(gnss: pa.Table) -> str:
    """``good`` / ``degraded`` / ``insufficient`` for fusion gating, from fix count and HDOP."""
    if gnss.num_rows < MIN_FIXES:
        return "insufficient"
    hdop = pc.approximate_median(gnss.column("hdop")).as_py()
    if hdop is not None and hdop > INSUFFICIENT_HDOP:
        return "insufficient"
    if hdop is not None and hdop > DEGRADED_HDOP:
        return "degraded"
    return "good"


def run(inp: StageInput) -> StageOutput:
    """Parse every artifact into the canonical stream set (see module docstring)."""
    if not inp.artifacts:
        raise SessionStageError("the run has no artifact", code=codes.NO_ARTIFACT)
    limits = Limits.from_config(inp.config)
    listed = inp.summaries.get("artifact_classify", {}).get("artifacts", [])
    classified = {a["name"]: a for a in listed if isinstance(a, dict) and "name" in a}
    parts: list[ParsedSession] = []
    readers: list[dict[str, Any]] = []
    fmts: list[str] = []
    session_date = _session_date(inp.config)
    for blob in inp.artifacts:
        inp.checkpoint()  # between files: each one is decompressed and decoded whole
        plain, _ = plain_bytes(blob, limits)
        fmt = _format_of(blob.name, plain, classified)
        try:
            parsed = formats.read(fmt, plain, session_date=session_date)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            # A value Arrow cannot store in its column (a cast that would lose it): Arrow's
            # text quotes the value, so the message says where the reader met it instead.
            raise SessionStageError(
                f"{blob.name}: a value does not fit its column ({unexpected(exc)})",
                code=codes.CORRUPT_ARTIFACT,
            ) from None
        parts.append(parsed)
        fmts.append(fmt)
        readers.append({"name": blob.name, "format": fmt, **parsed.stats})
    inp.checkpoint()
    units, frame = _merge_units(parts)
    datasets: dict[str, pa.Table] = {}
    for stream in canonical.STREAMS:
        tables = [p.streams[stream] for p in parts if stream in p.streams]
        table = pa.concat_tables(tables) if tables else canonical.empty(stream)
        datasets[stream] = canonical.conform(stream, table)
    rows = {s: t.num_rows for s, t in datasets.items()}
    aux_channels = sorted(pc.unique(datasets[canonical.AUX].column("channel")).to_pylist())
    fix_reason = _fix_reason(parts, rows[canonical.GNSS])
    summary = {
        "format": fmts[0],
        "formats": fmts,
        "rows": rows,
        "capabilities": {
            **{s: n > 0 for s, n in rows.items()},
            "gnss_quality": gnss_quality(datasets[canonical.GNSS]),
            "gnss_reason": fix_reason,
        },
        "gnss_fix": rows[canonical.GNSS] > 0,
        "gnss_fix_reason": fix_reason,
        "units": units,
        "imu_frame": frame,
        "aux_channels": aux_channels,
        "device_laps": [lap for p in parts for lap in p.stats.get("device_laps", [])],
        "readers": readers,
        "truncated": [r["name"] for r in readers if r.get("format") == "fit" and r["truncated"]],
        "notes": [note for r in readers for note in _notes(r)],
    }
    return StageOutput(datasets=datasets, summary=summary)


def _notes(reader: dict[str, Any]) -> list[str]:
    """What a user should know about how one file was read."""
    if reader.get("format") != "fit":
        return []
    notes = []
    if reader.get("truncated"):
        notes.append(
            f"{reader['name']} is cut off at byte {reader['cut_at_byte']} "
            f"({reader['missing_bytes']} bytes missing): read up to the cut, "
            f"{reader['records']} records"
        )
    if reader.get("dated_from") == "fit_epoch":
        notes.append(
            f"{reader['name']}: its timestamps count from the device's power-on, so it is "
            "dated from the FIT epoch (1989-12-31); give the real day with --date YYYY-MM-DD"
        )
    return notes
