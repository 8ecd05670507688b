"""The one generic state-machine helper, and every machine using it (issue 12, item 2)."""

from __future__ import annotations

import itertools
from enum import StrEnum
from types import ModuleType

import pytest

from schemas import error_codes
from stages.ingest import processing_state, status
from stages.jobs import job_state, run_state
from stages.transitions import IllegalTransition, Transitions


class Light(StrEnum):
    RED = "red"
    GREEN = "green"
    AMBER = "amber"
    OFF = "off"


LIGHTS = Transitions(
    table={
        Light.RED: frozenset({Light.GREEN, Light.OFF}),
        Light.GREEN: frozenset({Light.AMBER}),
        Light.AMBER: frozenset({Light.RED}),
        Light.OFF: frozenset(),
    },
    name="light",
    code="ILLEGAL_JOB_TRANSITION",
    initial=frozenset({Light.RED}),
)


def test_can_and_check_walk_every_pair() -> None:
    for a, b in itertools.product(Light, repeat=2):
        legal = b in LIGHTS.table[a]
        assert LIGHTS.can(a, b) is legal
        if legal:
            assert LIGHTS.check(a, b) is b
        else:
            with pytest.raises(IllegalTransition) as info:
                LIGHTS.check(a, b)
            assert info.value.code == "ILLEGAL_JOB_TRANSITION"
            assert str(info.value) == f"light cannot go from {a} to {b}"


def test_paths_start_in_an_initial_state_and_take_legal_steps() -> None:
    LIGHTS.check_path([Light.RED, Light.GREEN, Light.AMBER, Light.RED, Light.OFF])
    for bad in ([], [Light.GREEN, Light.AMBER], [Light.RED, Light.AMBER]):
        with pytest.raises(IllegalTransition):
            LIGHTS.check_path(bad)


def test_sql_pairs_and_a_machine_specific_refusal() -> None:
    assert LIGHTS.sql_pairs() == {"red>green", "red>off", "green>amber", "amber>red"}
    refusal = LIGHTS.illegal("not like that")
    assert isinstance(refusal, IllegalTransition) and refusal.code == LIGHTS.code


MACHINES = [
    (status, status.STATUS_MACHINE, "ILLEGAL_STATUS_TRANSITION"),
    (processing_state, processing_state.PROCESSING_MACHINE, "ILLEGAL_PROCESSING_STATE_TRANSITION"),
    (job_state, job_state.JOB_MACHINE, "ILLEGAL_JOB_TRANSITION"),
    (run_state, run_state.RUN_MACHINE, "ILLEGAL_RUN_TRANSITION"),
]


@pytest.mark.parametrize(("module", "machine", "code"), MACHINES, ids=lambda m: str(m)[:40])
def test_every_machine_is_its_table_and_the_helper(
    module: ModuleType, machine: Transitions[StrEnum], code: str
) -> None:
    # One table in one file; the checks are the helper's own, not a copy.
    assert machine.table is module.TRANSITIONS
    assert machine.code == code and code in error_codes.CODES
    assert module.can_transition == machine.can
    assert module.check_transition == machine.check
    for name in ("check_path", "sql_pairs"):
        if hasattr(module, name):
            assert getattr(module, name) == getattr(machine, name)
