"""The streaming operator commands, run as an operator would (subprocesses, --json)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import nats
import orjson

from streams.names import Names
from tests.acceptance.test_ingest_crash import _count, _env, _tideway


def _json(env: dict[str, str], *args: str) -> object:
    return orjson.loads(_tideway(env, *args, "--json").stdout)


def test_operator_commands_explain_list_and_replay(
    pg_dsn: str, nats_url: str, redis_url: str, names: Names, tmp_path: Path
) -> None:
    env = _env(pg_dsn, nats_url, redis_url, names, tmp_path)
    _tideway(env, "streams", "init")
    _tideway(env, "streams", "init")  # idempotent
    sim = _json(env, "simulate", "--devices", "3", "--rate", "200", "--duration", "0.5",
                "--duplicates", "0", "--late", "0", "--invalid", "0", "--unknown-topic", "0")
    assert isinstance(sim, dict)

    async def publish_bad() -> None:
        nc = await nats.connect(nats_url)
        try:
            await nc.jetstream().publish(names.telemetry_subject("fleet", "sim-00000", "state"),
                                         b"not json", headers={"Nats-Msg-Id": "bad-1"})
        finally:
            await nc.close()

    asyncio.run(publish_bad())
    total = sim["stored"] + 1
    consumer = subprocess.Popen([sys.executable, "-m", "streams.cli.main", "ingest"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while _count(pg_dsn) < total and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        consumer.send_signal(signal.SIGTERM)
        assert consumer.wait(30) == 0
    assert _count(pg_dsn) == total

    (dead,) = _json(env, "dlq", "list")  # type: ignore[misc]
    assert dead["reason_code"] == "ENVELOPE_UNPARSEABLE" and dead["state"] == "open"
    shown = _json(env, "dlq", "show", str(dead["id"]))
    assert shown["payload_text"] == "not json" and shown["headers"] == {"Nats-Msg-Id": "bad-1"}
    # Nothing can be redriven: exit 3 (the malformed envelope is for `dlq resolve`).
    redrive = subprocess.run([sys.executable, "-m", "streams.cli.main", "dlq", "redrive",
                              str(dead["id"]), "--json"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert redrive.returncode == 3, redrive.stderr
    (redriven,) = orjson.loads(redrive.stdout)["results"]
    assert redriven["outcome"] == "not_redrivable"

    completed = _count(pg_dsn, "SELECT min(id) FROM ingestion_messages WHERE status = 'completed'")
    info = _json(env, "messages", "show", str(completed))
    assert info["message"]["status"] == "completed"
    assert [s["stage"] for s in info["stages"]][-1] == "publish"
    assert info["published"]["analytics_rows"] == 10
    assert info["published"]["hot_state_key"].startswith(names.redis_prefix)

    dry = _json(env, "replay", "--since", "10m", "--dry-run")
    assert dry == {**dry, "scanned": total, "already_recorded": total, "recorded": {}}
    done = _json(env, "replay", "--since", "10m")
    assert done["already_recorded"] == total and _count(pg_dsn) == total

    missing = subprocess.run([sys.executable, "-m", "streams.cli.main", "messages", "show",
                              "999999"], env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "NOT_FOUND" in missing.stderr
