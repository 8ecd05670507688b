"""The front parser hands every tapped frame to its sink exactly once, in order, however the
byte stream is cut into reads, and leaves everything else to nats-py's parser."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.client import Client

from streams.ingest.fetch import _tap

TAPPED = 7

_frame = st.one_of(
    st.tuples(st.just("tapped"), st.binary(max_size=40), st.booleans()),
    st.tuples(st.just("other"), st.binary(max_size=10), st.booleans()),
    st.tuples(st.just("ok"), st.just(b""), st.just(False)),
)


def _bytes(kind: str, body: bytes, reply: bool, index: int) -> bytes:
    if kind == "ok":
        return b"+OK\r\n"
    sid = TAPPED if kind == "tapped" else 99
    header = b"NATS/1.0\r\nNats-Msg-Id: m%d\r\n\r\n" % index
    head = b"HMSG telemetry.t.d.s %d %s%d %d\r\n" % (
        sid, b"$JS.ACK.S.C.1.%d.1.1.0 " % index if reply else b"", len(header),
        len(header) + len(body))
    return head + header + body + b"\r\n"


@settings(max_examples=200, deadline=None)
@given(st.lists(_frame, max_size=12), st.lists(st.integers(min_value=1, max_value=64),
                                               min_size=1, max_size=40))
def test_tapped_frames_arrive_once_in_order_across_any_reads(
    frames: list[tuple[str, bytes, bool]], cuts: list[int]
) -> None:
    nc = Client()
    got: list[tuple[bytes, bytes, bytes, bytes | None]] = []
    _tap(nc)[TAPPED] = lambda subject, reply, data, headers: got.append(
        (subject, reply, data, headers))
    stream = b"".join(_bytes(kind, body, reply, i)
                      for i, (kind, body, reply) in enumerate(frames))

    async def feed() -> None:
        pos, i = 0, 0
        while pos < len(stream):
            size = cuts[i % len(cuts)]
            await nc._ps.parse(stream[pos : pos + size])
            pos, i = pos + size, i + 1

    asyncio.run(feed())
    expected = [
        (b"telemetry.t.d.s", b"$JS.ACK.S.C.1.%d.1.1.0" % i if reply else b"", body,
         b"NATS/1.0\r\nNats-Msg-Id: m%d\r\n\r\n" % i)
        for i, (kind, body, reply) in enumerate(frames) if kind == "tapped"
    ]
    assert got == expected
    assert not nc._ps.buf
