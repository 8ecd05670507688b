"""materialise_clickhouse: Parquet datasets into ClickHouse (chDB), twice = one copy."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from streams.clickhouse import ClickHouse
from streams.errors import PermanentError
from streams.objects import ObjectStore
from streams.sessions.datasets import write_outputs
from streams.sessions.materialise import RECORD_TABLE, materialise_run, table_name

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _series(n: int) -> pa.Table:
    ts = pa.array(
        [T0 + timedelta(milliseconds=100 * i) for i in range(n)], pa.timestamp("us", "UTC")
    )
    return pa.table(
        {
            "ts": ts,
            "speed_mps": pa.array([float(i % 17) if i % 5 else None for i in range(n)]),
            "fix_quality": pa.array([1] * n, pa.int8()),
        }
    )


def _laps() -> pa.Table:
    return pa.table({"lap": pa.array([1, 2], pa.int32()), "lap_time_s": [61.5, 60.25]})


@pytest.fixture
def ch(chdb_dsn: str) -> ClickHouse:
    return ClickHouse(chdb_dsn, f"t_{uuid.uuid4().hex[:10]}")


async def test_materialising_twice_leaves_one_copy(ch: ClickHouse, tmp_path: Path) -> None:
    store = ObjectStore(str(tmp_path))
    out = write_outputs(
        store,
        "datasets/r/x",
        tables={"gnss_L1": _series(250), "gnss_L0": _series(900), "laps": _laps()},
        summary={},
        header={},
    )
    run, session = str(uuid.uuid4()), str(uuid.uuid4())
    first = await materialise_run(
        ch, store, tenant="acme", session_id=session, run_id=run, datasets=out.datasets
    )
    assert first["tables"] == {"session_gnss_l1": 250, "session_laps": 2}  # L0 stays Parquet-only
    again = await materialise_run(
        ch, store, tenant="acme", session_id=session, run_id=run, datasets=out.datasets
    )
    assert [e["action"] for e in again["loaded"]] == ["skipped", "skipped"]
    db = ch.database
    rows = await ch.query_rows(
        f"SELECT count(), uniqExact(row_no), countIf(speed_mps IS NULL), min(ts) "
        f"FROM {db}.session_gnss_l1 WHERE run_id = {{r:UUID}}",
        {"r": run},
    )
    count, unique, nulls, first_ts = rows[0]
    assert (count, unique, nulls) == (250, 250, 50)
    assert first_ts.replace(tzinfo=UTC) == T0
    laps = await ch.query_rows(
        f"SELECT lap, lap_time_s, tenant FROM {db}.session_laps ORDER BY lap"
    )
    assert laps == [(1, 61.5, "acme"), (2, 60.25, "acme")]
    records = await ch.query_rows(f"SELECT dataset, rows FROM {db}.{RECORD_TABLE} FINAL ORDER BY 1")
    assert records == [("gnss_L1", 250), ("laps", 2)]


async def test_a_partial_earlier_load_is_replaced(ch: ClickHouse, tmp_path: Path) -> None:
    store = ObjectStore(str(tmp_path))
    out = write_outputs(store, "d/y", tables={"laps": _laps()}, summary={}, header={})
    run, session = str(uuid.uuid4()), str(uuid.uuid4())
    await materialise_run(
        ch, store, tenant="acme", session_id=session, run_id=run, datasets=out.datasets
    )
    # Simulate an attempt that died part-way: only some of the run's rows are there.
    await ch.command(f"DELETE FROM {ch.database}.session_laps WHERE row_no = 1")
    again = await materialise_run(
        ch, store, tenant="acme", session_id=session, run_id=run, datasets=out.datasets
    )
    assert again["loaded"][0]["action"] == "reloaded"
    rows = await ch.query_rows(f"SELECT lap FROM {ch.database}.session_laps ORDER BY row_no")
    assert rows == [(1,), (2,)]
    # Two attempts inserting at once (a reaped job still running) would double the rows;
    # the ReplacingMergeTree key collapses them for FINAL readers.
    db = ch.database
    await ch.command(f"INSERT INTO {db}.session_laps SELECT * FROM {db}.session_laps")
    rows = await ch.query_rows(f"SELECT count(), uniqExact(row_no) FROM {db}.session_laps FINAL")
    assert rows == [(2, 2)]


async def test_a_conflicting_column_type_fails_closed(ch: ClickHouse, tmp_path: Path) -> None:
    store = ObjectStore(str(tmp_path))
    first = write_outputs(store, "d/a", tables={"laps": _laps()}, summary={}, header={})
    await materialise_run(
        ch,
        store,
        tenant="a",
        session_id=str(uuid.uuid4()),
        run_id=str(uuid.uuid4()),
        datasets=first.datasets,
    )
    bad = pa.table({"lap": pa.array(["one"]), "lap_time_s": [1.0]})
    second = write_outputs(store, "d/b", tables={"laps": bad}, summary={}, header={})
    with pytest.raises(PermanentError) as err:
        await materialise_run(
            ch,
            store,
            tenant="a",
            session_id=str(uuid.uuid4()),
            run_id=str(uuid.uuid4()),
            datasets=second.datasets,
        )
    assert err.value.code == "MATERIALISE_SCHEMA_CONFLICT"
    assert table_name("gnss_L1") == "session_gnss_l1"


def _every_type(n: int) -> pa.Table:
    """One column of each kind the stages write, with nulls where a column may have them."""
    return pa.table(
        {
            "ts": pa.array(
                [T0 + timedelta(milliseconds=10 * i) for i in range(n)], pa.timestamp("us", "UTC")
            ),
            "value": pa.array([i / 7 if i % 3 else None for i in range(n)]),
            "small": pa.array([i % 100 for i in range(n)], pa.int8()),
            "big": pa.array([2**40 + i for i in range(n)], pa.uint64()),
            "flag": pa.array([i % 2 == 0 for i in range(n)]),
            "label": pa.array([f"lap {i % 4}" for i in range(n)]).dictionary_encode(),
            "note": pa.array([None if i % 5 else f"n{i}" for i in range(n)], pa.string()),
            "samples": pa.array([[float(i), i + 0.5] for i in range(n)], pa.list_(pa.float64())),
            "row_no": pa.array([n - i for i in range(n)], pa.int64()),  # a key's name: replaced
        }
    )


async def test_the_engine_reads_a_local_file_as_the_arrow_table_would_be_loaded(
    ch: ClickHouse, tmp_path: Path
) -> None:
    # A local store: chDB reads the verified Parquet file itself. A store it cannot read (the
    # in-memory "mock" file system stands for S3 here): the Arrow table goes over. Both load the
    # same rows, with the same types, keys and row numbers (the file's row order).
    table = _every_type(3_001)
    local, remote = ObjectStore(str(tmp_path)), ObjectStore("mock:///store")
    runs = {}
    for store in (local, remote):
        out = write_outputs(store, "d/x", tables={"sectors": table}, summary={}, header={})
        run = runs[store.root_url] = str(uuid.uuid4())
        summary = await materialise_run(ch, store, tenant="acme", session_id=str(uuid.uuid4()),
                                        run_id=run, datasets=out.datasets)  # fmt: skip
        assert summary["tables"] == {"session_sectors": 3_001}
    db = ch.database
    types = await ch.query_rows(
        "SELECT name, type FROM system.columns WHERE database = {db:String}"
        " AND table = 'session_sectors' ORDER BY position",
        {"db": db},
    )
    assert dict(types)["label"] == "LowCardinality(Nullable(String))"
    assert dict(types)["samples"] == "Array(Float64)"
    loaded = [
        await ch.query_rows(
            f"SELECT * EXCEPT (session_id, run_id) FROM {db}.session_sectors"
            " WHERE run_id = {r:UUID} ORDER BY row_no",
            {"r": runs[store.root_url]},
        )
        for store in (local, remote)
    ]
    assert loaded[0] == loaded[1]
    first, last = loaded[0][0], loaded[0][-1]
    names = [name for name, _ in types if name not in ("session_id", "run_id")]
    assert dict(zip(names, first, strict=True))["row_no"] == 0
    assert dict(zip(names, last, strict=True))["row_no"] == 3_000
    assert dict(zip(names, last, strict=True))["samples"] == [3000.0, 3000.5]
    assert sum(1 for r in loaded[0] if dict(zip(names, r, strict=True))["value"] is None) == 1_001


async def test_a_corrupt_local_file_is_refused_before_it_is_loaded(
    ch: ClickHouse, tmp_path: Path
) -> None:
    store = ObjectStore(str(tmp_path))
    out = write_outputs(store, "d/z", tables={"laps": _laps()}, summary={}, header={})
    (ds,) = out.datasets
    path = store.local_path(store.key(ds.url))
    assert path is not None
    with open(path, "r+b") as f:  # noqa: ASYNC230 - a test's one small write
        f.seek(-1, 2)
        f.write(b"\0")
    with pytest.raises(PermanentError) as err:
        await materialise_run(ch, store, tenant="a", session_id=str(uuid.uuid4()),
                              run_id=str(uuid.uuid4()), datasets=out.datasets)  # fmt: skip
    assert err.value.code == "CHECKSUM_MISMATCH"
    # Refused before anything was written: its table was not even made.
    assert await ch.query_rows(
        "SELECT count() FROM system.tables WHERE database = {db:String} AND name = 'session_laps'",
        {"db": ch.database},
    ) == [(0,)]
