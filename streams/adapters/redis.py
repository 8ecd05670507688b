"""Redis (redis-py): the client every Tideway process uses, and redis-py's errors translated.

Short timeouts, so that a dead server is noticed in about a second, not after the kernel
gives up. An unreachable or timed-out server is a ``TransientError`` ``REDIS_UNAVAILABLE``;
anything else Redis answers with an error is a ``PermanentError`` ``REDIS_ERROR``.
"""

from __future__ import annotations

from typing import Final

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from streams.errors import PermanentError, TransientError

__all__ = ["CONNECT_TIMEOUT", "SOCKET_TIMEOUT", "Redis", "RedisError", "redis_client", "translate"]

Redis = aioredis.Redis

CONNECT_TIMEOUT: Final = 1.0
"""Seconds to connect: a server that is down is found at once."""
SOCKET_TIMEOUT: Final = 5.0
"""Seconds one call may wait for its answer."""


def redis_client(url: str) -> aioredis.Redis:
    """A Redis client that fails fast when the server is unreachable."""
    return aioredis.from_url(
        url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=SOCKET_TIMEOUT,
        health_check_interval=0,
    )


def translate(exc: RedisError | OSError) -> TransientError | PermanentError:
    """A redis-py (or socket) error as a Tideway error with a stable code."""
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | OSError):
        return TransientError(f"Redis unavailable: {exc}", code="REDIS_UNAVAILABLE")
    return PermanentError(f"Redis refused the write: {exc}", code="REDIS_ERROR")
