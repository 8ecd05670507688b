"""One module per external system: how Tideway connects to it, with which settings, and how
that library's exceptions become Tideway's (:mod:`streams.errors`).

* :mod:`streams.adapters.postgres` — asyncpg pools and single connections, the ``Conn`` alias,
  database administration;
* :mod:`streams.adapters.nats` — the one NATS connect function (reconnect policy, outage
  logging); :mod:`streams.ingest.fetch` is the only module that touches nats-py internals;
* :mod:`streams.adapters.redis` — the Redis client and redis-py's errors;
* :mod:`streams.adapters.outage` — one log line when a dependency goes down and one when it is
  back, shared by the adapters and the ingest consumer;
* :mod:`streams.clickhouse` — ClickHouse (a server or in-process chDB);
* :mod:`streams.objects` — the object store (``pyarrow.fs``).

Nothing else imports a driver to *connect*: a process asks its adapter, so every connection of
one kind is made with the same defaults and fails with the same stable codes.
"""
