"""Pure logic of the batch job engine: state tables, run reducer, DAG, planner, retry, errors.

Nothing here does I/O or reads a clock; ``streams.jobs`` carries the decisions out in Postgres.
"""
