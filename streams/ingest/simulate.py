"""``tideway simulate``: a realistic fleet publishing envelopes to the TELEMETRY stream.

Devices (``sim-00000`` …) take turns so the whole fleet sends ``rate`` envelopes per second
for ``duration`` seconds, each an envelope of the demo weather-station schema
(:mod:`streams.ingest.fleet`) with a ``Nats-Msg-Id``. Chosen shares of the traffic are:

* **duplicates** — an envelope sent again with the same message id and payload. JetStream
  absorbs repeats inside its duplicate window (counted as ``duplicates_absorbed``); repeats
  it stores reach Tideway, which records them as ``duplicate``;
* **late** — a measurement held back 1–5 s and sent after newer ones from the same device
  (the hot state must keep the newer one);
* **invalid** — the critical temperature out of range or missing (``failed_validation``);
* **unknown topic** — published on a topic the schema does not have (``UNKNOWN_TOPIC``).

Everything random comes from ``random.Random(seed)``, so a run can be repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from schemas.device_schema import parse_schema_text
from streams import registry
from streams.adapters import postgres
from streams.adapters.nats import ONE_SHOT_ATTEMPTS, JetStreamContext, Nats
from streams.config import Settings
from streams.errors import NotFoundError, UsageError
from streams.identity import credentials
from streams.identity.devices import connect_device
from streams.ingest.fleet import SCHEMA_NAME, SimEnvelope, Station, choose_kind, demo_schema_text
from streams.ingest.fleet import device_id as sim_device_id
from streams.names import Names

TICK_S = 0.02
CONNECTS_AT_ONCE = 100
"""Device connections opened at a time (a large fleet does not storm the auth service)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SimProgress:
    """Where a running simulation stands."""

    elapsed_s: float
    sent: int
    rate: float


@dataclass(kw_only=True)
class SimReport:
    """What a simulation published."""

    tenant: str
    devices: int
    duration_s: float = 0.0
    published: int = 0
    """Publish calls, duplicates included."""
    stored: int = 0
    """Envelopes JetStream stored (what Tideway will see)."""
    normal: int = 0
    late: int = 0
    invalid: int = 0
    unknown_topic: int = 0
    duplicates_sent: int = 0
    duplicates_absorbed: int = 0
    publish_errors: int = 0
    expected: dict[str, int] = field(default_factory=dict)
    """The statuses Tideway should record for the stored envelopes."""
    examples: dict[str, str] = field(default_factory=dict)
    """One envelope of each kind sent (``normal``, ``late``, ``invalid``, ``unknown_topic``)
    by its dedupe key, which ``tideway messages show`` takes."""

    def finish(self) -> None:
        self.expected = {
            "completed": self.normal + self.late,
            "failed_validation": self.invalid,
            "failed_terminal": self.unknown_topic,
            "duplicate": self.duplicates_sent - self.duplicates_absorbed,
        }


async def ensure_fleet(settings: Settings, *, tenant: str, devices: int) -> None:
    """Apply the demo schema for ``tenant`` and register ``devices`` simulated devices on it
    (idempotent: existing devices are kept; unassigned ones get the demo schema)."""
    text = demo_schema_text(tenant)
    pool = await postgres.create_pool(settings.postgres(), postgres.streaming_pool(1))
    try:
        async with pool.acquire() as conn:
            await registry.apply_schema(conn, parse_schema_text(text), source_text=text)
            for index in range(devices):
                name = sim_device_id(index)
                try:
                    device = await registry.device(conn, tenant, name)
                except NotFoundError:
                    await registry.add_device(conn, tenant, name, schema=SCHEMA_NAME)
                    continue
                if device.schema_version_id is None:
                    await registry.assign_schema(conn, tenant, name, SCHEMA_NAME)
    finally:
        await pool.close()


async def simulate(
    settings: Settings,
    *,
    tenant: str,
    devices: int,
    rate: float,
    duration: float,
    duplicates: float = 0.05,
    late: float = 0.05,
    invalid: float = 0.02,
    unknown_topic: float = 0.01,
    seed: int = 0,
    on_progress: Callable[[SimProgress], None] | None = None,
) -> SimReport:
    """Publish a simulated fleet's envelopes (see the module docstring)."""
    if devices < 1 or rate <= 0 or duration < 0:
        raise UsageError("simulate needs --devices >= 1, --rate > 0 and --duration >= 0")
    if not 0 <= duplicates + late + invalid + unknown_topic <= 1:
        raise UsageError("the fault shares must be between 0 and 1 and add up to at most 1")
    rng = random.Random(seed)
    names = Names(namespace=settings.namespace)
    stations = [Station(i, rng) for i in range(devices)]
    report = SimReport(tenant=tenant, devices=devices)
    async with _fleet_connections(settings, tenant, devices) as fleet:
        return await _publish(fleet, names, tenant, stations, report, rng, rate=rate,
                              duration=duration, duplicates=duplicates, late=late,
                              invalid=invalid, unknown_topic=unknown_topic,
                              on_progress=on_progress)


