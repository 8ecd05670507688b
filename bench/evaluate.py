"""How much CPU does one envelope cost in the pure stages? ``evaluate()`` on the demo fleet.

Runs on one core, in one process, without NATS, Postgres or Redis: the demo fleet's registry
view (its devices and the compiled demo schema, as :class:`~stages.ingest.evaluate.Registry`)
is built in memory, and realistic envelopes from :class:`streams.ingest.fleet.Station` are
evaluated exactly as the consumer evaluates a batch (subjects parsed beforehand,
``time.perf_counter_ns`` as the stage clock, no snapshots), in batches of the consumer's
default size whose evaluations stay alive until the next batch replaces them, so the garbage
collector does the work it does in the consumer (no more: keeping all 50,000 evaluations
alive would make it scan far more). Rows:

* ``evaluate (valid)`` — every envelope valid, from an active device: the common fast path
  (decode → validate → mutate → derive → the ``Evaluation`` with its four stage logs);
* ``evaluate (mixed)`` — the same with the simulator's default fault shares mixed in (1 %
  invalid, 0.5 % unknown topic), which leave the fast path for the full evaluation;
* ``evaluate_fully (valid)`` — the reference, stage by stage, on the valid envelopes.

Prints a table and writes ``bench/results/evaluate.json``. Usage::

    .venv/bin/python bench/evaluate.py [--envelopes 50000] [--repeat 5] [--devices 500]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson

from schemas.device_schema import parse_schema_text
from stages.ingest.evaluate import (
    DeviceRecord,
    Evaluation,
    Registry,
    TopicBinding,
    evaluate,
    evaluate_fully,
)
from stages.ingest.ingress import Receipt, SubjectParts, parse_subject
from stages.ingest.program import compile_schema
from stages.ingest.status import Status
from streams.ingest.fleet import Station, choose_kind, demo_schema_text, device_id

RESULTS = Path(__file__).resolve().parent / "results" / "evaluate.json"
TENANT = "acme"
MAX_PAYLOAD = 65536
START_MS = 1_700_000_000_000


def build_registry(devices: int) -> Registry:
    """The demo fleet's registry view: ``devices`` active stations on the demo schema."""
    version = uuid.UUID(int=1)
    programs = compile_schema(parse_schema_text(demo_schema_text(TENANT)), filename="demo")
    tenant_id = uuid.UUID(int=2)
    return Registry(
        devices={
            (TENANT, device_id(i)): DeviceRecord(
                id=uuid.UUID(int=1000 + i), tenant_id=tenant_id, tenant=TENANT,
                external_id=device_id(i), active=True, schema_version_id=version)
            for i in range(devices)
        },
        topics={
            (version, name): TopicBinding(schema_version_id=version,
                                          schema_topic_id=uuid.UUID(int=100 + n), program=program)
            for n, (name, program) in enumerate(programs.items())
        },
    )


def build_receipts(count: int, devices: int, *, faults: bool, seed: int = 7) -> list[Receipt]:
    """``count`` envelopes from ``devices`` stations, round robin, one second apart each."""
    rng = random.Random(seed)
    stations = [Station(i, rng) for i in range(devices)]
    receipts = []
    for n in range(count):
        station = stations[n % devices]
        kind = (choose_kind(rng, late=0.0, invalid=0.01, unknown_topic=0.005) if faults
                else "normal")
        ts_ms = START_MS + n * 1000
        sim = station.envelope(ts_ms, rng, kind=kind)
        receipts.append(Receipt.of(
            subject=f"telemetry.{TENANT}.{sim.device}.{sim.topic}",
            data=orjson.dumps(sim.payload), headers={"Nats-Msg-Id": sim.msg_id},
            stream_seq=n + 1, received_at_ns=ts_ms * 1_000_000 + 12_345))
    return receipts


def _best_us(run: Callable[[], object], count: int, repeat: int) -> float:
    """Best of ``repeat`` runs, in µs per envelope."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter_ns()
        run()
        best = min(best, (time.perf_counter_ns() - started) / 1000 / count)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envelopes", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--devices", type=int, default=500)
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args()
    n, repeat, size = args.envelopes, args.repeat, args.batch

    registry = build_registry(args.devices)
    valid = build_receipts(n, args.devices, faults=False)
    mixed = build_receipts(n, args.devices, faults=True)
    clock = time.perf_counter_ns

    def batches(receipts: Sequence[Receipt]) -> list[list[tuple[Receipt, SubjectParts | None]]]:
        pairs = [(r, parse_subject(r.subject)) for r in receipts]
        return [pairs[i:i + size] for i in range(0, len(pairs), size)]

    valid_batches, mixed_batches = batches(valid), batches(mixed)

    def fast(batches: list[list[tuple[Receipt, SubjectParts | None]]]
             ) -> Callable[[], list[Evaluation]]:
        def run() -> list[Evaluation]:
            done: list[Evaluation] = []
            for batch in batches:
                done = [evaluate(r, registry, prefix="", max_payload_bytes=MAX_PAYLOAD,
                                 capture=False, clock=clock, parts=p) for r, p in batch]
            return done
        return run

    def full() -> list[Evaluation]:
        done: list[Evaluation] = []
        for batch in valid_batches:
            done = [evaluate_fully(r, registry, parts=p, max_payload_bytes=MAX_PAYLOAD,
                                   capture=False, clock=clock) for r, p in batch]
        return done

    gc.collect()
    gc.freeze()  # the prepared receipts are the benchmark's, not a consumer's: never scan them
    for batch in valid_batches:
        assert all(evaluate(r, registry, prefix="", max_payload_bytes=MAX_PAYLOAD, capture=False,
                            clock=clock, parts=p).status is Status.COMPLETED for r, p in batch)
    rows = [
        ("evaluate (valid)", _best_us(fast(valid_batches), n, repeat)),
        ("evaluate (mixed)", _best_us(fast(mixed_batches), n, repeat)),
        ("evaluate_fully (valid)", _best_us(full, n, repeat)),
    ]
    print(f"{n:,} envelopes from {args.devices} devices in batches of {size}, demo schema; "
          f"best of {repeat}, one core")
    print(f"{'row':26} {'µs/envelope':>12} {'envelopes/s':>14}")
    for label, us in rows:
        print(f"{label:26} {us:>12.2f} {1e6 / us:>14,.0f}")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "evaluate",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "platform": platform.platform(),
        "envelopes": n,
        "devices": args.devices,
        "batch": size,
        "repeat": repeat,
        "rows": [{"name": label, "us_per_envelope": round(us, 3),
                  "envelopes_per_second": round(1e6 / us)} for label, us in rows],
    }, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
