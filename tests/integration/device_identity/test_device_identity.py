"""Only a device can speak for itself: a real nats-server configured as docs/security.md says
refuses every publish a device makes on anything but its own subjects, every connection
without a valid credential, and cuts off a device whose credential is revoked — over NATS and
over its MQTT listener. The ingest consumer runs as its own (``ingest``) user throughout."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import nats
import orjson
import pytest
from nats import errors as nats_errors

from stages.batch import formats
from stages.batch.synth import synthesize
from streams.config import Settings
from streams.identity import credentials
from streams.identity.permissions import device_inbox_prefix
from streams.ingest.consumer import run_consumer
from streams.names import Names
from streams.sessions.upload import device_upload
from tests.integration.device_identity.conftest import Broker, issue
from tests.integration.ingest.conftest import TENANT, good_values
from tests.integration.sessions.conftest import running_intake

mqtt = pytest.importorskip("paho.mqtt.client")

REVOCATION_BOUND_S = 5.0
"""The issue's bound: revoked, rotated or deactivated, the old connection is closed and the
old secret refused within this."""


def _envelope(seq: int) -> bytes:
    return orjson.dumps({"ts": int(time.time() * 1000), "seq": seq, "values": good_values()})


async def _device(broker: Broker, device: str, secret: str, *, tenant: str = TENANT,
                  errors: list[Exception] | None = None, reconnect: bool = False,
                  connect_timeout: float = 3, **options: Any) -> nats.NATS:
    """A device's own nats-py connection (what its firmware would do)."""
    sink = errors if errors is not None else []

    async def on_error(exc: Exception) -> None:
        sink.append(exc)

    return await _connect(
        broker.url, user=credentials.username(tenant, device), password=secret,
        inbox_prefix=device_inbox_prefix(tenant, device), error_cb=on_error,
        allow_reconnect=reconnect, max_reconnect_attempts=-1 if reconnect else 0,
        connect_timeout=connect_timeout, **options)


async def _connect(url: str, **options: Any) -> nats.NATS:
    """``nats.connect`` that closes the socket of a refused connection (nats-py leaves it
    open, and the test would fail on the unclosed transport)."""
    nc = nats.NATS()
    try:
        await nc.connect(url, **options)
    except BaseException:
        await nc.close()
        raise
    return nc


async def _refused(broker: Broker, *, user: str | None, password: str | None) -> str:
    """Connect with these credentials; the server's refusal, as nats-py reports it."""
    login = {k: v for k, v in (("user", user), ("password", password)) if v is not None}
    nc = nats.NATS()
    try:
        with pytest.raises(nats_errors.Error) as raised:
            await nc.connect(broker.url, allow_reconnect=False, max_reconnect_attempts=0,
                             connect_timeout=3, **login)
    finally:
        await nc.close()  # nats-py leaves a refused connection's socket open otherwise
    return str(raised.value)


async def _stored(broker: Broker) -> int:
    nc = await nats.connect(broker.url, nkeys_seed=str(broker.keys.seed_file("admin")))
    try:
        info = await nc.jetstream().stream_info(Names(
            namespace=broker.settings.namespace).telemetry_stream)
        return int(info.state.messages)
    finally:
        await nc.close()


async def _recorded(pool: asyncpg.Pool, device: str | None = None) -> dict[str, int]:
    """Statuses of the envelopes Tideway recorded (of one device, through the records view)."""
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT r.status::text AS status, count(*) AS n FROM ingestion_records r"
            " LEFT JOIN devices d ON d.id = r.device_id"
            " WHERE $1::text IS NULL OR d.external_id = $1 GROUP BY 1", device)
    return {r["status"]: int(r["n"]) for r in rows}


