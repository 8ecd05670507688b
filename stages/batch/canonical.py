"""Canonical stream schemas and units of a recorded session.

Theory of operation
-------------------
Whatever the file format, a session becomes up to three long, columnar streams:

``gnss``  one row per receiver fix (epoch)
    ``ts`` timestamp[us, UTC], ``lat_deg``/``lon_deg`` float64 (WGS84 degrees, north/east
    positive), ``alt_m`` float64 (metres as reported; NMEA GGA: above mean sea level),
    ``speed_mps`` float64 (ground speed, m/s), ``course_deg`` float64 (course over ground,
    degrees clockwise from true north, [0, 360)), ``hdop`` float64 (unitless),
    ``fix_quality`` int8 (GGA code: 1 GPS, 2 DGPS, 4 RTK fixed, 5 RTK float, 6 dead reckoning;
    null when the source does not say), ``sats`` int16 (satellites used). Every column but
    ``ts``/``lat_deg``/``lon_deg`` is nullable.
``imu``   one row per inertial sample, body frame FLU: x forward, y left, z up
    ``ts``, ``ax_mps2``/``ay_mps2``/``az_mps2`` float64 (specific force, m/s², so a level
    device at rest reads ``az`` = +9.81), ``gx_rps``/``gy_rps``/``gz_rps`` float64 (angular rate,
    rad/s, right-handed about each axis: ``gz`` > 0 turning left).
``aux``   every other channel in long format: ``ts``, ``channel`` string, ``value`` float64.

Canonical units are SI - metres, seconds, m/s, m/s², rad/s - with three documented exceptions
people actually read: positions and angles stay in degrees (WGS84 lat/lon, course), temperature
is degrees Celsius (every source reports Celsius and an offset unit invites silent mistakes;
kelvin buys nothing here), and rate-like body channels stay per minute (``heart_rate`` in
beats/min, ``cadence`` in rev/min) as every consumer expects. AUX channel names are listed
in :data:`AUX_UNITS`; channels from other sources keep their own name (``topic.key``).

Stages before ``normalise_units`` may carry source units: each field's Arrow metadata key
``unit`` (and the ``parse_raw`` summary's ``units`` map) says which; after ``normalise_units``
every column is in the unit documented here (:data:`CANONICAL_UNITS`). Downsampled levels are
the same schemas under the names ``<stream>_L0``, ``<stream>_L1``, ``<stream>_L2``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import pyarrow as pa

GNSS: Final = "gnss"
IMU: Final = "imu"
AUX: Final = "aux"
STREAMS: Final = (GNSS, IMU, AUX)
LEVELS: Final = ("L0", "L1", "L2")

TS_TYPE: Final = pa.timestamp("us", tz="UTC")

CANONICAL_UNITS: Final[Mapping[str, Mapping[str, str]]] = {
    GNSS: {
        "lat_deg": "deg",
        "lon_deg": "deg",
        "alt_m": "m",
        "speed_mps": "m/s",
        "course_deg": "deg",
        "hdop": "1",
        "fix_quality": "1",
        "sats": "1",
    },
    IMU: {
        "ax_mps2": "m/s2",
        "ay_mps2": "m/s2",
        "az_mps2": "m/s2",
        "gx_rps": "rad/s",
        "gy_rps": "rad/s",
        "gz_rps": "rad/s",
    },
    AUX: {"value": "channel"},
}

# Canonical AUX channels and their units; other channels keep the name their source gives.
HEART_RATE: Final = "heart_rate"
CADENCE: Final = "cadence"
TEMPERATURE: Final = "temperature"
AUX_UNITS: Final[Mapping[str, str]] = {HEART_RATE: "1/min", CADENCE: "1/min", TEMPERATURE: "degC"}


def _field(name: str, typ: pa.DataType, unit: str | None, *, nullable: bool = True) -> pa.Field:
    meta = {b"unit": unit.encode()} if unit else None
    return pa.field(name, typ, nullable=nullable, metadata=meta)


def _schema(stream: str, cols: Iterable[tuple[str, pa.DataType, bool]]) -> pa.Schema:
    units = CANONICAL_UNITS[stream]
    fields = [_field("ts", TS_TYPE, None, nullable=False)]
    fields += [_field(n, t, units.get(n), nullable=nl) for n, t, nl in cols]
    return pa.schema(fields, metadata={b"tideway.stream": stream.encode()})


GNSS_SCHEMA: Final = _schema(
    GNSS,
    [
        ("lat_deg", pa.float64(), False),
        ("lon_deg", pa.float64(), False),
        ("alt_m", pa.float64(), True),
        ("speed_mps", pa.float64(), True),
        ("course_deg", pa.float64(), True),
        ("hdop", pa.float64(), True),
        ("fix_quality", pa.int8(), True),
        ("sats", pa.int16(), True),
    ],
)
IMU_SCHEMA: Final = _schema(IMU, [(n, pa.float64(), False) for n in CANONICAL_UNITS[IMU]])
AUX_SCHEMA: Final = _schema(AUX, [("channel", pa.string(), False), ("value", pa.float64(), False)])

SCHEMAS: Final[Mapping[str, pa.Schema]] = {GNSS: GNSS_SCHEMA, IMU: IMU_SCHEMA, AUX: AUX_SCHEMA}


def level_name(stream: str, level: str) -> str:
    """Dataset name of a downsampled level, e.g. ``level_name("gnss", "L1") == "gnss_L1"``."""
    if stream not in SCHEMAS or level not in LEVELS:
        raise ValueError(f"unknown stream/level {stream!r}/{level!r}")
    return f"{stream}_{level}"


def empty(stream: str) -> pa.Table:
    """An empty table with the canonical schema of ``stream``."""
    return SCHEMAS[stream].empty_table()


def conform(stream: str, table: pa.Table) -> pa.Table:
    """Return ``table`` with exactly the canonical columns of ``stream``, in order and typed.

    Missing nullable columns are added as nulls; extra columns are dropped; types are cast
    safely (a lossy cast raises ``pyarrow.ArrowInvalid``). Field ``unit`` metadata of the input
    is kept, so pre-normalisation tables still say which unit they carry.
    """
    schema = SCHEMAS[stream]
    arrays: list[pa.Array | pa.ChunkedArray] = []
    fields: list[pa.Field] = []
    for f in schema:
        if f.name in table.column_names:
            col = table.column(f.name)
            if col.type != f.type:
                col = col.cast(f.type)
            src = table.schema.field(f.name)
            fields.append(f.with_metadata(src.metadata) if src.metadata else f)
        elif f.nullable:
            col = pa.nulls(table.num_rows, f.type)
            fields.append(f)
        else:
            raise ValueError(f"{stream}: required column {f.name!r} missing")
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=schema.metadata))


def field_unit(table: pa.Table, column: str) -> str | None:
    """The ``unit`` metadata of ``column`` in ``table`` (``None`` when absent)."""
    meta = table.schema.field(column).metadata
    if not meta or b"unit" not in meta:
        return None
    return bytes(meta[b"unit"]).decode()
