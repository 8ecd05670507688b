"""Both streaming state machines, walked pair by pair against the spec's diagrams."""

from __future__ import annotations

import itertools

import pytest

from stages.ingest import processing_state as ps
from stages.ingest import status as st
from stages.ingest.processing_state import ProcessingState as P
from stages.ingest.status import Status as S
from stages.transitions import IllegalTransition

# Spec 001's diagram, plus Tideway's one documented extension (dlq redrive).
SPEC_STATUS_MOVES = {
    ("queued", "processing"),
    ("queued", "duplicate"),
    ("processing", "completed"),
    ("processing", "failed_validation"),
    ("processing", "inactive_skipped"),
    ("processing", "failed_terminal"),
    ("failed_terminal", "completed"),
}
SPEC_STATE_MOVES = {("processed", "publish_failed"), ("publish_failed", "processed")}


@pytest.mark.parametrize(("a", "b"), list(itertools.product(list(S), repeat=2)))
def test_every_status_pair(a: S, b: S) -> None:
    legal = (a.value, b.value) in SPEC_STATUS_MOVES
    assert st.can_transition(a, b) is legal
    if legal:
        st.check_transition(a, b)
    else:
        with pytest.raises(IllegalTransition) as info:
            st.check_transition(a, b)
        assert info.value.code == "ILLEGAL_STATUS_TRANSITION"


@pytest.mark.parametrize(("a", "b"), list(itertools.product(list(P), repeat=2)))
def test_every_processing_state_pair(a: P, b: P) -> None:
    legal = (a.value, b.value) in SPEC_STATE_MOVES
    assert ps.can_transition(a, b) is legal
    if legal:
        ps.check_transition(a, b)
    else:
        with pytest.raises(IllegalTransition):
            ps.check_transition(a, b)


def test_terminal_statuses_have_no_way_out_except_redrive() -> None:
    for status in (S.COMPLETED, S.FAILED_VALIDATION, S.INACTIVE_SKIPPED, S.DUPLICATE):
        assert st.TRANSITIONS[status] == frozenset()
    assert st.TRANSITIONS[S.FAILED_TERMINAL] == {S.COMPLETED}


@pytest.mark.parametrize("final", sorted(st.FINAL))
def test_each_recorded_status_is_a_legal_path_from_queued(final: S) -> None:
    path = st.recorded_path(final)
    st.check_path(path)
    assert path[0] is S.QUEUED and path[-1] is final
    if final is not S.DUPLICATE:
        assert S.PROCESSING in path


def test_intermediate_statuses_are_not_recorded_finals() -> None:
    for status in (S.QUEUED, S.PROCESSING):
        with pytest.raises(IllegalTransition):
            st.recorded_path(status)


def test_paths_that_skip_a_step_are_refused() -> None:
    with pytest.raises(IllegalTransition):
        st.check_path([S.QUEUED, S.COMPLETED])
    with pytest.raises(IllegalTransition):
        st.check_path([S.PROCESSING, S.COMPLETED])
    with pytest.raises(IllegalTransition):
        st.check_path([])


@pytest.mark.parametrize("final", list(P))
def test_each_recorded_processing_state_is_a_legal_path(final: P) -> None:
    path = ps.recorded_path(final)
    ps.check_path(path)
    assert path[-1] is final


def test_publish_failed_is_not_an_initial_state() -> None:
    with pytest.raises(IllegalTransition):
        ps.check_path([P.PUBLISH_FAILED])
    with pytest.raises(IllegalTransition):
        ps.check_path([P.INVALID, P.PROCESSED])