async def _until(check: Callable[[], Any], within: float = 30.0) -> Any:
    deadline = time.monotonic() + within
    while True:
        found = await check()
        if found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _ingest(broker: Broker) -> AsyncIterator[None]:
    """The ingest consumer, connected as the ``ingest`` user."""
    stop = asyncio.Event()
    task = asyncio.create_task(run_consumer(broker.as_role("ingest"), stop=stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


def _subject(settings: Settings, tenant: str, device: str, topic: str = "state") -> str:
    return Names(namespace=settings.namespace).telemetry_subject(tenant, device, topic)


async def test_a_device_publishes_as_itself_and_nothing_else(
    broker: Broker, pg_pool: asyncpg.Pool
) -> None:
    cred = await issue(pg_pool, "d1")
    errors: list[Exception] = []
    nc = await _device(broker, "d1", cred.secret, errors=errors)
    s = broker.settings
    ns = Names(namespace=s.namespace)
    async with _ingest(broker):
        try:
            js = nc.jetstream()
            ack = await js.publish(_subject(s, TENANT, "d1"), _envelope(1),
                                   headers={"Nats-Msg-Id": "d1-1"})
            assert ack.seq == 1
            assert await _until(lambda: _recorded(pg_pool, "d1")) == {"completed": 1}

            # Everything else it tries is refused by nats-server itself.
            refused_publishes = [
                _subject(s, TENANT, "d2"),  # another device of its tenant
                _subject(s, "other", "o1"),  # another tenant's device
                ns.sessions_subject(TENANT, "d2"),  # another device's session notice
                f"$JS.API.STREAM.DELETE.{ns.telemetry_stream}",  # the JetStream API
                f"$JS.API.STREAM.PURGE.{ns.telemetry_stream}",
                "$JS.API.STREAM.LIST",
                "$SYS.REQ.SERVER.PING",  # the system account
            ]
            for subject in refused_publishes:
                await nc.publish(subject, _envelope(2))
            # Subscribing to every device's envelopes, another device's inbox, the inboxes
            # of Tideway's own processes (where JetStream delivers what ingest fetches).
            for subject in (ns.telemetry_subjects, "telemetry.>", ">",
                            f"{device_inbox_prefix(TENANT, 'd2')}.>", "_INBOX.>"):
                await nc.subscribe(subject)
            await nc.flush()
            async def all_refused() -> bool:
                return len(errors) >= len(refused_publishes) + 5

            await _until(all_refused, 10)
        finally:
            await nc.close()
        await asyncio.sleep(0.5)  # anything that got through would be recorded by now
        assert await _stored(broker) == 1
        assert await _recorded(pg_pool) == {"completed": 1}
    said = [str(e).lower() for e in errors]
    for subject in refused_publishes:
        assert any(f'publish to "{subject.lower()}"' in e for e in said), (subject, said)
    assert sum("permissions violation for subscription" in e for e in said) == 5, said


async def test_connections_without_a_valid_credential_are_refused(
    broker: Broker, pg_pool: asyncpg.Pool
) -> None:
    d1 = await issue(pg_pool, "d1")
    revoked = await issue(pg_pool, "d2")
    async with pg_pool.acquire() as conn:
        assert await credentials.revoke(conn, TENANT, "d2", revoked.key_id) == [revoked.key_id]
        rotated_out = await credentials.issue(conn, TENANT, "d2")
        await credentials.rotate(conn, TENANT, "d2")
        inactive = await credentials.issue(conn, TENANT, "off")
        # A device that is deleted from the registry takes its credentials with it.
        await conn.execute("INSERT INTO devices (tenant_id, external_id)"
                           " SELECT tenant_id, 'gone' FROM devices WHERE external_id = 'd1'")
        deleted = await credentials.issue(conn, TENANT, "gone")
        await conn.execute("DELETE FROM devices WHERE external_id = 'gone'")
    wrong = d1.secret[:-4] + ("AAAA" if not d1.secret.endswith("AAAA") else "BBBB")
    cases = {
        "no credentials": (None, None),
        "a user name without a secret": (d1.username, None),
        "a wrong secret": (d1.username, wrong),
        "a malformed secret": (d1.username, "hunter2"),
        "a valid secret under another device's name": (credentials.username(TENANT, "d2"),
                                                       d1.secret),
        "a revoked secret": (revoked.username, revoked.secret),
        "a rotated-out secret": (rotated_out.username, rotated_out.secret),
        "an inactive device's secret": (inactive.username, inactive.secret),
        "a deleted device's secret": (deleted.username, deleted.secret),
    }
    for case, (user, password) in cases.items():
        said = await _refused(broker, user=user, password=password)
        assert "authorization violation" in said.lower(), (case, said)
    # The one valid credential still works: the refusals were about the credentials.
    nc = await _device(broker, "d1", d1.secret)
    assert nc.is_connected
    await nc.close()
    assert d1.secret not in broker.log_text()


async def test_revoking_cuts_off_a_connected_device_within_seconds(
    broker: Broker, pg_pool: asyncpg.Pool
) -> None:
    cred = await issue(pg_pool, "d1")
    lost = asyncio.Event()

    async def on_disconnect() -> None:
        lost.set()

    nc = await _device(broker, "d1", cred.secret, disconnected_cb=on_disconnect)
    try:
        await nc.publish(_subject(broker.settings, TENANT, "d1"), _envelope(1))
        await nc.flush()
        started = time.monotonic()
        async with pg_pool.acquire() as conn:
            await credentials.revoke(conn, TENANT, "d1")
        await asyncio.wait_for(lost.wait(), REVOCATION_BOUND_S)
        cut_off = time.monotonic() - started
        said = await _refused(broker, user=cred.username, password=cred.secret)
        refused = time.monotonic() - started
    finally:
        await nc.close()
    assert "authorization violation" in said.lower()
    assert refused < REVOCATION_BOUND_S, refused
    print(f"revoke → disconnected in {cut_off:.2f} s, old secret refused by {refused:.2f} s")


async def test_deactivating_a_device_cuts_it_off(broker: Broker, pg_pool: asyncpg.Pool
                                                 ) -> None:
    from streams import registry

    cred = await issue(pg_pool, "d2")
    lost = asyncio.Event()

    async def on_disconnect() -> None:
        lost.set()

    nc = await _device(broker, "d2", cred.secret, disconnected_cb=on_disconnect)
    try:
        async with pg_pool.acquire() as conn:
            await registry.set_active(conn, TENANT, "d2", False)
        await asyncio.wait_for(lost.wait(), REVOCATION_BOUND_S)
    finally:
        await nc.close()
    said = await _refused(broker, user=cred.username, password=cred.secret)
    assert "authorization violation" in said.lower()


async def test_the_sweep_cuts_off_what_no_announcement_reached(
    broker: Broker, pg_pool: asyncpg.Pool
) -> None:
    """A revocation committed with its trigger disabled (as if the auth service had missed
    the announcement) is still enforced by the periodic sweep (every second here)."""
    cred = await issue(pg_pool, "d1")
    lost = asyncio.Event()

    async def on_disconnect() -> None:
        lost.set()

    nc = await _device(broker, "d1", cred.secret, disconnected_cb=on_disconnect)
    try:
        async with pg_pool.acquire() as conn, conn.transaction():
            await conn.execute("ALTER TABLE device_credentials"
                               " DISABLE TRIGGER device_credential_revoked")
            await conn.execute("UPDATE device_credentials SET revoked_at = now(),"
                               " revoked_reason = 'revoked' WHERE key_id = $1", cred.key_id)
            await conn.execute("ALTER TABLE device_credentials"
                               " ENABLE TRIGGER device_credential_revoked")
        await asyncio.wait_for(lost.wait(), REVOCATION_BOUND_S)
    finally:
        await nc.close()


async def test_rotating_while_a_device_publishes_loses_nothing(
    broker: Broker, pg_pool: asyncpg.Pool
) -> None:
    """The device publishes with JetStream acks and message ids; when its connection is cut
    by the rotation it reconnects with the new secret (as its firmware would once handed
    it) and sends again whatever was not acknowledged. Every envelope is recorded once."""
    first = await issue(pg_pool, "d1")
    current = {"secret": first.secret}
    total = 300
    s = broker.settings
    subject = _subject(s, TENANT, "d1")
    reconnects = 0

    async def publisher() -> None:
        nonlocal reconnects
        nc = await _device(broker, "d1", current["secret"])
        try:
            for seq in range(1, total + 1):
                while True:
                    try:
                        await nc.jetstream().publish(subject, _envelope(seq), timeout=2,
                                                     headers={"Nats-Msg-Id": f"d1-{seq}"})
                        break
                    except (nats_errors.Error, TimeoutError, OSError):
                        await nc.close()
                        while True:  # the new secret may not be handed over yet
                            try:
                                nc = await _device(broker, "d1", current["secret"])
                                reconnects += 1
                                break
                            except (nats_errors.Error, OSError, TimeoutError):
                                await asyncio.sleep(0.1)
                await asyncio.sleep(0.005)
        finally:
            await nc.close()

    async with _ingest(broker):
        task = asyncio.create_task(publisher())
        await asyncio.sleep(0.5)
        async with pg_pool.acquire() as conn:
            rotated = await credentials.rotate(conn, TENANT, "d1")
        assert rotated.retired == (first.key_id,)
        await asyncio.sleep(0.3)  # the device learns its new secret a moment later
        current["secret"] = rotated.secret
        await asyncio.wait_for(task, 60)
        found = await _until(lambda: _done(pg_pool, total), 30)
    assert found == {"completed": total}
    assert reconnects >= 1  # the rotation did cut the old connection
    said = await _refused(broker, user=first.username, password=first.secret)
    assert "authorization violation" in said.lower()


async def _done(pool: asyncpg.Pool, total: int) -> dict[str, int] | None:
    found = await _recorded(pool, "d1")
    return found if sum(found.values()) >= total else None


def _mqtt_client(port: int, *, user: str | None, password: str | None,
                 client_id: str) -> tuple[Any, int]:
    """Connect over MQTT; the client (connected or not) and the CONNACK reason code."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id)
    if user is not None:
        client.username_pw_set(user, password)
    codes: list[int] = []

    def on_connect(_c: Any, _u: Any, _f: Any, reason: Any, _p: Any = None) -> None:
        codes.append(int(reason.value if hasattr(reason, "value") else reason))

    client.on_connect = on_connect
    client.connect("127.0.0.1", port, keepalive=10)
    client.loop_start()
    deadline = time.monotonic() + 10
    while not codes and time.monotonic() < deadline:
        time.sleep(0.05)
    return client, codes[0] if codes else -1


def _mqtt_topic(settings: Settings, tenant: str, device: str) -> str:
    return _subject(settings, tenant, device).replace(".", "/")


async def test_the_same_over_mqtt(broker: Broker, pg_pool: asyncpg.Pool) -> None:
    cred = await issue(pg_pool, "d1")
    s = broker.settings
    # No credentials, a wrong secret: CONNACK "not authorized" (MQTT 3.1.1's 5, which paho 2
    # reports with MQTT 5's number, 135).
    for user, password in ((None, None), (cred.username, cred.secret[:-1] + "x")):
        client, code = await asyncio.to_thread(
            _mqtt_client, broker.mqtt_port, user=user, password=password, client_id="anon")
        client.loop_stop()
        assert code == 135, code
    async with _ingest(broker):
        client, code = await asyncio.to_thread(
            _mqtt_client, broker.mqtt_port, user=cred.username, password=cred.secret,
            client_id="d1-mqtt")
        assert code == 0
        try:
            info = client.publish(_mqtt_topic(s, TENANT, "d1"), _envelope(1), qos=1)
            await asyncio.to_thread(info.wait_for_publish, 10)
            assert await _until(lambda: _recorded(pg_pool, "d1")) == {"completed": 1}
            for topic in (_mqtt_topic(s, TENANT, "d2"), _mqtt_topic(s, "other", "o1")):
                client.publish(topic, _envelope(2), qos=0)
            await asyncio.sleep(1.0)
        finally:
            client.loop_stop()
            client.disconnect()
        assert await _stored(broker) == 1
        assert await _recorded(pg_pool) == {"completed": 1}


async def test_a_thousand_devices_connect_at_once(broker: Broker, pg_pool: asyncpg.Pool,
                                                  settings: Settings) -> None:
    from streams import registry
    from streams.ingest.fleet import SCHEMA_NAME

    count = 1000
    issued: list[credentials.IssuedCredential] = []
    async with pg_pool.acquire() as conn, conn.transaction():
        for i in range(count):
            name = f"fleet-{i:04d}"
            await registry.add_device(conn, TENANT, name, schema=SCHEMA_NAME)
            issued.append(await credentials.issue(conn, TENANT, name))
    started = time.monotonic()
    # A generous timeout: the thousand connect at once on a machine that may be slow (the
    # rate is reported, not asserted).
    results = await asyncio.gather(
        *(_device(broker, c.device, c.secret, connect_timeout=60) for c in issued),
        return_exceptions=True)
    elapsed = time.monotonic() - started
    clients = [r for r in results if isinstance(r, nats.NATS)]
    try:
        failures = [r for r in results if not isinstance(r, nats.NATS)]
        assert not failures, failures[:3]
        assert all(c.is_connected for c in clients)
        # Each is itself: a publish on its own subject is stored.
        sample = clients[::100]
        for client, cred in zip(sample, issued[::100], strict=True):
            await client.jetstream().publish(_subject(broker.settings, TENANT, cred.device),
                                             _envelope(1))
        assert await _stored(broker) == len(sample)
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    print(f"{count} devices connected in {elapsed:.2f} s: {count / elapsed:.0f} connections/s")


@pytest.mark.parametrize("open_broker", [True])
async def test_the_open_broker_lets_devices_in_without_credentials_and_counts_them(
    broker: Broker, pg_pool: asyncpg.Pool
) -> None:
    """``nats.open_broker`` (a migration window): a device with no credentials connects and
    publishes as before; its messages are counted; a wrong secret is still refused."""
    nc = await nats.connect(broker.url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        for seq in range(1, 4):
            await nc.jetstream().publish(_subject(broker.settings, TENANT, "d2"),
                                         _envelope(seq))
    finally:
        await nc.close()
    cred = await issue(pg_pool, "d1")
    said = await _refused(broker, user=cred.username, password=cred.secret[:-1] + "x")
    assert "authorization violation" in said.lower()
    assert await _stored(broker) == 3

    def counted() -> float:
        value = broker.metrics.registry.get_sample_value(
            "tideway_nats_unauthenticated_messages_total")
        return value or 0.0

    async def all_counted() -> bool:
        return counted() >= 3

    assert await _until(all_counted, 10), counted()
    assert counted() == 3
    granted = broker.metrics.registry.get_sample_value(
        "tideway_auth_requests_total", {"result": "granted", "reason": "anonymous"})
    assert granted == 1


async def test_each_process_user_reaches_only_what_its_role_uses(broker: Broker) -> None:
    """Least privilege behind the device door: a bug in one process cannot delete a stream,
    impersonate a device or read the system account."""
    ns = Names(namespace=broker.settings.namespace)
    attempts = {
        # role: subjects its user must not publish on
        "ingest": [ns.telemetry_subject(TENANT, "d1", "state"), ns.sessions_subject(TENANT, "d1"),
                   f"$JS.API.STREAM.DELETE.{ns.telemetry_stream}",
                   f"$JS.API.STREAM.INFO.{ns.sessions_stream}", "$SYS.REQ.SERVER.PING"],
        "worker": [ns.telemetry_subject(TENANT, "d1", "state"),
                   f"$JS.API.STREAM.INFO.{ns.telemetry_stream}",
                   f"$JS.API.CONSUMER.MSG.NEXT.{ns.telemetry_stream}.{ns.ingest_durable}"],
        "intake": [ns.telemetry_subject(TENANT, "d1", "state"),
                   f"$JS.API.CONSUMER.MSG.NEXT.{ns.telemetry_stream}.{ns.ingest_durable}"],
        "api": [f"$JS.API.STREAM.DELETE.{ns.telemetry_stream}", "$SYS.REQ.SERVER.PING"],
        "admin": ["$SYS.REQ.SERVER.PING"],
    }
    for role, subjects in attempts.items():
        errors: list[Exception] = []

        async def on_error(exc: Exception, sink: list[Exception] = errors) -> None:
            sink.append(exc)

        nc = await nats.connect(broker.url, nkeys_seed=str(broker.keys.seed_file(role)),
                                error_cb=on_error, allow_reconnect=False)
        try:
            for subject in subjects:
                await nc.publish(subject, b"{}")
            await nc.flush()

            async def all_refused(sink: list[Exception] = errors, n: int = len(subjects)
                                  ) -> bool:
                return len(sink) >= n

            await _until(all_refused, 10)
            # ...while what the role is for works.
            if role in ("ingest", "api", "admin"):
                info = await nc.jetstream().stream_info(ns.telemetry_stream)
                assert info.config.name == ns.telemetry_stream
        finally:
            await nc.close()
        said = [str(e).lower() for e in errors]
        for subject in subjects:
            assert any(f'publish to "{subject.lower()}"' in e for e in said), (role, subject)
    assert await _stored(broker) == 0


async def test_a_device_uploads_a_session_file_as_itself(broker: Broker, pg_pool: asyncpg.Pool
                                                         ) -> None:
    """The device path of the session handoff works with the device's own credential (the
    bucket put and its notice), intake running as its own user; a notice for another device
    is refused by the broker."""
    cred = await issue(pg_pool, "d1")
    session = synthesize(laps=1, imu_hz=10, gnss_hz=5)
    data = formats.write("csv", {"gnss": session.gnss, "imu": session.imu})
    async with running_intake(broker.as_role("intake")):
        await device_upload(broker.settings, tenant=TENANT, device="d1", name="d1-lap.csv",
                            data=data, secret=cred.secret)

        async def one_run() -> list[Any]:
            async with pg_pool.acquire() as conn:
                return list(await conn.fetch(
                    "SELECT d.external_id FROM processing_runs r"
                    " JOIN sessions s ON s.id = r.session_id"
                    " JOIN devices d ON d.id = s.device_id"))

        runs = await _until(one_run, 30)
    assert [r["external_id"] for r in runs] == ["d1"]
    errors: list[Exception] = []
    nc = await _device(broker, "d1", cred.secret, errors=errors)
    try:
        await nc.publish(Names(namespace=broker.settings.namespace).sessions_subject(TENANT, "d2"),
                         b'{"version": 1, "objects": ["d1-lap.csv"]}')
        await nc.flush()

        async def refused() -> bool:
            return bool(errors)

        assert await _until(refused, 10)
    finally:
        await nc.close()
    assert "permissions violation" in str(errors[0]).lower()


async def test_revoking_many_devices_at_once_cuts_off_every_one(
    broker: Broker, pg_pool: asyncpg.Pool
) -> None:
    """Revocations announced together (more than the service looks up one by one) are all
    enforced, within the same bound."""
    from streams import registry
    from streams.ingest.fleet import SCHEMA_NAME

    names = [f"bulk-{i:02d}" for i in range(12)]
    async with pg_pool.acquire() as conn:
        issued = []
        for name in names:
            await registry.add_device(conn, TENANT, name, schema=SCHEMA_NAME)
            issued.append(await credentials.issue(conn, TENANT, name))
    lost = {name: asyncio.Event() for name in names}
    clients = []
    for cred in issued:
        async def on_disconnect(event: asyncio.Event = lost[cred.device]) -> None:
            event.set()

        clients.append(await _device(broker, cred.device, cred.secret,
                                     disconnected_cb=on_disconnect))
    try:
        started = time.monotonic()
        async with pg_pool.acquire() as conn, conn.transaction():
            for name in names:
                await credentials.revoke(conn, TENANT, name)
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in lost.values())),
                               REVOCATION_BOUND_S)
        elapsed = time.monotonic() - started
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    print(f"{len(names)} devices revoked together: all disconnected in {elapsed:.2f} s")


async def test_revocation_reaches_a_device_on_any_node_of_a_cluster(
    settings: Settings, pg_pool: asyncpg.Pool, tmp_path: Path
) -> None:
    """Three routed nodes with the same accounts; the auth service is connected to n1 only,
    the device to n3 only. Every node asks the service about the device, and a revocation
    finds and closes its connection on n3."""
    from streams.identity.broker import AUTH_USER, as_user, ensure_keys, server_config
    from streams.identity.callout import run_auth
    from tests.integration.ingest.conftest import seed_fleet
    from tests.integration.nats_security.servers import start_cluster

    root = tmp_path / "cluster"
    root.mkdir()
    keys = ensure_keys(root / "keys")
    (root / "auth.conf").write_text(server_config(keys, Names(namespace=settings.namespace)))
    cluster = start_cluster(root, extra="include auth.conf")
    stop = asyncio.Event()
    n1, n3 = cluster.by_name("n1"), cluster.by_name("n3")
    auth = asyncio.create_task(run_auth(as_user(settings.with_services(nats_url=n1.url), keys,
                                                AUTH_USER), stop=stop))
    try:
        async with pg_pool.acquire() as conn:
            await seed_fleet(conn, TENANT, active=["d1"])
            cred = await credentials.issue(conn, TENANT, "d1")
        lost = asyncio.Event()

        async def on_disconnect() -> None:
            lost.set()

        nc = None
        for _ in range(100):  # the routes and the service's subscription settle first
            with contextlib.suppress(nats_errors.Error, OSError, TimeoutError):
                nc = await _connect(n3.url, user=cred.username, password=cred.secret,
                                        allow_reconnect=False, max_reconnect_attempts=0,
                                        disconnected_cb=on_disconnect, connect_timeout=2)
                break
            await asyncio.sleep(0.1)
        assert nc is not None and nc.is_connected
        try:
            async with pg_pool.acquire() as conn:
                await credentials.revoke(conn, TENANT, "d1")
            await asyncio.wait_for(lost.wait(), REVOCATION_BOUND_S)
        finally:
            await nc.close()
        refused = nats.NATS()
        try:
            with pytest.raises(nats_errors.Error, match="Authorization Violation"):
                await refused.connect(cluster.by_name("n2").url, user=cred.username,
                                      password=cred.secret, allow_reconnect=False,
                                      max_reconnect_attempts=0, connect_timeout=3)
        finally:
            await refused.close()
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(auth, 10)
        cluster.stop()


async def test_closing_the_open_broker_cuts_off_the_devices_it_let_in(
    settings: Settings, pg_pool: asyncpg.Pool, tmp_path: Path
) -> None:
    """The migration window ends when the auth service restarts without nats.open_broker:
    its first sweep closes the connections the window let in without credentials, and they
    cannot come back."""
    from streams.identity.broker import AUTH_USER, as_user
    from streams.identity.callout import run_auth
    from tests.integration.device_identity.conftest import start_secured

    proc, url, _mqtt, keys, _log = start_secured(tmp_path / "nats",
                                                 Names(namespace=settings.namespace))
    base = settings.with_services(nats_url=url)
    base = base.model_copy(update={"auth": base.auth.model_copy(
        update={"sweep_interval_s": 1.0})})

    def auth_settings(open_broker: bool) -> Settings:
        s = as_user(base, keys, AUTH_USER)
        return s.model_copy(update={"nats": s.nats.model_copy(
            update={"open_broker": open_broker})})

    try:
        stop = asyncio.Event()
        service = asyncio.create_task(run_auth(auth_settings(True), stop=stop))
        lost = asyncio.Event()

        async def on_disconnect() -> None:
            lost.set()

        nc = None
        for _ in range(100):  # the service subscribes first
            with contextlib.suppress(nats_errors.Error, OSError, TimeoutError):
                nc = await _connect(url, allow_reconnect=False, max_reconnect_attempts=0,
                                        disconnected_cb=on_disconnect, connect_timeout=2)
                break
            await asyncio.sleep(0.1)
        assert nc is not None and nc.is_connected
        stop.set()
        await asyncio.wait_for(service, 10)
        assert nc.is_connected  # the window's connection outlives the service that let it in
        stop = asyncio.Event()
        service = asyncio.create_task(run_auth(auth_settings(False), stop=stop))
        try:
            await asyncio.wait_for(lost.wait(), REVOCATION_BOUND_S)
            said = await _refused_at(url)
        finally:
            stop.set()
            await asyncio.wait_for(service, 10)
            await nc.close()
        assert "authorization violation" in said.lower()
    finally:
        proc.terminate()
        proc.wait(10)


async def _refused_at(url: str) -> str:
    nc = nats.NATS()
    try:
        with pytest.raises(nats_errors.Error) as raised:
            await nc.connect(url, allow_reconnect=False, max_reconnect_attempts=0,
                             connect_timeout=3)
    finally:
        await nc.close()
    return str(raised.value)
