"""Ingest traces: one span per batch linked to each envelope's traceparent, child spans
around the Postgres / Redis / ClickHouse round trips, the traceparent on the dead-letter copy."""

from __future__ import annotations

from typing import Any

import orjson
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.integration.ingest.conftest import Harness, good_values
from tests.tracing import named, spans

__all__ = ["spans"]  # the fixture

FIRST = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
SECOND = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def _publish(fleet: Harness, device: str, body: bytes, traceparent: str) -> int:
    subject = fleet.names.telemetry_subject("acme", device, "state")
    ack = await fleet.nc.jetstream().publish(subject, body, headers={"traceparent": traceparent})
    return int(ack.seq)


def _envelope(ts: int) -> bytes:
    return orjson.dumps({"ts": ts, "seq": ts, "values": good_values()})


async def test_a_batch_is_one_span_linked_to_its_envelopes_with_a_child_per_round_trip(
    fleet: Harness, spans: InMemorySpanExporter
) -> None:
    await _publish(fleet, "d1", _envelope(1_000), FIRST)
    await _publish(fleet, "d2", _envelope(1_000), SECOND)
    # One fetcher, so that both envelopes (published before it starts) are one batch.
    one = fleet.settings.consumer.model_copy(update={"concurrency": 1})
    await fleet.consume(2, settings=fleet.settings.model_copy(update={"consumer": one}))
    (batch,) = named(spans, "ingest.batch")
    assert batch.parent is None  # a batch has many parents: it links, it is not a child
    linked = {f"00-{link.context.trace_id:032x}-{link.context.span_id:016x}-01"
              for link in batch.links}
    assert linked == {FIRST, SECOND}
    assert batch.attributes is not None and batch.attributes["tideway.batch.size"] == 2
    assert batch.context is not None
    children = [s for s in spans.get_finished_spans()
                if s.parent is not None and s.parent.span_id == batch.context.span_id]
    assert {"postgres.registry", "postgres.dedupe_read", "redis.hot_state",
            "clickhouse.insert", "postgres.record"} <= {s.name for s in children}
    assert len(spans.get_finished_spans()) == 1 + len(children)


async def test_the_dead_letter_copy_carries_the_envelopes_traceparent(
    fleet: Harness,
) -> None:
    # Tracing off: the traceparent travels all the same (it is the device's, not ours).
    await _publish(fleet, "d1", b"not json", FIRST)
    await fleet.consume(1)
    js = fleet.nc.jetstream()
    sub = await js.pull_subscribe(fleet.names.dead_letter_subjects,
                                  stream=fleet.names.dead_letter_stream)
    msgs: list[Any] = await sub.fetch(1, timeout=10)
    assert msgs[0].headers["traceparent"] == FIRST
