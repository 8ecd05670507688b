"""Every NATS connection uses the ``nats`` settings group: against a real nats-server that
requires TLS with client certificates and an nkey user, ``tideway streams init`` and an ingest
round trip work with the right options, and a connection without them is refused at once with
a one-line error naming what was refused (exit 1), not retried for ever."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import orjson
import pytest

from streams.adapters.nats import ONE_SHOT_ATTEMPTS, connect_nats
from streams.config import NatsSettings, Settings
from streams.errors import ConfigError
from streams.ingest.consumer import run_consumer
from streams.names import Names
from tests.integration.ingest.conftest import TENANT, good_values, seed_fleet
from tests.integration.nats_security.servers import (
    Pki,
    Server,
    make_pki,
    make_user_nkey,
    secured_server,
)


@dataclass(frozen=True)
class Secured:
    server: Server
    pki: Pki
    seed: Path

    def options(self, **drop: bool) -> dict[str, Path]:
        """The settings that work, less those named in ``drop``."""
        every = {"nkey_seed_file": self.seed, "tls_ca": self.pki.ca,
                 "tls_cert": self.pki.client_cert, "tls_key": self.pki.client_key}
        return {key: value for key, value in every.items() if not drop.get(key)}


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    pki = make_pki(tmp_path / "pki")
    seed = tmp_path / "user.nk"
    server = secured_server(tmp_path / "nats", pki, make_user_nkey(seed))
    try:
        yield Secured(server=server, pki=pki, seed=seed)
    finally:
        server.stop()


def _on(secured: Secured, settings: Settings, **drop: bool) -> Settings:
    """The test's settings pointed at the secured server with its options (less ``drop``)."""
    return settings.with_services(nats_url=secured.server.url).model_copy(
        update={"nats": NatsSettings(**secured.options(**drop)).at(secured.server.url)})


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streams.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def _env(secured: Secured, tmp: Path, names: Names, **options: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEWAY_")}
    env.update({
        "TIDEWAY_CONFIG": str(tmp / "absent.toml"),
        "TIDEWAY_NATS_URL": secured.server.url,
        "TIDEWAY_CLICKHOUSE_DSN": f"chdb://{tmp / 'chdb'}",
        "TIDEWAY_NAMESPACE": names.namespace,
        "TIDEWAY_DATA_DIR": str(tmp / "data"),
        "COLUMNS": "300",  # rich wraps at the terminal's width; a log collector has none
    })
    env.update({f"TIDEWAY_NATS__{key.upper()}": str(value) for key, value in options.items()})
    return env


@pytest.mark.parametrize(("dropped", "refused"), [
    ("nkey_seed_file", "refused the credentials (authorization violation)"),
    ("tls_ca", "TLS certificate was refused"),
    ("tls_cert", "refused the TLS handshake: TLSV13_ALERT_CERTIFICATE_REQUIRED"),
])
def test_streams_init_needs_every_security_option(
    secured: Secured, tmp_path: Path, names: Names, dropped: str, refused: str
) -> None:
    options = secured.options(**{dropped: True})
    if dropped == "tls_cert":
        options.pop("tls_key")
    done = _cli(_env(secured, tmp_path, names, **options), "streams", "init")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    # Without a client certificate, TLS 1.3 may show the first attempt as a dropped connection
    # (logged as an outage) before a later one hears the server's alert.
    errors = [line for line in lines if line.startswith("error:")]
    assert errors == lines[-1:] and refused in errors[0], done.stderr
    assert "Traceback" not in done.stderr

    ok = _cli(_env(secured, tmp_path, names, **secured.options()), "streams", "init")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "streams ready" in ok.stdout


async def test_a_stranger_certificate_is_refused_at_once(secured: Secured) -> None:
    options = NatsSettings(nkey_seed_file=secured.seed, tls_ca=secured.pki.ca,
                           tls_cert=secured.pki.stranger_cert,
                           tls_key=secured.pki.stranger_key).at(secured.server.url)
    with pytest.raises(ConfigError) as raised:
        # attempts=-1 (a long-running process): a refusal must still end the wait
        await asyncio.wait_for(connect_nats(options, name="tideway-test"), 30)
    assert raised.value.code == "NATS_TLS_REFUSED"


async def test_a_missing_seed_file_is_a_config_error(secured: Secured, tmp_path: Path) -> None:
    options = NatsSettings(nkey_seed_file=tmp_path / "nowhere.nk").at(secured.server.url)
    with pytest.raises(ConfigError, match=r"nats\.nkey_seed_file"):
        await connect_nats(options, name="tideway-test", attempts=ONE_SHOT_ATTEMPTS)


async def test_ingest_round_trip_over_tls_with_an_nkey_user(
    secured: Secured, settings: Settings, pg_pool: asyncpg.Pool
) -> None:
    from streams.ingest.provision import provision

    settings = _on(secured, settings)
    await provision(settings)
    async with pg_pool.acquire() as conn:
        await seed_fleet(conn, TENANT, active=["d1"])
    names = Names(namespace=settings.namespace)
    nc = await connect_nats(settings.nats, name="tideway-test", attempts=ONE_SHOT_ATTEMPTS)
    try:
        assert nc.is_connected
        ack = await nc.jetstream().publish(names.telemetry_subject(TENANT, "d1", "state"),
                                     orjson.dumps({"ts": 1_000,
                                                   "values": good_values()}),
                                     headers={"Nats-Msg-Id": "secured-1"})
    finally:
        await nc.close()

    stop = asyncio.Event()
    task = asyncio.create_task(run_consumer(settings, stop=stop))
    try:
        for _ in range(400):
            async with pg_pool.acquire() as conn:
                status = await conn.fetchval(
                    "SELECT status FROM ingestion_messages WHERE stream_seq = $1", ack.seq)
            if status is not None or task.done():
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
    assert status == "completed"


async def test_a_refused_ingest_consumer_stops_instead_of_retrying_for_ever(
    secured: Secured, settings: Settings
) -> None:
    """A long-running process (no bound on attempts) ends on a refusal, with its code."""
    settings = _on(secured, settings, nkey_seed_file=True)
    with pytest.raises(ConfigError) as raised:
        await asyncio.wait_for(run_consumer(settings, stop=asyncio.Event()), 30)
    assert raised.value.code == "NATS_AUTH_REFUSED"
