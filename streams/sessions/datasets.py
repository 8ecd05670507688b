"""Derived datasets on the object store: Parquet files promoted together with a manifest.

Theory of operation
-------------------
A job's outputs live under one directory per *idempotency key* (spec 000 §8.1)::

    datasets/<run_id>/<job_type>-<key[:20]>/<name>.parquet
    datasets/<run_id>/<job_type>-<key[:20]>/_manifest.json

The key hashes the run, the job type, the content hashes of the job's inputs, the hash of the
run config and the pinned version tuple. A job writes every table and then the manifest into a
temporary directory and promotes the directory as a unit (:meth:`ObjectStore.promote_dir`);
the manifest is the commit marker and lists each file's sha256, size and row count plus the
stage's summary. A retry of the same job computes the same key, finds the manifest, verifies
every file against it and reuses the result instead of writing a second copy. Nothing under a
promoted directory is ever rewritten; a new run (reprocess) has a new run id, hence new paths.

Parquet bytes are deterministic for a given table and pyarrow version, so the content hash of
a dataset is the sha256 of its file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from streams.errors import PermanentError
from streams.objects import ObjectMissingError, ObjectStore, sha256_hex

__all__ = [
    "MANIFEST",
    "DatasetFile",
    "JobOutputs",
    "decode_parquet",
    "encode_parquet",
    "idempotency_key",
    "json_hash",
    "load_outputs",
    "output_prefix",
    "read_table",
    "schema_fingerprint",
    "write_outputs",
]

MANIFEST = "_manifest.json"
_FORMAT = 1


@dataclass(frozen=True, kw_only=True)
class DatasetFile:
    """One promoted dataset: a Parquet file, its content hash and its shape."""

    name: str
    url: str
    sha256: str
    size: int
    rows: int
    schema_version: str
    time_start: str | None = None
    time_end: str | None = None


@dataclass(frozen=True, kw_only=True)
class JobOutputs:
    """What a job left on the store: its datasets, its summary, and whether they were reused."""

    datasets: tuple[DatasetFile, ...]
    summary: Mapping[str, Any]
    reused: bool


def json_hash(value: Any) -> str:
    """sha256 of the canonical JSON of ``value`` (sorted keys)."""
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


def idempotency_key(
    *,
    run_id: str,
    job_type: str,
    input_hashes: Sequence[str],
    config: Mapping[str, Any],
    versions: Mapping[str, Any],
) -> str:
    """The job's idempotency key of spec 000 §8.1 (hex sha256)."""
    return json_hash(
        {
            "run_id": run_id,
            "job_type": job_type,
            "inputs": sorted(input_hashes),
            "config": json_hash(dict(config)),
            "versions": dict(versions),
        }
    )


def output_prefix(run_id: str, job_type: str, key: str) -> str:
    """The directory a job with idempotency ``key`` promotes its outputs to."""
    return f"datasets/{run_id}/{job_type}-{key[:20]}"


def schema_fingerprint(schema: pa.Schema) -> str:
    """A short, stable identifier of a table's column names and types (its schema version)."""
    text = ";".join(f"{f.name}:{f.type}:{int(f.nullable)}" for f in schema)
    return "s1-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def encode_parquet(table: pa.Table) -> bytes:
    """Parquet bytes of ``table`` (Arrow schema and field metadata kept).

    Snappy, and dictionary encoding only for string columns: sensor floats are noise to a
    dictionary (trying it doubled the encode time and grew the file), and snappy decodes about
    twice as fast as zstd - these files are read by several downstream jobs (bench/session.py).
    """
    sink = pa.BufferOutputStream()
    strings = [
        f.name
        for f in table.schema
        if pa.types.is_string(f.type)
        or pa.types.is_large_string(f.type)
        or pa.types.is_dictionary(f.type)
    ]
    pq.write_table(table, sink, compression="snappy", use_dictionary=strings or False)
    return bytes(sink.getvalue().to_pybytes())


