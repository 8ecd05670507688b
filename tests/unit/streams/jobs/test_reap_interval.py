"""How often a worker reaps follows the shortest stale threshold it can meet."""

from __future__ import annotations

from stages.jobs.dag import DEFAULT_DAG, JobSpec
from stages.jobs.graph import Dag
from streams.jobs.worker import reap_interval


def test_the_default_dag_is_reaped_every_thirty_seconds() -> None:
    shortest = min(spec.stale_after_s for spec in DEFAULT_DAG.values())
    assert shortest == 60.0  # the I/O jobs'
    assert reap_interval(None, DEFAULT_DAG) == 30.0


def test_a_dag_with_a_short_threshold_is_reaped_at_half_of_it() -> None:
    dag = Dag([JobSpec(name="quick", stale_after_s=1.0), JobSpec(name="slow", stale_after_s=600)])
    assert reap_interval(None, dag) == 0.5


def test_the_configured_override_wins_and_the_bounds_hold() -> None:
    assert reap_interval(4.0, DEFAULT_DAG) == 2.0
    assert reap_interval(0.05, DEFAULT_DAG) == 0.1  # never more often than ten times a second
    assert reap_interval(600.0, Dag([JobSpec(name="quick", stale_after_s=1.0)])) == 30.0
