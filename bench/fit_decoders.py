"""Compare FIT decoders on the real files in ``../shared/data/fit``: speed and tolerance.

Candidates: ``fitdecode`` and Garmin's ``garmin-fit-sdk``. For each file and decoder this
records whether it decoded, how many ``record`` messages it returned, the errors it reported
and the best of three wall-clock timings. Prints a table and writes
``bench/results/fit_decoders.json``.

Run: ``.venv/bin/python -m bench.fit_decoders [DATA_DIR]``.
"""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fitdecode
from garmin_fit_sdk import Decoder, Stream

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "fit"
OUT = Path(__file__).resolve().parent / "results" / "fit_decoders.json"


def _fitdecode(data: bytes) -> tuple[int, list[str]]:
    records = 0
    with fitdecode.FitReader(
        io.BytesIO(data),
        check_crc=fitdecode.CrcCheck.WARN,
        error_handling=fitdecode.ErrorHandling.WARN,
    ) as reader:
        for frame in reader:
            if isinstance(frame, fitdecode.FitDataMessage) and frame.name == "record":
                records += 1
    return records, []


def _garmin(data: bytes) -> tuple[int, list[str]]:
    decoder = Decoder(Stream.from_byte_array(bytearray(data)))
    messages, errors = decoder.read()
    return len(messages.get("record_mesgs", [])), [str(e) for e in errors]


DECODERS: dict[str, Callable[[bytes], tuple[int, list[str]]]] = {
    "fitdecode": _fitdecode,
    "garmin-fit-sdk": _garmin,
}


def measure(data: bytes, decode: Callable[[bytes], tuple[int, list[str]]]) -> dict[str, Any]:
    best = float("inf")
    records, errors = 0, []
    for _ in range(3):
        start = time.perf_counter()
        try:
            records, errors = decode(data)
        except Exception as exc:
            errors = [f"{type(exc).__name__}: {exc}"]
            records = 0
        best = min(best, time.perf_counter() - start)
    return {"ok": not errors, "records": records, "errors": errors[:3], "seconds": best}


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else DEFAULT_DIR
    results: dict[str, dict[str, Any]] = {}
    for path in sorted(root.glob("*.fit")):
        data = path.read_bytes()
        results[path.name] = {name: measure(data, fn) for name, fn in DECODERS.items()}
    print(f"{'file':45} {'decoder':15} {'ok':>3} {'records':>8} {'ms':>9}  error")
    totals = dict.fromkeys(DECODERS, 0.0)
    for name, row in results.items():
        for dec, r in row.items():
            totals[dec] += r["seconds"]
            err = r["errors"][0][:60] if r["errors"] else ""
            ok = "yes" if r["ok"] else "no"
            print(f"{name:45} {dec:15} {ok:>3} {r['records']:8} {r['seconds'] * 1e3:9.1f}  {err}")
    for dec, total in totals.items():
        print(f"total {dec}: {total * 1e3:.1f} ms")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"files": results, "total_seconds": totals}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
