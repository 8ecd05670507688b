"""Redis hot state: the newest *measurement* of each device and topic.

Layout: one hash per device, ``<prefix>state:<tenant>:<device>``, with two fields per topic:
``<topic>`` holds a JSON document (``ts``, ``seq``, ``values``, ``message_key``,
``received_at``) and ``<topic>@order`` the measurement order of that document
(:func:`stages.ingest.plan.hot_state_order`, a fixed-width string of ts then seq).

"Newest measurement wins" is decided *inside Redis*, by one Lua script call per batch that
compares orders and writes only when the incoming measurement is strictly newer. Concurrent
consumers therefore cannot race (scripts run atomically), an older envelope arriving late
never overwrites a newer one, and re-publishing the same envelope is a no-op. ``pcall``
contains a failure (say, a key someone overwrote with a string) to that key's envelopes.

The script takes all of a batch's keys in one call, which assumes a single Redis node (in
Redis Cluster the keys would need a common hash tag); ``CHUNK`` bounds the call size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson

from streams.adapters.redis import Redis, RedisError, translate

CHUNK = 2000

WRITTEN, NOT_NEWER, FAILED = 1, 0, -1
_CODES = {ord("1"): WRITTEN, ord("0"): NOT_NEWER, ord("x"): FAILED}

# ARGV[1] packs, per key, "<topic>\0<order>\0<doc>\0" (one argument instead of three per
# key: redis-py encodes arguments one by one, which dominated the call's client-side cost).
# The answer is one string with a character per key ('1' written, '0' not newer, 'x' failed)
# rather than a list of integers, which redis-py would parse one reply at a time.
_SCRIPT = """
local out = {}
local fields = {}
for part in string.gmatch(ARGV[1], '([^%z]*)%z') do
  fields[#fields + 1] = part
end
for i = 1, #KEYS do
  local b = (i - 1) * 3
  local field, order, doc = fields[b + 1], fields[b + 2], fields[b + 3]
  local current = redis.pcall('HGET', KEYS[i], field .. '@order')
  if type(current) == 'table' and current.err then
    out[i] = 'x'
  elseif current and current >= order then
    out[i] = '0'
  else
    local ok = redis.pcall('HSET', KEYS[i], field, doc, field .. '@order', order)
    if type(ok) == 'table' and ok.err then out[i] = 'x' else out[i] = '1' end
  end
end
return table.concat(out)
"""

# Withdraw one document: only while the field still holds exactly that document (a newer
# measurement written since stays), put back ARGV[3] with order ARGV[4], or clear the topic
# when ARGV[3] is empty.
_WITHDRAW = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1], ARGV[1] .. '@order')
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3], ARGV[1] .. '@order', ARGV[4])
end
return 1
"""


class HotItem(NamedTuple):
    """One measurement to offer to the hot state (a tuple: one per envelope)."""

    key: str
    topic: str
    order: str
    doc: bytes


class HotState:
    """Writes and reads the per-device hot state."""

    def __init__(self, client: Redis) -> None:
        self.client = client
        self._script = client.register_script(_SCRIPT)
        self._withdraw = client.register_script(_WITHDRAW)

    async def offer(self, items: Sequence[HotItem]) -> list[int]:
        """Offer measurements; per item ``WRITTEN``, ``NOT_NEWER`` or ``FAILED``.

        Raises :class:`TransientError` / :class:`PermanentError` when the call itself fails.
        """
        # Only the newest measurement per (key, topic) can win; the others are NOT_NEWER.
        best: dict[tuple[str, str], int] = {}
        for index, item in enumerate(items):
            slot = (item.key, item.topic)
            held = best.get(slot)
            if held is None or items[held].order < item.order:
                best[slot] = index
        results = [NOT_NEWER] * len(items)
        chosen = list(best.values())
        try:
            for start in range(0, len(chosen), CHUNK):
                part = chosen[start : start + CHUNK]
                packed = b"".join(
                    b"%s\0%s\0%s\0" % (items[i].topic.encode(), items[i].order.encode(),
                                          items[i].doc) for i in part
                )
                answer = await self._script(keys=[items[i].key for i in part], args=[packed])
                if isinstance(answer, str):  # a client made with decode_responses=True
                    answer = answer.encode()
                codes = _CODES
                for index, code in zip(part, answer, strict=True):
                    results[index] = codes[code]
        except (RedisError, OSError) as exc:
            raise translate(exc) from exc
        # A failed key fails every item offered for it, not only the one that was sent.
        failed = {(items[i].key, items[i].topic) for i in chosen if results[i] == FAILED}
        if failed:
            for index, item in enumerate(items):
                if (item.key, item.topic) in failed:
                    results[index] = FAILED
        return results

    async def withdraw(self, item: HotItem, previous: HotItem | None) -> None:
        """Take back ``item`` if it is still its topic's document, putting ``previous`` (the
        newest measurement that stays, if any) in its place."""
        args: list[str | bytes] = [item.topic, item.doc, b"", b""]
        if previous is not None:
            args[2:] = [previous.doc, previous.order]
        try:
            await self._withdraw(keys=[item.key], args=args)
        except (RedisError, OSError) as exc:
            raise translate(exc) from exc

    async def replace_many(self, swaps: Sequence[tuple[HotItem, HotItem]]) -> None:
        """:meth:`withdraw` ``old`` for ``new`` for each pair, in one pipelined round trip
        (a reprocess's corrections: each only while the field still holds ``old``)."""
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for old, new in swaps:
                    await self._withdraw(keys=[old.key],
                                         args=[old.topic, old.doc, new.doc, new.order],
                                         client=pipe)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise translate(exc) from exc

    async def read(self, key: str) -> dict[str, Any]:
        """The hot state of one device: ``{topic: document}``."""
        try:
            raw = await self.client.hgetall(key)
        except RedisError as exc:
            raise translate(exc) from exc
        out: dict[str, Any] = {}
        for field, value in raw.items():
            name = field.decode() if isinstance(field, bytes) else field
            if not name.endswith("@order"):
                out[name] = orjson.loads(value)
        return out
