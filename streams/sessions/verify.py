"""The health check a run passes before it may become its session's active run (spec 003).

Blue/green: a new run's datasets are written beside the active run's, and the session's pointer
moves only once the new run has ended well. ``publish_session``, the run's last job, first
checks that what readers would be pointed at is really there:

- **objects**: every dataset the run recorded (the outputs of its succeeded jobs) is read back
  from the object store and its sha256 compared with the recorded one;
- **rows**: for every dataset ``materialise_clickhouse`` loads, the run's rows in its ClickHouse
  table are counted (``FINAL``, as readers see them) and compared with the dataset's row count.

Any difference fails ``publish_session`` with ``RUN_VERIFICATION_FAILED``, which no retry of
that job can fix (it would see the same objects and rows): the run ends failed, the engine
leaves the session's pointer on the run it had, and the report below is kept in the run's
summary under ``verification``. ``tideway runs retry`` then resumes the run
(``streams.sessions.resume``): outputs that verify are reused, a corrupt one is computed again,
and the rows are loaded again for the new run.

``rollback`` (``streams.sessions.reprocess``) moves the pointer back to an older run and runs
the objects half of the same check first (:func:`verify_objects`): the run's files may have
been damaged or removed since it was published.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas import error_codes as codes
from streams.clickhouse import ClickHouse
from streams.errors import PermanentError
from streams.objects import ObjectStore
from streams.sessions.materialise import RUN_ROWS, is_materialised, table_name

__all__ = [
    "DatasetToCheck",
    "Verification",
    "VerificationFailed",
    "verify_objects",
    "verify_run",
]

_READERS = 4


@dataclass(frozen=True, kw_only=True)
class DatasetToCheck:
    """A recorded dataset: where it is, what it hashes to, how many rows it has."""

    name: str
    url: str
    sha256: str
    rows: int


@dataclass(frozen=True, kw_only=True)
class Verification:
    """What the check looked at and what it found wrong (nothing, for a healthy run)."""

    datasets: int
    bytes_read: int
    tables: Mapping[str, int] = field(default_factory=dict)  # table -> rows counted
    problems: tuple[str, ...] = ()
    read_s: float = 0.0  # reading and hashing the objects
    count_s: float = 0.0  # counting the rows

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "datasets": self.datasets,
            "bytes_read": self.bytes_read,
            "tables": dict(self.tables),
            "problems": list(self.problems),
            "read_s": round(self.read_s, 4),
            "count_s": round(self.count_s, 4),
        }


class VerificationFailed(PermanentError):
    """The run's datasets or ClickHouse rows are not what the run recorded."""

    code = codes.RUN_VERIFICATION_FAILED

    def __init__(self, report: Verification) -> None:
        shown = "; ".join(report.problems[:5])
        more = len(report.problems) - 5
        tail = f" (+{more} more)" if more > 0 else ""
        super().__init__(f"run failed verification: {shown}{tail}")
        self.report = report


async def verify_run(
    ch: ClickHouse,
    store: ObjectStore,
    *,
    session_id: str,
    run_id: str,
    datasets: Iterable[DatasetToCheck],
) -> Verification:
    """Check every dataset's bytes and every materialised dataset's rows (see above)."""
    chosen = sorted(datasets, key=lambda d: d.name)
    started = time.perf_counter()

    async def count() -> tuple[dict[str, int], list[str], float]:
        tables, problems = await _count_rows(
            ch, session_id, run_id, [d for d in chosen if is_materialised(d.name)]
        )
        return tables, problems, time.perf_counter() - started

    # The two halves are independent: the rows are counted while the objects are hashed.
    objects, (tables, row_problems, count_s) = await asyncio.gather(
        verify_objects(store, chosen), count()
    )
    return dataclasses.replace(
        objects,
        tables=tables,
        problems=objects.problems + tuple(row_problems),
        count_s=count_s,
    )


async def verify_objects(store: ObjectStore, datasets: Iterable[DatasetToCheck]) -> Verification:
    """Read every dataset back from the store and compare its sha256 with the recorded one
    (a few files at a time: each is held whole while it is hashed)."""
    chosen = sorted(datasets, key=lambda d: d.name)
    slots = asyncio.Semaphore(_READERS)

    async def read_back(d: DatasetToCheck) -> tuple[int, str | None]:
        async with slots:
            return await asyncio.to_thread(_read_back, store, d)

    started = time.perf_counter()
    sizes = await asyncio.gather(*(read_back(d) for d in chosen))
    return Verification(
        datasets=len(chosen),
        bytes_read=sum(size for size, _ in sizes),
        problems=tuple(
            f"{d.name}: {problem}"
            for d, (_size, problem) in zip(chosen, sizes, strict=True)
            if problem
        ),
        read_s=time.perf_counter() - started,
    )


def _read_back(store: ObjectStore, d: DatasetToCheck) -> tuple[int, str | None]:
    try:
        return len(store.read(store.key(d.url), sha256=d.sha256)), None
    except PermanentError as exc:  # missing, corrupt or outside the store: all mean "not there"
        return 0, f"{exc.code}: {exc.message}"


async def _count_rows(
    ch: ClickHouse, session_id: str, run_id: str, datasets: list[DatasetToCheck]
) -> tuple[dict[str, int], list[str]]:
    if not datasets:
        return {}, []
    existing = {
        name
        for (name,) in await ch.query_rows(
            "SELECT name FROM system.tables WHERE database = {db:String}", {"db": ch.database}
        )
    }
    present = [d for d in datasets if table_name(d.name) in existing]
    problems = [
        f"{d.name}: ClickHouse table {table_name(d.name)} is missing"
        for d in datasets
        if table_name(d.name) not in existing
    ]
    counted: dict[str, int] = {}
    if present:
        # One round trip for every table; FINAL counts what readers see (duplicates of a
        # reaped attempt collapsed).
        union = " UNION ALL ".join(
            f"SELECT '{table_name(d.name)}', count() FROM {ch.database}.{table_name(d.name)} "
            f"FINAL WHERE {RUN_ROWS}"
            for d in present
        )
        rows = await ch.query_rows(union, {"session": session_id, "run": run_id})
        counted = {str(t): int(n) for t, n in rows}
    for d in present:
        have = counted.get(table_name(d.name), 0)
        if have != d.rows:
            problems.append(
                f"{d.name}: {have} rows in ClickHouse {table_name(d.name)}, dataset has {d.rows}"
            )
    return counted, problems
