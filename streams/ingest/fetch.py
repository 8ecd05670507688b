"""Pull batches from the shared durable consumer, cheaply.

nats-py's ``PullSubscription.fetch`` spends tens of microseconds per message (a task, a
timer and a UUID for every ``next_msg``), and even a plain subscription pays for a ``Msg``
object, a header parse, a queue hop and a callback task per message. At tens of thousands of
envelopes a second that is a large share of a consumer's only core, so this module speaks the
JetStream pull protocol itself, over the client's connection:

* **pull**: one request (``{"batch": n, "expires": t}``) to ``$JS.API.CONSUMER.MSG.NEXT``; the
  replies arrive on a per-fetcher inbox, and the fetch is done when ``n`` messages or that
  request's status (404 no messages, 408 request expired, 409 …) arrive. Each request gets its
  own reply subject, so a status that arrives late for an earlier request cannot end (or, by
  being missed, stall) the current one. The server does not always send the expiry status
  (measured: about one request in twenty under a steady trickle), so the fetch also ends on
  its own :data:`_GRACE_S` after the request's expiry — waiting a quarter of a second for a
  status that never comes was the whole tail of the consumer's latency. Messages delivered
  late for an earlier request are kept for the next fetch.
* **receive**: the inbox is an ordinary nats-py subscription (so reconnects re-subscribe it as
  usual), but its messages are taken off the client's parser *before* nats-py builds a ``Msg``
  for them: :func:`_tap` wraps the client's ``_process_msg`` once per client and hands the raw
  frames of tapped subscriptions to their fetcher as :class:`Delivery` tuples, and
  :func:`_front_parser` takes such frames off the front of the read buffer before nats-py's
  parser sees them at all; every other subscription goes through nats-py untouched. Headers
  are parsed here, the way nats-py parses them (:func:`parse_headers`).
* **ack**: a batch's acks and delayed naks are ``PUB`` frames on each message's reply subject —
  the same bytes ``Msg.ack()``/``Msg.nak(delay)`` send — written to the connection as one
  buffer and flushed once.

``_process_msg``, ``_ps`` (the parser), ``_send_command`` and ``_flush_pending`` are nats-py
internals; the version range in ``pyproject.toml`` is the one this was written against, and
every ingest test runs through this path. This is the only module that touches nats-py's
internals: everything else uses its public API, on connections made by
:func:`streams.adapters.nats.connect_nats`, so a nats-py upgrade is checked here and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, NamedTuple

import orjson
from nats.aio.client import Client as Nats
from nats.aio.subscription import Subscription
from nats.errors import ConnectionClosedError

from stages.ack_policy import AckDecision, Action
from stages.ingest.ingress import Receipt

_GRACE_S = 0.005
"""How long after a pull request's expiry a fetch waits for its status before returning."""


class Delivery(NamedTuple):
    """One message delivered on a fetcher's inbox (a tuple: one is made per message)."""

    subject: str
    reply: str
    """The JetStream ack subject (empty for a pull request's status message)."""
    data: bytes
    headers: dict[str, str] | None


_SPACE = re.compile(r"\s")


def parse_headers(raw: bytes | None) -> dict[str, str] | None:
    """A NATS header block as nats-py reads it: ``Name: Value`` lines (names trimmed and
    ASCII, values trimmed and UTF-8 with replacement, the last of a repeated name wins), and an
    inline status (``NATS/1.0 404 No Messages``) as ``Status`` and ``Description``."""
    if not raw:
        return None
    head, _, rest = raw.partition(b"\r\n")
    out: dict[str, str] = {}
    if len(head) > 8:  # "NATS/1.0 <status>[ <description>]"
        status, _, description = head[9:].strip().partition(b" ")
        if status.isdigit():
            out["Status"] = status.decode()
        if description:
            out["Description"] = description.decode("utf-8", "replace")
    for line in rest.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        try:
            key = name.strip().decode("ascii")
        except UnicodeDecodeError:
            continue
        if _SPACE.search(key):
            continue
        out[key] = value.strip().decode("utf-8", "replace")
    return out or None


_Sink = Callable[[bytes, bytes, bytes, bytes | None], None]
_ProcessMsg = Callable[[int, bytes, bytes, bytes, bytes | None], Awaitable[None]]


