"""Dead letters an operator can clear: redrive in pages past malformed envelopes, resolve by id
or code, exit codes, every failed delivery recorded, and a chDB engine held elsewhere."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from streams.clickhouse import embedded_holder
from streams.config import Settings
from streams.ingest import dlq
from streams.views import dead_letters
from tests.integration.ingest.conftest import Harness, good_values
from tests.integration.ingest.test_publish_failure import PrivateRedis


def _closed_port_redis() -> str:
    """A Redis URL nothing listens on: every publish to the hot state fails."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{s.getsockname()[1]}/0"


def _max_deliver(settings: Settings, n: int) -> Settings:
    consumer = settings.consumer.model_copy(update={"max_deliver": n})
    return settings.model_copy(update={"consumer": consumer})


def _env(settings: Settings, tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEWAY_")}
    env.update({
        "TIDEWAY_CONFIG": str(tmp / "absent.toml"),
        "TIDEWAY_NATS_URL": settings.nats(),
        "TIDEWAY_POSTGRES_DSN": settings.postgres(),
        "TIDEWAY_REDIS_URL": settings.redis(),
        "TIDEWAY_CLICKHOUSE_DSN": settings.clickhouse(),
        "TIDEWAY_CLICKHOUSE_DATABASE": settings.clickhouse_database,
        "TIDEWAY_NAMESPACE": settings.namespace,
        "TIDEWAY_DATA_DIR": str(tmp / "data"),
        "TIDEWAY_LOG_LEVEL": "WARNING",
        **extra,
    })
    return env


def _tideway(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streams.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=120)


async def _dead_letters(fleet: Harness, state: str = "open") -> list[Any]:
    async with fleet.pool.acquire() as conn:
        return await conn.fetch(
            "SELECT * FROM dead_letters WHERE state = $1 ORDER BY id", state)


async def _publish_failed(fleet: Harness, n: int, *, first_ts: int = 1_000) -> list[int]:
    """``n`` envelopes dead-lettered PUBLISH_FAILED (Redis unreachable); their stream seqs."""
    before = await fleet.count()
    dead = fleet.settings.with_services(redis_url=_closed_port_redis())
    seqs = [await fleet.publish("d1", {"ts": first_ts + i, "seq": i,
                                       "values": good_values(temp=20.0 + i)})
            for i in range(n)]
    await fleet.consume(before + n, settings=dead, within=30)
    return seqs


async def test_redrive_pages_past_malformed_dead_letters_and_resolve_clears_them(
    fleet: Harness, tmp_path: Path
) -> None:
    # Malformed envelopes first, so they hold the oldest (lowest) dead-letter ids.
    for i in range(4):
        await fleet.publish("d1", None, raw=b"not json %d" % i)
    await fleet.consume(4)
    seqs = await _publish_failed(fleet, 5)
    open_ = await _dead_letters(fleet)
    assert [r["reason_code"] for r in open_] == ["ENVELOPE_UNPARSEABLE"] * 4 + [
        "PUBLISH_FAILED"] * 5

    pages: list[dlq.RedrivePage] = []
    report = await dlq.redrive(fleet.settings, page_size=2, on_page=pages.append)
    # Every redrivable dead letter is reached, page by page; the malformed ones use no page.
    assert [len(p.results) for p in pages] == [2, 2, 1]
    assert [p.total for p in pages] == [2, 4, 5]
    assert {r.outcome for p in pages for r in p.results} == {dlq.COMPLETED}
    assert [r.dead_letter_id for r in report.results] == [r["id"] for r in open_[4:]]
    assert report.count(dlq.COMPLETED) == 5 and report.pages == 3
    assert dict(report.unreachable) == {"ENVELOPE_UNPARSEABLE": 4}
    assert not report.nothing_done
    assert [(await fleet.message(s))["status"] for s in seqs] == ["completed"] * 5
    assert {r["resolution"] for r in await _dead_letters(fleet, "resolved")} == {"redriven"}

    # Only malformed ones are left: nothing can be done, and the exit code says so.
    again = await dlq.redrive(fleet.settings, page_size=2)
    assert (again.results, dict(again.unreachable), again.nothing_done) == (
        (), {"ENVELOPE_UNPARSEABLE": 4}, True)
    env = _env(fleet.settings, tmp_path)
    done = _tideway(env, "dlq", "redrive", "--page-size", "2", "--json")
    assert done.returncode == 3, done.stderr
    assert orjson.loads(done.stdout) == {
        "completed": 0, "failed": 0, "not_redrivable": 0, "not_open": 0, "pages": 0,
        "unreachable": {"ENVELOPE_UNPARSEABLE": 4}, "results": []}
    named = _tideway(env, "dlq", "redrive", str(open_[0]["id"]), "--json")
    assert named.returncode == 3, named.stderr
    assert [r["outcome"] for r in orjson.loads(named.stdout)["results"]] == ["not_redrivable"]

    # Resolve one by id, with the operator's note; the same id again is not open any more.
    first = str(open_[0]["id"])
    by_id = _tideway(env, "dlq", "resolve", first, "--note", "test rig garbage", "--json")
    assert by_id.returncode == 0, by_id.stderr
    assert [r["id"] for r in orjson.loads(by_id.stdout)["resolved"]] == [open_[0]["id"]]
    twice = _tideway(env, "dlq", "resolve", first, "--note", "again", "--json")
    assert twice.returncode == 3 and orjson.loads(twice.stdout)["not_resolved"] == [
        open_[0]["id"]]
    # ... and the rest by code (another tenant's would be left alone).
    async with fleet.pool.acquire() as conn:
        none = await dlq.resolve_dead_letters(conn, note="x", code="ENVELOPE_UNPARSEABLE",
                                              tenant="someone-else")
        assert none.resolved == () and none.not_resolved == ()
    by_code = _tideway(env, "dlq", "resolve", "--code", "ENVELOPE_UNPARSEABLE", "--note",
                       "unparseable firmware 0.9 output", "--json")
    assert by_code.returncode == 0, by_code.stderr
    assert [r["id"] for r in orjson.loads(by_code.stdout)["resolved"]] == [
        r["id"] for r in open_[1:4]]
    assert await _dead_letters(fleet) == []
    async with fleet.pool.acquire() as conn:
        assert await dead_letters.list_dead_letters(conn) == []
        shown = await dead_letters.show_dead_letter(conn, open_[1]["id"])
    assert (shown.state, shown.resolution, shown.resolution_note) == (
        "resolved", "operator", "unparseable firmware 0.9 output")
    assert shown.status == "failed_terminal"  # the envelope keeps its recorded status
    nothing = _tideway(env, "dlq", "redrive")
    assert nothing.returncode == 0, nothing.stderr
    usage = _tideway(env, "dlq", "resolve", "--note", "which ones?")
    assert usage.returncode != 0 and "USAGE_ERROR" in usage.stderr


async def test_a_dead_letter_records_the_failure_of_every_delivery(fleet: Harness) -> None:
    fleet.settings = _max_deliver(fleet.settings, 3)
    (seq,) = await _publish_failed(fleet, 1)
    row = await fleet.message(seq)
    assert (row["status"], row["error_code"]) == ("failed_terminal", "PUBLISH_FAILED")
    (dead,) = await _dead_letters(fleet)
    failures = dead["failures"]
    assert [(f["delivery"], f["stage"], f["message"].split(":")[0]) for f in failures] == [
        (1, "publish", "hot_state"), (2, "publish", "hot_state"), (3, "publish", "hot_state")]
    assert [f["at"] for f in failures] == sorted(f["at"] for f in failures)
    # The notes of the earlier deliveries were consumed by the recording transaction.
    assert await fleet.count("SELECT count(*) FROM ingest_delivery_failures") == 0


async def test_an_envelope_that_publishes_on_a_later_delivery_leaves_no_notes(
    fleet: Harness, tmp_path: Path
) -> None:
    redis = PrivateRedis(tmp_path)  # not started yet: the first delivery cannot publish
    settings = _max_deliver(fleet.settings.with_services(redis_url=redis.url), 5)
    seq = await fleet.publish("d1", {"ts": 5_000, "values": good_values()})

    async def noted() -> bool:
        return await fleet.count("SELECT count(*) FROM ingest_delivery_failures") >= 1

    await fleet.consume(1, settings=settings, until=noted)
    assert await fleet.count() == 0  # nak'ed for redelivery, nothing recorded yet
    await redis.start()
    try:
        await fleet.consume(1, settings=settings)
    finally:
        redis.stop()
    assert (await fleet.message(seq))["status"] == "completed"
    assert await fleet.count("SELECT count(*) FROM ingest_delivery_failures") == 0
    assert await fleet.count("SELECT count(*) FROM dead_letters") == 0


_HOLD = """
import sys, clickhouse_connect
client = clickhouse_connect.get_client(dsn=sys.argv[1])
client.command("SELECT 1")
print("held", flush=True)
sys.stdin.read()
"""


def _hold(dsn: str) -> subprocess.Popen[str]:
    """Another process with the chDB engine at ``dsn`` open, until its stdin is closed."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, dsn], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


async def test_redrive_refuses_an_embedded_clickhouse_held_elsewhere_and_changes_nothing(
    fleet: Harness, tmp_path: Path
) -> None:
    (seq,) = await _publish_failed(fleet, 1)
    row = await fleet.message(seq)
    (before,) = await _dead_letters(fleet)
    passes = await fleet.count("SELECT count(*) FROM ingestion_stage_passes")
    held = f"chdb://{tmp_path / 'held'}"
    assert embedded_holder(held) is None and embedded_holder("http://localhost:8123") is None
    holder = _hold(held)
    try:
        assert embedded_holder(held) == holder.pid
        done = _tideway(_env(fleet.settings, tmp_path, TIDEWAY_CLICKHOUSE_DSN=held),
                        "dlq", "redrive")
    finally:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        holder.wait(30)
        holder.stdout.close()
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert "CLICKHOUSE_BUSY" in message and f"held by process {holder.pid}" in message
    assert "stop that process and run this command again" in message
    assert "run this command there" not in message
    # Nothing changed: no hot state, no attempt, no failure appended, no stage pass.
    assert await fleet.hot_state("d1") == {}
    after = await fleet.message(seq)
    assert (after["attempts"], after["status"]) == (row["attempts"], "failed_terminal")
    (dead,) = await _dead_letters(fleet)
    assert (dead["redrive_count"], dead["failures"]) == (0, before["failures"])
    assert await fleet.count("SELECT count(*) FROM ingestion_stage_passes") == passes
    # Once free, the engine is opened: it has no analytics table, so the publish fails and
    # is recorded (exit 3, a progress line per page on stderr for a person).
    failed = _tideway(_env(fleet.settings, tmp_path, TIDEWAY_CLICKHOUSE_DSN=held),
                      "dlq", "redrive")
    assert failed.returncode == 3, failed.stderr
    assert "page 1: 0 completed, 1 failed, 0 not redrivable (1 so far)" in failed.stderr
    assert (await fleet.message(seq))["attempts"] == row["attempts"] + 1
    # With the test's own engine, the redrive goes through.
    report = await dlq.redrive(fleet.settings)
    assert [r.outcome for r in report.results] == [dlq.COMPLETED]
