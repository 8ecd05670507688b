"""Domain events: what happened to a tenant's sessions and runs, told truthfully and at least once.

Subjects (``streams.names``, namespaced like every other), all on the EVENTS stream::

    events.<tenant>.run.<state>          a run was created (pending) or changed state:
                                         running, cancelled, succeeded, partial, failed
    events.<tenant>.session.published    a session's active run changed: a run published,
                                         or a rollback moved the pointer

The body is JSON: ``{"id", "type", "tenant", "run_id", "session_id", "at", ...}`` with
``status`` for a run event and ``previous_run_id`` for ``session.published``; ``id`` is the
event's outbox id (increasing; what a consumer deduplicates by) and ``at`` when the change was
made. ``GET /v1/events`` streams a tenant's events to browsers (server-sent events), each with
its stream sequence as the SSE ``id``, so a client reconnecting with ``Last-Event-ID`` gets
what it missed (:mod:`streams.api.event_stream`).

Theory of operation (spec 003, "transactional outbox"). No code path publishes an event.
Triggers in Postgres (migration ``0025_event_outbox``) write each event into ``event_outbox``
in the same transaction as the change it announces - a run inserted, its status updated, a
session's ``active_run_id`` moved - so an event exists if and only if its change committed,
whether the change came from intake, a worker, an operator's cancel or retry, a reprocess or a
rollback. A relay (:class:`~streams.domain_events.relay.EventRelay`, run by every worker; one
at a time relays, under a transaction-scoped advisory lock) publishes the rows in id order to
JetStream with ``Nats-Msg-Id`` = the outbox id, then stamps them relayed: a NATS outage holds
events in Postgres, never loses them; a relay killed between the publish and the stamp sends
again, and JetStream's duplicate window drops the copy. Two changes of one run (or of one
session) lock the same row, so their ids - and their order on the stream - are their commit
order.
"""

from __future__ import annotations

from streams.domain_events.relay import EventRelay, RelayRound
from streams.domain_events.stream import (
    CHANNEL,
    ensure_events_stream,
    event_body,
    events_stream_config,
)

__all__ = [
    "CHANNEL", "EventRelay", "RelayRound", "ensure_events_stream", "event_body",
    "events_stream_config",
]