def _tap(nc: Nats) -> dict[int, _Sink]:
    """The client's tapped subscriptions (sid → sink), installing the tap on first use."""
    taps: dict[int, _Sink] | None = getattr(nc, "_tideway_taps", None)
    if taps is not None:
        return taps
    found: dict[int, _Sink] = {}
    original: _ProcessMsg = nc._process_msg  # type: ignore[assignment]

    async def process_msg(sid: int, subject: bytes, reply: bytes, data: bytes,
                          headers: bytes | None) -> None:
        sink = found.get(sid)
        if sink is None:
            await original(sid, subject, reply, data, headers)
        else:
            sink(subject, reply, data, headers)

    nc._process_msg = process_msg  # type: ignore[method-assign]
    nc._tideway_taps = found  # type: ignore[attr-defined]
    _front_parser(nc, found)
    return found


_AWAITING_CONTROL_LINE = 1  # nats-py's parser state between protocol operations


def _front_parser(nc: Nats, taps: dict[int, _Sink]) -> None:
    """Cut the tapped subscriptions' messages off the front of nats-py's parse buffer.

    Each chunk read from the socket is appended to the parser's buffer; before nats-py's own
    parse (a regular expression and a dispatch per frame) runs, this takes the leading
    ``HMSG`` frames of tapped subscriptions straight to their sinks. It stops at the first
    frame that is anything else and leaves it, and everything after it, to nats-py, or at an
    incomplete tapped frame, which waits in the buffer for the next chunk.
    """
    parser = nc._ps
    original = parser.parse

    async def parse(data: bytes = b"") -> None:
        buf = parser.buf  # reset() replaces it on reconnect: read it every time
        buf.extend(data)
        if parser.state != _AWAITING_CONTROL_LINE:
            await original()
            return
        pos, size, waiting = 0, len(buf), False
        while buf.startswith(b"HMSG ", pos):
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                waiting = True
                break
            fields = bytes(buf[pos + 5 : eol]).split()
            if len(fields) == 5:
                subject, sid, reply, header_size, total_size = fields
            elif len(fields) == 4:
                subject, sid, header_size, total_size = fields
                reply = b""
            else:
                break
            sink = taps.get(int(sid))
            if sink is None:
                break
            start = eol + 2
            split, end = start + int(header_size), start + int(total_size)
            if end + 2 > size:
                waiting = True
                break
            sink(subject, reply, bytes(buf[split:end]),
                 bytes(buf[start:split]) if split > start else None)
            pos = end + 2
        if pos:
            del buf[:pos]
        if buf and not waiting:
            await original()

    parser.parse = parse  # type: ignore[method-assign]


def _tokens(reply: str) -> tuple[list[str], int]:
    # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>, or the v2 form
    # with <domain>.<account hash> after $JS.ACK (and a trailing token).
    tokens = reply.split(".")
    return tokens, 2 if len(tokens) == 9 else 4


def pending_of(delivery: Delivery) -> int:
    """How many messages the consumer still had pending when it delivered ``delivery``."""
    tokens, base = _tokens(delivery.reply)
    return int(tokens[base + 6])


def receipt_of(delivery: Delivery) -> Receipt:
    """The :class:`Receipt` of a JetStream message (metadata parsed from its reply subject)."""
    tokens, base = _tokens(delivery.reply)
    return Receipt.of(
        subject=delivery.subject, data=delivery.data, headers=delivery.headers,
        stream_seq=int(tokens[base + 3]), received_at_ns=int(tokens[base + 5]),
        delivered=int(tokens[base + 2]),
    )


