"""The canonical schemas and their helpers."""

from __future__ import annotations

import pyarrow as pa
import pytest

from stages.batch import canonical
from stages.batch.contract import SessionStageError, StageInput, StageOutput
from stages.errors import StageError


def test_schemas_have_the_documented_columns_and_types() -> None:
    assert canonical.GNSS_SCHEMA.names == [
        "ts",
        "lat_deg",
        "lon_deg",
        "alt_m",
        "speed_mps",
        "course_deg",
        "hdop",
        "fix_quality",
        "sats",
    ]
    assert canonical.GNSS_SCHEMA.field("fix_quality").type == pa.int8()
    assert canonical.GNSS_SCHEMA.field("sats").type == pa.int16()
    assert canonical.IMU_SCHEMA.names[1:] == [
        "ax_mps2",
        "ay_mps2",
        "az_mps2",
        "gx_rps",
        "gy_rps",
        "gz_rps",
    ]
    assert canonical.AUX_SCHEMA.names == ["ts", "channel", "value"]
    for schema in canonical.SCHEMAS.values():
        assert schema.field("ts").type == pa.timestamp("us", tz="UTC")


def test_unit_metadata() -> None:
    table = canonical.empty("imu")
    assert canonical.field_unit(table, "gz_rps") == "rad/s"
    assert canonical.field_unit(table, "ts") is None


def test_conform_adds_nulls_drops_extras_and_casts() -> None:
    raw = pa.table(
        {
            "extra": [1, 2],
            "lon_deg": [2.0, 3.0],
            "ts": pa.array([0, 1], pa.timestamp("us", tz="UTC")),
            "lat_deg": [1.0, 2.0],
            "sats": pa.array([5, 6], pa.int64()),
        }
    )
    out = canonical.conform("gnss", raw)
    assert out.schema.names == canonical.GNSS_SCHEMA.names
    assert out.column("sats").type == pa.int16()
    assert out.column("alt_m").null_count == 2


def test_conform_requires_position() -> None:
    with pytest.raises(ValueError, match="lat_deg"):
        canonical.conform("gnss", pa.table({"ts": pa.array([0], canonical.TS_TYPE)}))


def test_level_names() -> None:
    assert canonical.level_name("gnss", "L1") == "gnss_L1"
    with pytest.raises(ValueError):
        canonical.level_name("gnss", "L3")


def test_contract_defaults_and_error() -> None:
    assert StageInput().datasets == {}
    assert StageOutput().summary == {}
    err = SessionStageError("nope", code="NO_GNSS_FIX")
    assert isinstance(err, StageError)
    assert (err.code, err.retriable) == ("NO_GNSS_FIX", False)
