"""Every resource name Tideway creates, in one place.

Streams, subjects, durable consumers, buckets, Redis key prefixes and ClickHouse tables are
derived from the settings' ``namespace`` (empty in production) so that tests and side-by-side
deployments never collide. Nothing else in the code base spells a stream or subject name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Names:
    """Resource names for one namespace."""

    namespace: str = ""

    def _p(self, name: str) -> str:
        return f"{self.namespace.upper()}_{name}" if self.namespace else name

    def _s(self, subject: str) -> str:
        return f"{self.namespace}.{subject}" if self.namespace else subject

    def subject(self, subject: str) -> str:
        """``subject`` in this namespace (for permission lists: ``telemetry.>``, ``events.>``)."""
        return self._s(subject)

    # -- streaming half -------------------------------------------------------------------
    @property
    def telemetry_stream(self) -> str:
        return self._p("TELEMETRY")

    @property
    def telemetry_subjects(self) -> str:
        """Wildcard of envelope subjects: ``telemetry.<tenant>.<device>.<topic>``."""
        return self._s("telemetry.*.*.*")

    def telemetry_subject(self, tenant: str, device: str, topic: str) -> str:
        return self._s(f"telemetry.{tenant}.{device}.{topic}")

    @property
    def ingest_durable(self) -> str:
        """The durable pull consumer shared by every ingest process."""
        return self._p("ingest")

    @property
    def dead_letter_stream(self) -> str:
        return self._p("TELEMETRY_DLQ")

    @property
    def dead_letter_subjects(self) -> str:
        return self._s("dlq.telemetry.>")

    def dead_letter_subject(self, tenant: str, code: str) -> str:
        """Where a dead-lettered envelope is announced: ``dlq.telemetry.<tenant>.<code>``."""
        return self._s(f"dlq.telemetry.{tenant}.{code.lower()}")

    # -- batch half -----------------------------------------------------------------------
    @property
    def sessions_stream(self) -> str:
        return self._p("SESSIONS")

    @property
    def sessions_subjects(self) -> str:
        """Notices that a whole-session file is ready: ``sessions.<tenant>.<device>``."""
        return self._s("sessions.*.*")

    def sessions_subject(self, tenant: str, device: str) -> str:
        return self._s(f"sessions.{tenant}.{device}")

    @property
    def intake_durable(self) -> str:
        return self._p("intake")

    @property
    def sessions_dead_letter_stream(self) -> str:
        """Session notices intake could not accept (bad body, unknown object...)."""
        return self._p("SESSIONS_DLQ")

    @property
    def sessions_dead_letter_subjects(self) -> str:
        return self._s("dlq.sessions.>")

    def sessions_dead_letter_subject(self, tenant: str, device: str) -> str:
        return self._s(f"dlq.sessions.{tenant}.{device}")

    @property
    def session_bucket(self) -> str:
        """JetStream object-store bucket devices upload session files into."""
        return self._p("session-uploads").replace("_", "-").lower()

    @property
    def jobs_channel(self) -> str:
        """Postgres LISTEN/NOTIFY channel that wakes idle workers."""
        return self._p("tideway_jobs").lower()

    # -- domain events (the EVENTS stream, streams.domain_events) ---------------------------
    @property
    def events_stream(self) -> str:
        """Domain events relayed from the Postgres outbox (``events.<tenant>.<kind>``)."""
        return self._p("EVENTS")

    @property
    def events_subjects(self) -> str:
        """Every tenant's domain events."""
        return self._s("events.>")

    def event_subject(self, tenant: str, kind: str) -> str:
        """``events.<tenant>.<kind>``: ``session.published``, ``run.<state>``."""
        return self._s(f"events.{tenant}.{kind}")

    def tenant_events_subjects(self, tenant: str) -> str:
        """Every domain event of one tenant."""
        return self._s(f"events.{tenant}.>")

    # -- Redis / ClickHouse ---------------------------------------------------------------
    @property
    def redis_prefix(self) -> str:
        return f"{self.namespace}:tideway:" if self.namespace else "tideway:"

    def hot_state_key(self, tenant: str, device: str) -> str:
        return f"{self.redis_prefix}state:{tenant}:{device}"

    @property
    def analytics_table(self) -> str:
        """ClickHouse table of published parameter values (one row per final value)."""
        return f"{self.namespace}_telemetry_values" if self.namespace else "telemetry_values"