def decode_parquet(data: bytes) -> pa.Table:
    """The table in Parquet ``data``."""
    return pq.read_table(pa.BufferReader(data))


def read_table(store: ObjectStore, url: str, *, sha256: str) -> pa.Table:
    """Read a dataset by URL, verifying its sha256 first."""
    return decode_parquet(store.read(store.key(url), sha256=sha256))


def _time_range(table: pa.Table) -> tuple[str | None, str | None]:
    if "ts" not in table.column_names or table.num_rows == 0:
        return None, None
    col = table.column("ts")
    if not pa.types.is_timestamp(col.type):
        return None, None
    bounds = pc.min_max(col)
    lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
    return (lo.isoformat() if lo else None, hi.isoformat() if hi else None)


def write_outputs(
    store: ObjectStore,
    prefix: str,
    *,
    tables: Mapping[str, pa.Table],
    summary: Mapping[str, Any],
    header: Mapping[str, Any],
    on_encoded: Callable[[str, pa.Table, bytes], None] | None = None,
) -> JobOutputs:
    """Write ``tables`` and a manifest to a temp directory, then promote it to ``prefix``.

    When another attempt already promoted ``prefix`` the existing outputs are verified and
    returned (``reused=True``) and this attempt's files are discarded. ``on_encoded(sha256,
    table, parquet_bytes)`` is called for every file written (the stage job caches tables).
    """
    temp = store.temp_key()
    files: list[dict[str, Any]] = []
    hashes: dict[str, str] = {}
    for name in sorted(tables):
        if not name or "/" in name or name.startswith("_"):
            raise PermanentError(f"bad dataset name {name!r}", code="BAD_DATASET_NAME")
        table = tables[name]
        data = encode_parquet(table)
        digest = sha256_hex(data)
        store.write_temp(f"{temp}/{name}.parquet", data)
        if on_encoded is not None:
            on_encoded(digest, table, data)
        start, end = _time_range(table)
        files.append(
            {
                "name": name,
                "file": f"{name}.parquet",
                "sha256": digest,
                "size": len(data),
                "rows": table.num_rows,
                "schema_version": schema_fingerprint(table.schema),
                "time_start": start,
                "time_end": end,
            }
        )
        hashes[f"{name}.parquet"] = digest
    manifest = orjson.dumps(
        {"format": _FORMAT, **header, "datasets": files, "summary": dict(summary)},
        option=orjson.OPT_SORT_KEYS,
    )
    store.write_temp(f"{temp}/{MANIFEST}", manifest)
    hashes[MANIFEST] = sha256_hex(manifest)
    promoted = store.promote_dir(temp, prefix, marker=MANIFEST, hashes=hashes)
    if not promoted:
        found = load_outputs(store, prefix)
        assert found is not None  # promote_dir saw the manifest
        return found
    return JobOutputs(datasets=_records(store, prefix, files), summary=summary, reused=False)


def load_outputs(store: ObjectStore, prefix: str) -> JobOutputs | None:
    """The verified outputs already promoted at ``prefix``, or ``None`` when there are none.

    Every file is hashed against the manifest; a mismatch raises ``IntegrityError``.
    """
    try:
        manifest = orjson.loads(store.read_unverified(f"{prefix}/{MANIFEST}"))
    except ObjectMissingError:
        return None
    files = manifest["datasets"]
    for f in files:
        store.read(f"{prefix}/{f['file']}", sha256=f["sha256"])
    return JobOutputs(
        datasets=_records(store, prefix, files), summary=manifest["summary"], reused=True
    )


def _records(
    store: ObjectStore, prefix: str, files: Sequence[Mapping[str, Any]]
) -> tuple[DatasetFile, ...]:
    return tuple(
        DatasetFile(
            name=f["name"],
            url=store.url(f"{prefix}/{f['file']}"),
            sha256=f["sha256"],
            size=f["size"],
            rows=f["rows"],
            schema_version=f["schema_version"],
            time_start=f.get("time_start"),
            time_end=f.get("time_end"),
        )
        for f in files
    )
