"""The API keys this process verified lately, for the time Postgres cannot be asked.

Every request's key is checked against Postgres (``api_keys``), so a revocation takes effect
on the next request. When Postgres is unreachable, a key that this process verified within
``api.key_outage_grace_s`` is still accepted - uploads go on through an outage, as
docs/sessions.md promises for every path - and any other is answered 503 with
``Retry-After``: never 401 (the key may be fine) and never 500. Only hashes are kept.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Final

from streams.api.keys import Caller, hash_key

__all__ = ["KeyCache"]

MAX_KEYS: Final = 10_000


class KeyCache:
    """Key hash -> (caller, when last verified), least recently verified dropped first."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._seen: OrderedDict[str, tuple[Caller, float]] = OrderedDict()

    def verified(self, secret: str, caller: Caller) -> None:
        if not secret.isascii():  # never a key (streams.api.keys.authenticate)
            return
        key = hash_key(secret)
        self._seen[key] = (caller, time.monotonic())
        self._seen.move_to_end(key)
        while len(self._seen) > MAX_KEYS:
            self._seen.popitem(last=False)

    def forget(self, secret: str) -> None:
        if secret.isascii():
            self._seen.pop(hash_key(secret), None)

    def recent(self, secret: str) -> Caller | None:
        """The caller of ``secret`` if it was verified within the grace period."""
        if not secret.isascii():
            return None
        found = self._seen.get(hash_key(secret))
        if found is None or time.monotonic() - found[1] > self.grace_s:
            return None
        return found[0]
