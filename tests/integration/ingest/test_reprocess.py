"""``tideway replay --reprocess`` on real NATS, Postgres, Redis and ClickHouse: a corrected
derived expression is re-derived over a window, every value corrected exactly once (Postgres,
the hot state, ClickHouse), the old values kept and shown by ``messages show``; a second run
changes nothing, a dry run writes nothing, and a run that dies half-way is finished by the
next."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas.device_schema import parse_schema_text
from streams import registry
from streams.ingest import rederive
from streams.ingest.fleet import SCHEMA_NAME, demo_schema_text
from streams.ingest.messages import explain
from streams.ingest.replay import replay
from tests.integration.ingest.conftest import TENANT, Harness, good_values
from tests.integration.registry.test_cli import tideway

OLD = 'derived: "temp_c * 9 / 5 + 32"}'
FIXED = 'derived: "temp_c * 9 / 5 + 32 + 100"}'  # a visible "fix" of the derived expression


def fixed_text() -> str:
    text = demo_schema_text(TENANT)
    assert OLD in text
    return text.replace(OLD, FIXED)


async def _send(h: Harness, device: str, n: int, *, first_seq: int = 1) -> list[float]:
    temps = []
    for i in range(n):
        temp = round(10 + (i % 50) * 0.3, 2)
        temps.append(temp)
        seq = first_seq + i
        await h.publish(device, {"ts": 1_780_000_000_000 + seq * 1000, "seq": seq,
                                 "values": good_values(temp)}, msg_id=f"{device}-{seq}")
    return temps


async def _fix(h: Harness) -> None:
    text = fixed_text()
    async with h.pool.acquire() as conn:
        await registry.apply_schema(conn, parse_schema_text(text), source_text=text)
        await registry.assign_schema(conn, TENANT, "d1", SCHEMA_NAME)


async def _temp_f(h: Harness, device: str) -> dict[int, float]:
    rows = await h.pool.fetch(
        "SELECT r.seq, (telemetry_values(t.values_layout, t.parameter_list)->>'temp_f')::float "
        "AS f FROM ingestion_records r JOIN devices d ON d.id = r.device_id "
        "JOIN device_telemetry_logs t ON t.ingestion_message_id = r.id "
        "AND t.received_at = r.received_at "
        "WHERE d.external_id = $1 AND r.status = 'completed'", device)
    return {r["seq"]: r["f"] for r in rows}


def _j(value: Any) -> Any:
    """A JSON column as a connection with or without Tideway's codecs returns it."""
    return orjson.loads(value) if isinstance(value, str | bytes) else value


def _subject(h: Harness, device: str) -> str:
    return f"telemetry.{TENANT}.{device}.*"


