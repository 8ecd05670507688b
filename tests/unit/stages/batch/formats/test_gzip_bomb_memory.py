"""A gzip bomb is refused in bounded memory (issue 27, defect 6).

A real gzip file that inflates to four times the configured ``max_decompressed_bytes`` is
checked by ``artifact_validate`` and ``artifact_classify`` in a fresh child process; its peak
RSS (its ``VmHWM``, which starts afresh at ``exec``, unlike ``ru_maxrss`` which Linux carries
over from the parent) is compared with its own high-water mark once the stage is imported and
the upload read (what every worker pool process already holds).

Stated bound for the checks: the peak grows by less than :data:`CHECK_GROWTH_BOUND` (16 MiB:
one 1 MiB chunk of inflated output, the 64 KiB sniffing head and allocator slack) over that
baseline, whatever the limit - the old code held the inflated data and grew by the limit
(here 64 MiB; ≈1.1 GiB at the default 1 GiB). ``parse_raw``, which needs the whole file to
read it, may hold at most the limit (plus the same slack).

Also a script, for measuring at any limit (the default limit, a 1 MiB bomb)::

    .venv/bin/python -m tests.unit.stages.batch.formats.test_gzip_bomb_memory \\
        --limit 1073741824 --bomb-mib 1 [--root OTHER_CHECKOUT]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from schemas import error_codes as codes
from stages.batch.formats.compression import CHUNK_BYTES

MIB = 1 << 20
LIMIT = 64 * MIB  # max_decompressed_bytes for the test: small, so the test is quick
INFLATED = 4 * LIMIT  # what the bomb inflates to (256 MiB from ≈250 KiB of gzip)
CHECK_GROWTH_BOUND = 16 * MIB
ROOT = Path(__file__).resolve().parents[5]

_CHILD = """
import hashlib, sys
def hwm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
root, stage, path, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path.insert(0, root)
import importlib
from stages.batch.contract import ArtifactBlob, SessionStageError, StageInput
module = importlib.import_module("stages.batch." + stage)
with open(path, "rb") as f:
    data = f.read()
blob = ArtifactBlob(name="bomb.nmea.gz", data=data, sha256=hashlib.sha256(data).hexdigest())
baseline = hwm()
try:
    module.run(StageInput(artifacts=(blob,), config={"max_decompressed_bytes": limit}))
    answer = "accepted"
except SessionStageError as exc:
    answer = exc.code
print(answer, baseline, hwm())
"""


def write_bomb(path: Path, inflated: int) -> int:
    """Write a gzip file of ``inflated`` zero bytes (compressed ≈1000:1); returns its size."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(MIB)
    with path.open("wb") as out:
        for _ in range(inflated // MIB):
            out.write(packer.compress(zeros))
        out.write(packer.flush())
    return path.stat().st_size


def peak_of(stage: str, bomb: Path, limit: int, root: Path = ROOT) -> tuple[str, int, int]:
    """Run ``stage`` on ``bomb`` in a child: (answer, baseline RSS, peak RSS), in bytes."""
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), stage, str(bomb), str(limit)],
        capture_output=True, text=True, cwd=root, check=False,
    )
    assert child.returncode == 0, child.stderr
    answer, baseline, peak = child.stdout.split()
    return answer, int(baseline), int(peak)


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bomb") / "bomb.nmea.gz"
    assert write_bomb(path, INFLATED) < MIB  # small upload, four times the limit inflated
    return path


@pytest.mark.parametrize("stage", ["artifact_validate", "artifact_classify"])
def test_checking_a_bomb_holds_no_inflated_data(stage: str, bomb: Path) -> None:
    answer, baseline, peak = peak_of(stage, bomb, LIMIT)
    assert answer == codes.TOO_LARGE
    assert CHUNK_BYTES < CHECK_GROWTH_BOUND < LIMIT
    assert peak - baseline < CHECK_GROWTH_BOUND, (
        f"{stage}: peak {peak / MIB:.1f} MiB over a baseline of {baseline / MIB:.1f} MiB"
    )


def test_parsing_a_bomb_holds_at_most_the_limit(bomb: Path) -> None:
    answer, baseline, peak = peak_of("parse_raw", bomb, LIMIT)
    assert answer == codes.TOO_LARGE
    assert peak - baseline < LIMIT + CHECK_GROWTH_BOUND


def main() -> None:
    parser = argparse.ArgumentParser(description="peak RSS of the stages on a gzip bomb")
    parser.add_argument("--limit", type=int, default=1 << 30)
    parser.add_argument("--bomb-mib", type=float, default=1.0, help="compressed size, ≈")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose stages run")
    parser.add_argument("--bomb", type=Path, default=Path("/tmp/tideway-bomb.gz"))
    args = parser.parse_args()
    # zeros compress ≈1030:1 at level 9; round up so the upload is about --bomb-mib
    size = write_bomb(args.bomb, int(args.bomb_mib * 1030) * MIB)
    print(f"bomb: {size} bytes of gzip, limit {args.limit} bytes, root {args.root}")
    for stage in ("artifact_validate", "artifact_classify", "parse_raw"):
        answer, baseline, peak = peak_of(stage, args.bomb, args.limit, args.root.resolve())
        print(f"{stage:18} {answer:18} baseline {baseline / MIB:7.1f} MiB  "
              f"peak {peak / MIB:7.1f} MiB  growth {(peak - baseline) / MIB:7.1f} MiB")


if __name__ == "__main__":
    main()
