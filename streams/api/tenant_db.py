"""The API's Postgres access, bound to the caller's tenant: the second wall behind the queries'
own ``WHERE`` (issue 26; row-level security, migration 0023).

Every statement a request runs goes through a :class:`TenantPool`: each runs inside a
transaction in which ``tideway.tenant_id`` and ``tideway.tenant`` are set with ``SET LOCAL``
semantics (``set_config(..., true)``), and the row-level security policies of the
``tideway_api`` role show and accept only that tenant's rows. A statement already inside a
transaction (the handler opened one) shares it; a transaction the handler opens sets the tenant
when it begins. Nothing is set for the session, so a connection handed back to the pool - or a
server connection PgBouncer hands to another client in transaction mode - carries no tenant.

A query that forgot its tenant filter then returns nothing of another tenant's instead of
everything; an insert of another tenant's row is refused (``WITH CHECK``).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any, Final

__all__ = ["TenantConnection", "TenantPool"]

SET_TENANT: Final = (
    "SELECT set_config('tideway.tenant_id', $1, true), set_config('tideway.tenant', $2, true)"
)


class TenantConnection:
    """An asyncpg connection whose every statement runs with the tenant set."""

    __slots__ = ("_conn", "_tenant", "_tenant_id")

    def __init__(self, conn: Any, tenant_id: uuid.UUID, tenant: str) -> None:
        self._conn = conn
        self._tenant_id = str(tenant_id)
        self._tenant = tenant

    async def _set(self) -> None:
        await self._conn.execute(SET_TENANT, self._tenant_id, self._tenant)

    async def _scoped(self, name: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self._conn, name)
        if self._conn.is_in_transaction():
            return await method(*args, **kwargs)
        async with self._conn.transaction():
            await self._set()
            return await method(*args, **kwargs)

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        return await self._scoped("fetch", *args, **kwargs)

    async def fetchrow(self, *args: Any, **kwargs: Any) -> Any:
        return await self._scoped("fetchrow", *args, **kwargs)

    async def fetchval(self, *args: Any, **kwargs: Any) -> Any:
        return await self._scoped("fetchval", *args, **kwargs)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        return await self._scoped("execute", *args, **kwargs)

    async def executemany(self, *args: Any, **kwargs: Any) -> Any:
        return await self._scoped("executemany", *args, **kwargs)

    async def copy_records_to_table(self, *args: Any, **kwargs: Any) -> Any:
        return await self._scoped("copy_records_to_table", *args, **kwargs)

    async def copy_from_query(self, *args: Any, **kwargs: Any) -> Any:
        return await self._scoped("copy_from_query", *args, **kwargs)

    def transaction(self, **kwargs: Any) -> _TenantTransaction:
        return _TenantTransaction(self, self._conn.transaction(**kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _TenantTransaction:
    """``conn.transaction()`` that sets the tenant when it is the outermost one."""

    def __init__(self, owner: TenantConnection, inner: Any) -> None:
        self._owner = owner
        self._inner = inner

    async def __aenter__(self) -> Any:
        outermost = not self._owner._conn.is_in_transaction()
        await self._inner.start()
        if outermost:
            try:
                await self._owner._set()
            except BaseException:
                await self._inner.rollback()
                raise
        return self._inner

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            await self._inner.commit()
        else:
            await self._inner.rollback()

    async def start(self) -> None:
        await self.__aenter__()

    async def commit(self) -> None:
        await self._inner.commit()

    async def rollback(self) -> None:
        await self._inner.rollback()


class TenantPool:
    """An asyncpg pool whose connections are :class:`TenantConnection` for one tenant."""

    __slots__ = ("_pool", "_tenant", "_tenant_id")

    def __init__(self, pool: Any, tenant_id: uuid.UUID, tenant: str) -> None:
        self._pool = pool
        self._tenant_id = tenant_id
        self._tenant = tenant

    @contextlib.asynccontextmanager
    async def acquire(self, **kwargs: Any) -> AsyncIterator[TenantConnection]:
        async with self._pool.acquire(**kwargs) as conn:
            yield TenantConnection(conn, self._tenant_id, self._tenant)

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        async with self.acquire() as conn:
            return await conn.fetch(*args, **kwargs)

    async def fetchrow(self, *args: Any, **kwargs: Any) -> Any:
        async with self.acquire() as conn:
            return await conn.fetchrow(*args, **kwargs)

    async def fetchval(self, *args: Any, **kwargs: Any) -> Any:
        async with self.acquire() as conn:
            return await conn.fetchval(*args, **kwargs)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        async with self.acquire() as conn:
            return await conn.execute(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)
