"""CPU of the analysis stages on a one-hour session (issue 32: what the lap analysis costs).

Run:  .venv/bin/python bench/lap_analysis.py [--laps 36] [--repeat 3]

A synthetic session (``synthesize(laps=36, seed=11, pit_lap=20)``: 60 minutes, 100 Hz IMU,
10 Hz GNSS) is fused once; then ``detect_laps``, ``detect_segments`` and ``compute_metrics``
run in DAG order, each ``--repeat`` times, and the least process CPU of each is reported with
the rows of every dataset they wrote. No services: the pure stages only. To compare with an
earlier version, run the same command with ``PYTHONPATH`` pointing at its checkout (``git
worktree add --detach ../base <rev>``) - the whole DAG's share is ``bench/session.py``'s.

Prints a table and writes ``bench/results/lap_analysis.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

from stages.batch import compute_metrics, detect_laps, detect_segments, fuse_gnss_imu
from stages.batch.contract import StageInput
from stages.batch.synth import synthesize

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "lap_analysis.json"
STAGES = (("detect_laps", detect_laps.run), ("detect_segments", detect_segments.run),
          ("compute_metrics", compute_metrics.run))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--laps", type=int, default=36)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    session = synthesize(laps=args.laps, seed=11, pit_lap=20)
    datasets = {"gnss": session.gnss, "imu": session.imu}
    datasets.update(fuse_gnss_imu.run(StageInput(datasets=datasets)).datasets)
    rows: list[dict[str, Any]] = []
    for name, run in STAGES:
        best, out = float("inf"), None
        for _ in range(args.repeat):
            started = time.process_time()
            out = run(StageInput(datasets=datasets))
            best = min(best, time.process_time() - started)
        assert out is not None
        datasets.update(out.datasets)
        rows.append({"stage": name, "cpu_s": round(best, 3),
                     "datasets": {k: v.num_rows for k, v in out.datasets.items()}})
    print(f"{'stage':18s} {'cpu s':>7s}  datasets (rows)")
    for r in rows:
        written = ", ".join(f"{k} {v:,}" for k, v in r["datasets"].items())
        print(f"{r['stage']:18s} {r['cpu_s']:7.3f}  {written}")
    print(f"{'total':18s} {sum(r['cpu_s'] for r in rows):7.3f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "machine": {"python": platform.python_version(), "cpu": platform.processor()},
        "session": {"laps": args.laps, "imu_rows": session.imu.num_rows,
                    "gnss_rows": session.gnss.num_rows},
        "repeat": args.repeat, "stages": rows}, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