async def test_a_fix_is_rederived_once_everywhere(fleet: Harness, tmp_path: Path) -> None:
    since = datetime.now(UTC) - timedelta(seconds=5)
    temps = await _send(fleet, "d1", 120)
    await _send(fleet, "d2", 30)
    await fleet.publish("d1", {"ts": 1_780_000_500_000, "seq": 500,
                               "values": good_values(150.0)}, msg_id="d1-bad")  # refused
    await fleet.consume(151)
    await _fix(fleet)
    before_d2 = await _temp_f(fleet, "d2")

    dry = await replay(fleet.settings, since=since, subject=_subject(fleet, "d1"),
                       reprocess=True, dry_run=True)
    assert dry.reprocess is not None
    assert dry.reprocess.corrected == 120 and dry.reprocess.unchanged == 1
    assert dry.reprocess.parameters["temp_f"].changed == 120
    assert set(dry.reprocess.parameters) == {"temp_f", "heat_index"}
    assert await fleet.count("SELECT count(*) FROM telemetry_corrections") == 0
    assert set((await _temp_f(fleet, "d1")).values()) == {t * 9 / 5 + 32 for t in temps}
    # The same dry run as an operator types it, progress on stderr.
    env = {"TIDEWAY_NATS_URL": fleet.settings.nats(), "TIDEWAY_NAMESPACE": fleet.settings.namespace,
           "TIDEWAY_REDIS_URL": fleet.settings.redis(),
           # Named, not opened: a dry run reads Postgres only (this process holds the chDB).
           "TIDEWAY_CLICKHOUSE_DSN": fleet.settings.clickhouse()}
    code, out, err = await tideway(
        fleet.settings.postgres(), "replay", "--since", since.isoformat(), "--device", "d1",
        "--tenant", TENANT, "--reprocess", "--dry-run", cwd=tmp_path, env=env)
    assert code == 0, err
    assert "reprocess (dry run)" in out and "would correct 120" in err
    assert "temp_f" in out and "100.0" in out  # the difference each value would take

    done = await replay(fleet.settings, since=since, subject=_subject(fleet, "d1"),
                        reprocess=True)
    assert done.reprocess is not None and done.reprocess.corrected == 120
    assert done.reprocess.status_changes == {}
    fixed = await _temp_f(fleet, "d1")
    assert fixed == {i + 1: t * 9 / 5 + 32 + 100 for i, t in enumerate(temps)}
    assert await _temp_f(fleet, "d2") == before_d2  # another device is left alone
    assert await fleet.count("SELECT count(*) FROM telemetry_corrections") == 120

    # The hot state holds the newest measurement, corrected; ClickHouse has the new values
    # only (one row per envelope and parameter).
    hot = (await fleet.hot_state("d1"))["state"]
    assert hot["seq"] == 120 and hot["values"]["temp_f"] == temps[-1] * 9 / 5 + 32 + 100
    table = f"{fleet.clickhouse.database}.{fleet.names.analytics_table}"
    rows = await fleet.clickhouse.query_rows(
        f"SELECT count(), countIf(value >= 150) FROM {table} FINAL "  # old ones: < 80
        "WHERE device = 'd1' AND parameter = 'temp_f'")
    assert [int(v) for v in rows[0]] == [120, 120]

    # messages show: which version produced which values, and when.
    shown = await explain(fleet.settings, "m:acme:d1-7")
    (correction,) = shown["corrections"]
    assert (correction["previous_version"], correction["version"]) == (1, 2)
    assert _j(correction["previous_values"])["temp_f"] == temps[6] * 9 / 5 + 32
    assert _j(correction["values"])["temp_f"] == temps[6] * 9 / 5 + 32 + 100
    assert str(correction["reprocess_id"]) == done.reprocess.reprocess_id
    assert _j(shown["telemetry"]["parameter_values"])["temp_f"] == \
        temps[6] * 9 / 5 + 32 + 100

    again = await replay(fleet.settings, since=since, subject=_subject(fleet, "d1"),
                         reprocess=True)
    assert again.reprocess is not None
    assert again.reprocess.corrected == 0 and again.reprocess.unchanged == 121
    assert await fleet.count("SELECT count(*) FROM telemetry_corrections") == 120
    assert await _temp_f(fleet, "d1") == fixed


class Crash(BaseException):
    """The process dying: nothing after it runs (BaseException, so no handler catches it)."""


async def test_a_crashed_reprocess_is_finished_by_the_next(fleet: Harness, monkeypatch: Any
                                                           ) -> None:
    """The reprocess dies after writing its third batch's sinks, before that batch's
    transaction commits (the worst place: ClickHouse and Redis hold corrections Postgres does
    not); the next run finishes the window, each value corrected exactly once."""
    since = datetime.now(UTC) - timedelta(seconds=5)
    temps = await _send(fleet, "d1", 1500)
    await fleet.consume(1500, within=60)
    await _fix(fleet)
    settings = fleet.settings.model_copy(update={
        "consumer": fleet.settings.consumer.model_copy(update={"batch_size": 100})})
    record, calls = rederive._record, []

    async def dies_on_the_third(*args: Any) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise Crash
        await record(*args)

    monkeypatch.setattr(rederive, "_record", dies_on_the_third)
    with pytest.raises(Crash):
        await replay(settings, since=since, subject=_subject(fleet, "d1"), reprocess=True)
    assert await fleet.count("SELECT count(*) FROM telemetry_corrections") == 200
    monkeypatch.setattr(rederive, "_record", record)

    done = await replay(settings, since=since, subject=_subject(fleet, "d1"), reprocess=True)
    assert done.reprocess is not None
    assert (done.reprocess.corrected, done.reprocess.unchanged) == (1300, 200)
    assert await fleet.count("SELECT count(*) FROM telemetry_corrections") == 1500
    assert await fleet.count("SELECT count(DISTINCT ingestion_message_id) "
                             "FROM telemetry_corrections") == 1500
    assert await _temp_f(fleet, "d1") == {i + 1: t * 9 / 5 + 32 + 100
                                          for i, t in enumerate(temps)}
    table = f"{fleet.clickhouse.database}.{fleet.names.analytics_table}"
    rows = await fleet.clickhouse.query_rows(
        f"SELECT count(), countIf(value >= 150) FROM {table} FINAL "
        "WHERE device = 'd1' AND parameter = 'temp_f'")
    assert [int(v) for v in rows[0]] == [1500, 1500]
