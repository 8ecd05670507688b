"""Every pair of job states against the table, and the table against migration 0003's trigger."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest

from stages.jobs import job_state
from stages.jobs.job_state import (
    ACTIVE,
    TERMINAL,
    JobState,
    can_transition,
    check_transition,
)
from stages.transitions import IllegalTransition

S = JobState
LEGAL = {
    (S.CREATED, S.QUEUED), (S.CREATED, S.SKIPPED), (S.CREATED, S.CANCELLED),
    (S.QUEUED, S.RUNNING), (S.QUEUED, S.SKIPPED), (S.QUEUED, S.CANCELLED),
    (S.RUNNING, S.SUCCEEDED), (S.RUNNING, S.RETRY_WAIT), (S.RUNNING, S.FAILED),
    (S.RUNNING, S.CANCEL_REQUESTED),
    (S.RETRY_WAIT, S.QUEUED), (S.RETRY_WAIT, S.CANCELLED),
    (S.CANCEL_REQUESTED, S.CANCELLED),
}  # fmt: skip


@pytest.mark.parametrize("pair", list(itertools.product(JobState, JobState)), ids=str)
def test_every_pair_matches_the_spec(pair: tuple[JobState, JobState]) -> None:
    current, target = pair
    legal = pair in LEGAL
    assert can_transition(current, target) is legal
    if legal:
        assert check_transition(current, target) is target
    else:
        with pytest.raises(IllegalTransition) as info:
            check_transition(current, target)
        assert info.value.code == "ILLEGAL_JOB_TRANSITION"


def test_terminal_and_active_states() -> None:
    assert {S.SUCCEEDED, S.FAILED, S.CANCELLED, S.SKIPPED} == TERMINAL
    assert {S.RUNNING, S.CANCEL_REQUESTED} == ACTIVE
    assert not any(can_transition(s, t) for s in TERMINAL for t in JobState)


def _migration() -> object:
    path = Path(__file__).resolve().parents[4] / "migrations" / "versions" / "0003_jobs.py"
    spec = importlib.util.spec_from_file_location("migration_0003", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_database_trigger_allows_exactly_the_table() -> None:
    migration = _migration()
    assert set(migration._JOB_TRANSITIONS) == job_state.sql_pairs()  # type: ignore[attr-defined]


def test_the_run_trigger_allows_exactly_the_run_table() -> None:
    from stages.jobs import run_state

    migration = _migration()
    assert set(migration._RUN_TRANSITIONS) == run_state.sql_pairs()  # type: ignore[attr-defined]
