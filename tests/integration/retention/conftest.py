"""The streaming pipeline's fixtures (real NATS, Postgres, Redis, chDB), shared with the ingest
tests: retention is about the rows that pipeline writes."""

from __future__ import annotations

from tests.integration.ingest.conftest import fleet, harness

__all__ = ["fleet", "harness"]
