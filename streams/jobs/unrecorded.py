"""Outputs of an attempt whose job ended without success are removed, not left behind.

Theory of operation
-------------------
An executor writes its outputs before the engine records them: a pure stage promotes its
directory (``datasets/<run>/<job>-<key>``) and then returns, and only the completing
transaction inserts the ``derived_datasets`` rows. If that completion is refused - the run was
cancelled while the stage finished (issue 27: a fusion done inside the heartbeat window left its
folder under the cancelled run), the job was reaped - or the executor is stopped just after
promoting, nothing records those files. Once the job has ended without success nothing ever
will: a cancelled or failed job is never completed again, a retried run writes under its own
run id, and resuming reuses only the *recorded* datasets of succeeded jobs.

So an executor declares where it promotes before it writes (:meth:`JobContext.writes_to`), and
when the worker lets go of an attempt that did not succeed it asks where the job stands:

- ``cancelled`` or ``failed``: the declared outputs are removed
  (:meth:`ObjectStore.discard_unrecorded_outputs`);
- anything else (``retry_wait``, ``queued``, ``running`` in another worker): they stay, since
  the next attempt computes the same idempotency key and reuses them.

Only an attempt's own outputs are declared: its job's directory in its own run, never an
upstream's and never another run's (outputs a retried run resumes are not declared). Whatever
this misses - a job cancelled *later*, while it waits for its retry; a worker killed between
the promotion and the refusal; a stage process that promotes in the instant after it was
stopped - retention sweeps (``streams.retention.unrecorded_outputs``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any, Final

from stages.jobs.job_state import JobState
from streams.jobs import queue
from streams.objects import ObjectStore

__all__ = ["ENDED", "discard_if_ended"]

ENDED: Final = frozenset({JobState.CANCELLED, JobState.FAILED})
"""The states in which a job's unrecorded outputs can never be recorded."""


async def discard_if_ended(
    db: Any, store: ObjectStore, job_id: uuid.UUID, urls: Sequence[str]
) -> JobState | None:
    """Remove ``urls`` (the outputs an attempt of ``job_id`` declared) if the job ended without
    success; returns the state that decided it when they were removed, else ``None``.

    ``db``: an asyncpg pool. Raises what the database or the store raise (the caller logs it and
    leaves the outputs to retention)."""
    if not urls:
        return None
    async with db.acquire() as conn:
        state = await queue.job_state(conn, job_id)
    if state not in ENDED:
        return None
    for url in urls:
        await asyncio.to_thread(store.discard_unrecorded_outputs, store.key(url))
    return state
