"""Dataset outputs: Parquet + manifest promoted as a unit, reused on retry, verified on read."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from streams.objects import IntegrityError, ObjectStore
from streams.sessions.datasets import (
    MANIFEST,
    idempotency_key,
    load_outputs,
    output_prefix,
    read_table,
    write_outputs,
)


def _table(n: int) -> pa.Table:
    stamps = [datetime(2026, 1, 1, 0, 0, i, tzinfo=UTC) for i in range(n)]
    ts = pa.array(stamps, pa.timestamp("us", "UTC"))
    return pa.table({"ts": ts, "v": pa.array([float(i) for i in range(n)])})


def _key(**overrides: object) -> str:
    args: dict[str, object] = {
        "run_id": "r1",
        "job_type": "parse_raw",
        "input_hashes": ["a" * 64, "b" * 64],
        "config": {"x": 1},
        "versions": {"parser": "1", "pipeline": "1"},
    }
    args.update(overrides)
    return idempotency_key(**args)  # type: ignore[arg-type]


def test_idempotency_key_covers_every_ingredient() -> None:
    base = _key()
    assert _key(input_hashes=["b" * 64, "a" * 64]) == base  # order of inputs does not matter
    for change in (
        {"run_id": "r2"},
        {"job_type": "time_align"},
        {"input_hashes": ["a" * 64]},
        {"config": {"x": 2}},
        {"versions": {"parser": "2", "pipeline": "1"}},
    ):
        assert _key(**change) != base, change


@pytest.mark.parametrize("rename", [True, False])
def test_outputs_are_written_once_and_reused(tmp_path: Path, rename: bool) -> None:
    store = ObjectStore(str(tmp_path), atomic_rename=rename)
    prefix = output_prefix("r1", "parse_raw", _key())
    assert load_outputs(store, prefix) is None
    tables = {"gnss": _table(5), "imu": _table(3)}
    first = write_outputs(store, prefix, tables=tables, summary={"n": 8}, header={"run_id": "r1"})
    assert not first.reused
    assert [d.name for d in first.datasets] == ["gnss", "imu"]
    gnss = first.datasets[0]
    assert gnss.rows == 5 and gnss.time_start == "2026-01-01T00:00:00+00:00"
    assert read_table(store, gnss.url, sha256=gnss.sha256).equals(tables["gnss"])

    # A retry that recomputed the same outputs does not write a second copy.
    again = write_outputs(store, prefix, tables=tables, summary={"n": 8}, header={"run_id": "r1"})
    assert again.reused and again.datasets == first.datasets
    assert sorted(store.list(prefix)) == sorted(
        [f"{prefix}/{MANIFEST}", f"{prefix}/gnss.parquet", f"{prefix}/imu.parquet"]
    )
    assert store.list("tmp") == []
    found = load_outputs(store, prefix)
    assert found is not None and found.datasets == first.datasets and found.summary == {"n": 8}


def test_reuse_verifies_every_file(tmp_path: Path) -> None:
    store = ObjectStore(str(tmp_path))
    prefix = output_prefix("r1", "parse_raw", _key())
    out = write_outputs(store, prefix, tables={"gnss": _table(4)}, summary={}, header={})
    (tmp_path / store.key(out.datasets[0].url)).write_bytes(b"not parquet")
    with pytest.raises(IntegrityError):
        load_outputs(store, prefix)


def test_parquet_bytes_are_deterministic(tmp_path: Path) -> None:
    a = ObjectStore(str(tmp_path / "a"))
    b = ObjectStore(str(tmp_path / "b"))
    out_a = write_outputs(a, "d/x", tables={"t": _table(50)}, summary={}, header={})
    out_b = write_outputs(b, "d/x", tables={"t": _table(50)}, summary={}, header={})
    assert out_a.datasets[0].sha256 == out_b.datasets[0].sha256
