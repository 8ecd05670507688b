"""The consumer's pull channel on real JetStream."""

from __future__ import annotations

import time

from streams.ingest.fetch import Fetcher, receipt_of
from streams.ingest.resources import Resources
from tests.integration.ingest.conftest import Harness, good_values


async def test_messages_left_in_a_stopped_fetcher_are_handed_back_at_once(fleet: Harness) -> None:
    """A message can reach a fetcher after its last fetch returned (a pull answered late);
    nobody processes it. Stopping hands it back, so after a restart it comes again right away
    rather than after ``ack_wait`` (30 s here)."""
    seqs = [await fleet.publish("d1", {"ts": i, "values": good_values()}) for i in range(3)]
    resources = await Resources.open(fleet.settings)
    names = resources.names
    try:
        first = await Fetcher(resources.nc, stream=names.telemetry_stream,
                              durable=names.ingest_durable).start()
        got = await first.fetch(3, 2.0)
        assert [receipt_of(m).stream_seq for m in got] == seqs
        first._msgs.extend(got)  # as if they had arrived after the fetch returned
        await first.stop()
        second = await Fetcher(resources.nc, stream=names.telemetry_stream,
                               durable=names.ingest_durable).start()
        started = time.monotonic()
        again = await second.fetch(3, 5.0)
        waited = time.monotonic() - started
        await second.stop()
    finally:
        await resources.close()
    assert fleet.settings.consumer.ack_wait_s >= 30
    assert [receipt_of(m).stream_seq for m in again] == seqs
    assert all(receipt_of(m).delivered == 2 for m in again)
    assert waited < 5.0
