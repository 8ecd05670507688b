"""The Postgres job engine: queue API, worker, run queries.

Start with ``streams.jobs.queue`` (enqueue, claim, complete, fail, heartbeat, reap, cancel),
``streams.jobs.executor`` (what a job type implements) and ``streams.jobs.worker``.
``docs/jobs.md`` explains how the pieces fit.
"""
