"""Where a job's code lives: the one place a DAG's references become code.

A :class:`~stages.jobs.dag.JobSpec` names what runs its job as a ``module:name`` string
(``JobSpec.code``: its pure ``stage`` or its ``executor`` factory) so that ``stages`` never
imports ``streams``. :func:`resolve` turns such a reference into the object it names - for the
executor table (``stage_executors``) and for the compute pool running a stage body
(``stage_job``) alike - and a unit test resolves every reference of the standard DAG.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["resolve"]


def resolve(ref: str) -> Any:
    """The object ``ref`` (``package.module:name``) names, importing its module."""
    module, sep, name = ref.partition(":")
    if not (module and sep and name):
        raise ValueError(f"not a module:name reference: {ref!r}")
    return getattr(importlib.import_module(module), name)