class Fetcher:
    """One worker's pull channel on the durable consumer."""

    def __init__(self, nc: Nats, *, stream: str, durable: str) -> None:
        self.nc = nc
        self.api = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self.inbox = nc.new_inbox()
        self._sub: Subscription | None = None
        self._msgs: list[Delivery] = []
        self._want = 0
        self._done: asyncio.Future[None] | None = None
        self._requests = 0
        self._reply = b""
        self.last_status: str | None = None

    async def start(self) -> Fetcher:
        self._sub = await self.nc.subscribe(f"{self.inbox}.*", cb=_never_called)
        _tap(self.nc)[self._sub._id] = self._on_frame
        return self

    async def stop(self) -> None:
        if self._sub is not None:
            # Unsubscribe first: a message still arriving meanwhile reaches this fetcher
            # instead of nats-py's placeholder callback.
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            _tap(self.nc).pop(self._sub._id, None)
            self._sub = None
        # Messages that arrived after the last fetch returned were never processed: hand them
        # back for redelivery now, rather than leave them waiting out ``ack_wait`` (30 s by
        # default) after every restart. If the connection is gone, ``ack_wait`` still applies.
        left, self._msgs = self._msgs, []
        if left:
            with contextlib.suppress(Exception):
                await acknowledge(self.nc, left, (_GIVE_BACK,) * len(left))

    def _on_frame(self, subject: bytes, reply: bytes, data: bytes,
                  headers: bytes | None) -> None:
        # This runs inside nats-py's read loop, which stops reading for good on an exception:
        # nothing here may raise. NATS carries any bytes in a subject; one that is not UTF-8
        # keeps its odd bytes as backslash escapes, so the envelope is recorded as
        # SUBJECT_INVALID like any other misspelt subject.
        if reply:
            self._msgs.append(Delivery(subject.decode("utf-8", "backslashreplace"),
                                       reply.decode("utf-8", "backslashreplace"), data,
                                       parse_headers(headers) if headers else None))
            if len(self._msgs) >= self._want:
                self._finish()
            return
        status = (parse_headers(headers) or {}).get("Status")
        if status == "100" or subject != self._reply:  # heartbeat, or an old request's
            return
        self.last_status = status
        self._finish()

    def _finish(self) -> None:
        done = self._done
        if done is not None and not done.done():
            done.set_result(None)

    async def fetch(self, batch: int, wait_s: float) -> list[Delivery]:
        """Up to ``batch`` messages; returns what arrived within ``wait_s`` (maybe none)."""
        self._want = batch
        self._done = done = asyncio.get_running_loop().create_future()
        if len(self._msgs) < batch:
            self._requests += 1
            reply = f"{self.inbox}.{self._requests}"
            self._reply = reply.encode()
            request = {"batch": batch - len(self._msgs), "expires": int(wait_s * 1e9),
                       "no_wait": True}
            await self.nc.publish(self.api, orjson.dumps(request), reply=reply)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(done, wait_s + _GRACE_S)
        msgs, self._msgs = self._msgs, []
        return msgs


_GIVE_BACK = AckDecision(action=Action.NAK, delay_s=0.0)


async def _never_called(msg: Any) -> None:  # the tap takes the subscription's messages
    raise AssertionError("a tapped subscription's message reached nats-py")


async def acknowledge(nc: Nats, deliveries: Sequence[Delivery],
                      decisions: Sequence[AckDecision]) -> None:
    """Send each message's ack or delayed nak, as one write (fire-and-forget frames)."""
    if not deliveries:
        return
    if nc.is_closed:
        raise ConnectionClosedError
    frames: list[str] = []
    append = frames.append
    for delivery, decision in zip(deliveries, decisions, strict=True):
        if decision.action is Action.ACK:
            append(f"PUB {delivery.reply} 4\r\n+ACK\r\n")
        else:
            body = f'-NAK {{"delay": {int(decision.delay_s * 1e9)}}}'
            append(f"PUB {delivery.reply} {len(body)}\r\n{body}\r\n")
    await nc._send_command("".join(frames).encode())
    if nc._flush_queue is not None and nc._flush_queue.empty():  # as nc.publish does
        await nc._flush_pending()


@contextlib.asynccontextmanager
async def ephemeral_fetcher(nc: Nats, stream: str, config: Any) -> AsyncIterator[Fetcher]:
    """A :class:`Fetcher` on a consumer made from ``config`` (a ``ConsumerConfig`` with its
    ``name``: ``tideway replay``'s, a schema trial's), deleted again on the way out (else it
    would linger until its ``inactive_threshold``)."""
    js = nc.jetstream()
    await js.add_consumer(stream, config)
    fetcher = await Fetcher(nc, stream=stream, durable=config.name).start()
    try:
        yield fetcher
    finally:
        await fetcher.stop()
        with contextlib.suppress(Exception):
            await js.delete_consumer(stream, config.name)