@contextlib.asynccontextmanager
async def _fleet_connections(settings: Settings, tenant: str, devices: int
                             ) -> AsyncIterator[dict[str, JetStreamContext]]:
    """One connection per simulated device, each logged in with a credential issued for this
    run (the broker lets a device publish only as itself) and revoked when the run ends."""
    ids = [sim_device_id(i) for i in range(devices)]
    pool = await postgres.create_pool(settings.postgres(), postgres.streaming_pool(1))
    issued: list[credentials.IssuedCredential] = []
    clients: list[Nats] = []
    try:
        async with pool.acquire() as conn, conn.transaction():
            for device in ids:
                issued.append(await credentials.issue(conn, tenant, device))
        slots = asyncio.Semaphore(CONNECTS_AT_ONCE)

        async def connect(cred: credentials.IssuedCredential) -> Nats:
            async with slots:
                return await connect_device(settings.nats, tenant=tenant, device=cred.device,
                                            secret=cred.secret, name="tideway-simulate",
                                            attempts=ONE_SHOT_ATTEMPTS)

        results = await asyncio.gather(*(connect(c) for c in issued), return_exceptions=True)
        clients = [r for r in results if isinstance(r, Nats)]
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise failed[0]
        yield {cred.device: nc.jetstream() for cred, nc in zip(issued, clients, strict=True)}
    finally:
        await asyncio.gather(*(nc.close() for nc in clients), return_exceptions=True)
        if issued:
            async with pool.acquire() as conn:
                for cred in issued:
                    await credentials.revoke(conn, tenant, cred.device, cred.key_id)
        await pool.close()


async def _publish(
    fleet: dict[str, JetStreamContext], names: Names, tenant: str, stations: list[Station],
    report: SimReport, rng: random.Random, *, rate: float, duration: float,
    duplicates: float, late: float, invalid: float, unknown_topic: float,
    on_progress: Callable[[SimProgress], None] | None,
) -> SimReport:
    devices = len(stations)
    held: deque[tuple[float, SimEnvelope]] = deque()
    recent: deque[SimEnvelope] = deque(maxlen=1000)
    pending: list[asyncio.Future[Any]] = []

    async def send(env: SimEnvelope, *, duplicate: bool = False) -> None:
        subject = names.telemetry_subject(tenant, env.device, env.topic)
        future = await fleet[env.device].publish_async(subject, orjson.dumps(env.payload),
                                        headers={"Nats-Msg-Id": env.msg_id})
        pending.append(future)
        report.published += 1
        if duplicate:
            report.duplicates_sent += 1
        else:
            recent.append(env)
            setattr(report, env.kind, getattr(report, env.kind) + 1)
            report.examples.setdefault(env.kind, f"m:{tenant}:{env.msg_id}")

    started = time.monotonic()
    try:
        sent_target = 0.0
        turn = 0
        while (now := time.monotonic()) - started < duration:
            sent_target = min(rate * (now - started + TICK_S), rate * duration)
            while report.published - report.duplicates_sent + len(held) < sent_target:
                station = stations[turn % devices]
                turn += 1
                kind = choose_kind(rng, late=late, invalid=invalid, unknown_topic=unknown_topic)
                env = station.envelope(int(time.time() * 1000), rng, kind=kind)
                if kind == "late":
                    held.append((now + rng.uniform(1.0, 5.0), env))
                else:
                    await send(env)
                if recent and rng.random() < duplicates:
                    await send(rng.choice(recent), duplicate=True)
            while held and held[0][0] <= now:
                await send(held.popleft()[1])
            await _settle(pending, report)
            if on_progress is not None:
                elapsed = time.monotonic() - started
                on_progress(SimProgress(elapsed_s=elapsed, sent=report.published,
                                        rate=report.published / max(elapsed, 1e-9)))
            await asyncio.sleep(TICK_S)
        while held:  # late ones still waiting go out now, still after their newer readings
            await send(held.popleft()[1])
        await _settle(pending, report, wait=True)
    finally:
        report.duration_s = time.monotonic() - started
    report.finish()
    return report


async def _settle(pending: list[asyncio.Future[Any]], report: SimReport, *,
                  wait: bool = False) -> None:
    """Count publish acks (stored vs absorbed as duplicate) of the finished publishes."""
    if wait and pending:
        await asyncio.wait(pending, timeout=30)
    keep = []
    for future in pending:
        if not future.done():
            keep.append(future)
            continue
        if future.exception() is not None:
            report.publish_errors += 1
        elif getattr(future.result(), "duplicate", False):
            report.duplicates_absorbed += 1
        else:
            report.stored += 1
    pending[:] = keep
