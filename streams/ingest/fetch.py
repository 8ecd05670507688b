"""Pull batches from the shared durable consumer, cheaply.

nats-py's ``PullSubscription.fetch`` spends tens of microseconds per message (a task, a
timer and a UUID for every ``next_msg``), which alone would cap a consumer near 13,000
envelopes/s on the target machine. This fetcher speaks the JetStream pull protocol directly:
one pull request (``{"batch": n, "expires": t}``) to ``$JS.API.CONSUMER.MSG.NEXT``, replies
collected by a plain subscription callback into a list, done when ``n`` messages or that
request's status (404 no messages, 408 request expired, 409 …) arrive. Each request gets its
own reply subject, so a status that arrives late for an earlier request cannot end (or, by
being missed, stall) the current one; should a status never come, the fetch ends shortly
after the request's expiry anyway. Messages delivered late for an earlier request are kept
for the next fetch. Acks are single ``PUB`` frames on the message's reply subject — the same
bytes ``Msg.ack()``/``Msg.nak(delay)`` send.
"""

from __future__ import annotations

import asyncio
import contextlib

import orjson
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from stages.ingest.ack_policy import AckDecision, Action
from stages.ingest.ingress import Receipt

_ACK = b"+ACK"


def _tokens(msg: Msg) -> tuple[list[str], int]:
    # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>, or the v2 form
    # with <domain>.<account hash> after $JS.ACK (and a trailing token).
    tokens = msg.reply.split(".")
    return tokens, 2 if len(tokens) == 9 else 4


def pending_of(msg: Msg) -> int:
    """How many messages the consumer still had pending when it delivered ``msg``."""
    tokens, base = _tokens(msg)
    return int(tokens[base + 6])


def receipt_of(msg: Msg) -> Receipt:
    """The :class:`Receipt` of a JetStream message (metadata parsed from its reply subject)."""
    tokens, base = _tokens(msg)
    return Receipt.of(
        subject=msg.subject, data=msg.data, headers=msg.headers,
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
        self._msgs: list[Msg] = []
        self._want = 0
        self._done: asyncio.Future[None] | None = None
        self._requests = 0
        self._reply = ""
        self.last_status: str | None = None

    async def start(self) -> Fetcher:
        self._sub = await self.nc.subscribe(f"{self.inbox}.*", cb=self._on_msg)
        return self

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None

    async def _on_msg(self, msg: Msg) -> None:
        if msg.reply:
            self._msgs.append(msg)
            if len(self._msgs) >= self._want:
                self._finish()
            return
        status = msg.headers.get("Status") if msg.headers else None
        if status == "100" or msg.subject != self._reply:  # heartbeat, or an old request's
            return
        self.last_status = status
        self._finish()

    def _finish(self) -> None:
        done = self._done
        if done is not None and not done.done():
            done.set_result(None)

    async def fetch(self, batch: int, wait_s: float) -> list[Msg]:
        """Up to ``batch`` messages; returns what arrived within ``wait_s`` (maybe none)."""
        self._want = batch
        self._done = done = asyncio.get_running_loop().create_future()
        if len(self._msgs) < batch:
            self._requests += 1
            self._reply = f"{self.inbox}.{self._requests}"
            request = {"batch": batch - len(self._msgs), "expires": int(wait_s * 1e9)}
            await self.nc.publish(self.api, orjson.dumps(request), reply=self._reply)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(done, wait_s + 0.25)
        msgs, self._msgs = self._msgs, []
        return msgs


async def acknowledge(nc: Nats, msgs: list[Msg], decisions: tuple[AckDecision, ...]) -> None:
    """Send each message's ack or delayed nak (fire-and-forget frames, flushed in bulk)."""
    publish = nc.publish
    for msg, decision in zip(msgs, decisions, strict=True):
        if decision.action is Action.ACK:
            await publish(msg.reply, _ACK)
        else:
            delay_ns = int(decision.delay_s * 1e9)
            await publish(msg.reply, b'-NAK {"delay": %d}' % delay_ns)
