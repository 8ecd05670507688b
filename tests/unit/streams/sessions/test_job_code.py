"""Every reference in the standard DAG resolves: its code exists and every edge has an end."""

from __future__ import annotations

import inspect

import pytest

from stages.jobs.dag import DEFAULT_DAG
from stages.jobs.summaries import Summary
from streams.sessions.job_code import resolve


@pytest.mark.parametrize("name", list(DEFAULT_DAG))
def test_every_job_names_code_that_exists(name: str) -> None:
    spec = DEFAULT_DAG[name]
    code = resolve(spec.code)
    assert callable(code), spec.code
    # A stage takes its inputs; an executor factory takes the executor table's resources.
    assert len(inspect.signature(code).parameters) >= 1, spec.code


def test_every_dependency_names_a_job_of_the_dag() -> None:
    for spec in DEFAULT_DAG.values():
        for dep in spec.deps:
            assert dep.on in DEFAULT_DAG, (spec.name, dep.on)


def test_every_declared_summary_is_read_from_one_job_and_its_rules_name_its_fields() -> None:
    models = [spec.summary for spec in DEFAULT_DAG.values() if spec.summary is not Summary]
    assert len(models) == len(set(models))
    for spec in DEFAULT_DAG.values():
        empty = spec.summary.read(None)
        for rule in spec.content:
            for field in (rule.flag, rule.reason, *rule.also):
                assert field is None or hasattr(empty, field), (spec.name, field)


def test_a_reference_that_is_not_module_and_name_is_refused() -> None:
    with pytest.raises(ValueError, match="module:name"):
        resolve("stages.batch.parse_raw")
