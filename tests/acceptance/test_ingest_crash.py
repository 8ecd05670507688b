"""``tideway ingest`` killed with SIGKILL midway, then started again: nothing lost, nothing
doubled. Everything runs through the CLI as an operator would."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import asyncpg
import orjson
import pytest

from streams.names import Names

pytestmark = pytest.mark.slow

# The analytics table lives in a chDB engine that only one process may open at a time, so it
# is read by a short-lived helper process once the consumer has exited.
_CH_COUNT = """
import sys, clickhouse_connect
client = clickhouse_connect.get_client(dsn=sys.argv[1])
print(client.query(sys.argv[2]).result_rows[0][0])
"""


def _env(pg_dsn: str, nats_url: str, redis_url: str, names: Names, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEWAY_")}
    env.update(
        {
            "TIDEWAY_CONFIG": str(tmp / "absent.toml"),
            "TIDEWAY_NATS_URL": nats_url,
            "TIDEWAY_POSTGRES_DSN": pg_dsn,
            "TIDEWAY_REDIS_URL": redis_url,
            "TIDEWAY_CLICKHOUSE_DSN": f"chdb://{tmp / 'chdb'}",
            "TIDEWAY_CLICKHOUSE_DATABASE": "crash",
            "TIDEWAY_NAMESPACE": names.namespace,
            "TIDEWAY_DATA_DIR": str(tmp / "data"),
            "TIDEWAY_DEFAULT_TENANT": "fleet",
            "TIDEWAY_CONSUMER__BATCH_SIZE": "50",
            "TIDEWAY_CONSUMER__ACK_WAIT_S": "2",
            "TIDEWAY_LOG_LEVEL": "WARNING",
        }
    )
    return env


def _tideway(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def _fetch(dsn: str, sql: str) -> list[asyncpg.Record]:
    async def go() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(dsn)
        try:
            return list(await conn.fetch(sql))
        finally:
            await conn.close()

    return asyncio.run(go())


def _count(dsn: str, sql: str = "SELECT count(*) FROM ingestion_messages") -> int:
    return int(_fetch(dsn, sql)[0][0])


def _wait_for(dsn: str, predicate: Callable[[int], bool], within: float) -> int:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        n = _count(dsn)
        if predicate(n):
            return n
        time.sleep(0.02)
    raise AssertionError(f"gave up waiting; {_count(dsn)} rows")


def test_kill_9_midway_then_restart_records_every_envelope_exactly_once(
    pg_dsn: str, nats_url: str, redis_url: str, names: Names, tmp_path: Path
) -> None:
    env = _env(pg_dsn, nats_url, redis_url, names, tmp_path)
    _tideway(env, "streams", "init")
    sim = orjson.loads(
        _tideway(
            env,
            "simulate",
            "--devices",
            "20",
            "--rate",
            "4000",
            "--duration",
            "1.0",
            "--late",
            "0.05",
            "--invalid",
            "0.03",
            "--unknown-topic",
            "0.02",
            "--json",
        ).stdout
    )
    n = sim["stored"]
    assert n >= 3000 and sim["publish_errors"] == 0
    expected = {k: v for k, v in sim["expected"].items() if v}
    assert sum(expected.values()) == n

    cmd = [sys.executable, "-m", "streams.cli.main", "ingest"]
    log = (tmp_path / "first.log").open("wb")
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        seen = _wait_for(pg_dsn, lambda c: c >= n // 5, 60)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
        log.close()
    killed_at = _count(pg_dsn)
    assert seen <= killed_at < n, "the kill must land midway"

    second = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for(pg_dsn, lambda c: c >= n, 60)
        time.sleep(3.0)  # past ack_wait: any stray redelivery would show up now
        second.send_signal(signal.SIGTERM)  # drains in-flight batches and exits cleanly
        _, stderr = second.communicate(timeout=30)
        assert second.returncode == 0, stderr.decode()
    finally:
        if second.poll() is None:
            second.kill()

    rows = _fetch(pg_dsn, "SELECT status, count(*) FROM ingestion_messages GROUP BY 1")
    statuses = {r["status"]: r["count"] for r in rows}
    distinct_receipts = _count(
        pg_dsn, "SELECT count(DISTINCT (stream_seq, received_at)) FROM ingestion_messages"
    )
    telemetry = _count(pg_dsn, "SELECT count(*) FROM device_telemetry_logs")
    per_message = _count(
        pg_dsn,
        "SELECT count(*) FROM (SELECT ingestion_message_id FROM device_telemetry_logs "
        "GROUP BY 1 HAVING count(*) > 1) doubled",
    )
    completed_logs = _count(
        pg_dsn,
        "SELECT count(*) FROM ingestion_stage_logs l JOIN ingestion_messages m "
        "ON m.id = l.message_id WHERE m.status = 'completed' AND l.stage = 'publish'",
    )
    assert statuses == expected  # exactly N envelopes, each in the status announced
    assert distinct_receipts == n  # none missing, none recorded twice
    assert telemetry == expected["completed"] + expected.get("failed_validation", 0)
    assert per_message == 0
    assert completed_logs == expected["completed"]

    table = f"crash.{names.analytics_table}"
    ch = [sys.executable, "-c", _CH_COUNT, env["TIDEWAY_CLICKHOUSE_DSN"]]
    final = subprocess.run(
        [*ch, f"SELECT count() FROM {table} FINAL"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    distinct = subprocess.run(
        [*ch, f"SELECT count(DISTINCT message_key, parameter) FROM {table}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert int(final.stdout) == int(distinct.stdout) == 10 * expected["completed"]
