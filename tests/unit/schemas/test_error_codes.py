"""One error root, one table of codes, one way of printing (issue 12, item 1)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from schemas import error_codes
from schemas.device_schema import SchemaFileError
from schemas.errors import TidewayError
from stages.batch.contract import SessionStageError
from stages.errors import StageError
from stages.expr.errors import ExprCompileError
from stages.ingest.ingress import EnvelopeError
from stages.jobs.dag import DagError
from stages.transitions import IllegalTransition
from streams import errors as runtime

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("schemas", "stages", "streams")
UPPER_SNAKE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$")
UPPER_WORD = re.compile(r"^[A-Z][A-Z0-9_]+$")

# UPPER_SNAKE literals in the sources that are not error codes. Reason codes say why a job was
# skipped, why a feature is unavailable or how good a fusion was: outcomes, not errors, kept
# with the stage or DAG entry that produces them. The rest are settings and resource names.
# Environment variables Tideway reads: its own settings and OpenTelemetry's standard ones.
ENVIRONMENT_PREFIXES = ("TIDEWAY_", "OTEL_")

NOT_ERROR_CODES = frozenset(
    {
        # skip, failure and feature reasons (stages/jobs/gating.py, dag.py, run_state.py)
        "FUSION_DISABLED", "GNSS_QUALITY_INSUFFICIENT", "LAPS_DISABLED", "SEGMENTS_DISABLED",
        "NO_GNSS_STREAM", "NO_IMU_STREAM", "NOT_PLANNED", "FUSION_FAILED",
        "FUSION_QUALITY_FAILED", "INDEXING_FAILED", "LAP_DETECTION_FAILED", "METRICS_FAILED",
        "OVERVIEW_DOWNSAMPLE_FAILED", "SEGMENT_DETECTION_FAILED",
        # stage summaries: why a stage produced nothing, quality flags
        "DEGRADED_INPUT", "FUSION_NOT_RUN", "GNSS_GAPS", "HIGH_GNSS_NOISE", "HIGH_HDOP",
        "HIGH_INNOVATION", "INSUFFICIENT_GNSS", "LOW_CONFIDENCE", "LOW_FIX_RATE", "NO_FIX",
        "NO_LINE_CROSSINGS", "NO_MOTION_DATA", "NO_POSITION_DATA", "NO_TIME_OVERLAP",
        "REJECTED_FIXES", "SIMULATOR_ONLY", "TRACK_NOT_CLOSED",
        # published session summary: why a section is empty
        "FEWER_THAN_2_VALID_LAPS", "NO_JUMPS", "NO_LAPS", "NO_SEGMENTS",
        # the laps report and the track (streams/views/laps.py, track.py): no run has
        # succeeded yet, or the active run has no downsampled GNSS series; a device's charts
        # (streams/views/fleet.py) when the API has no ClickHouse configured
        "NO_ACTIVE_RUN", "NO_GNSS_SERIES", "NO_CLICKHOUSE",
        # the lap analysis (stages/batch/lap_analysis.py, streams/views/lap_analysis.py): no
        # valid lap to measure against, or a run processed before the analysis existed
        "NO_REFERENCE_LAP", "NOT_ANALYSED",
        # settings, environment variables and stream names
        "INGESTION_CAPTURE_STAGE_SNAPSHOTS", "TIDEWAY_CONFIG", "XDG_RUNTIME_DIR",
        "SESSIONS_DLQ", "TELEMETRY_DLQ",
    }
)  # fmt: skip


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _literals(tree: ast.AST) -> set[str]:
    """UPPER_SNAKE string literals, except the names an ``__all__`` lists."""
    exported: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            exported |= {id(n) for n in ast.walk(node.value)}
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and UPPER_SNAKE.match(node.value)
        and id(node) not in exported
    }


def _assigned_codes(tree: ast.AST) -> set[str]:
    """Literals given as a code: ``code="X"`` arguments and ``code = "X"`` class attributes
    (these catch one-word codes such as ``TRANSIENT`` too)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        value: ast.expr | None = None
        if isinstance(node, ast.keyword) and node.arg == "code":
            value = node.value
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "code" for t in node.targets
        ):
            value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            found.add(value.value)
    return found


def test_every_code_the_sources_use_is_in_the_table() -> None:
    unknown: dict[str, str] = {}
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for code in (_literals(tree) - NOT_ERROR_CODES) | _assigned_codes(tree):
            if code.startswith(ENVIRONMENT_PREFIXES):
                continue  # the name of an environment variable, not a code
            if code not in error_codes.CODES:
                unknown.setdefault(code, str(path.relative_to(ROOT)))
    assert not unknown, f"add these codes to schemas/error_codes.py: {unknown}"


def test_the_scan_sees_codes_written_as_literals() -> None:
    tree = ast.parse('raise X("m", code="NEW_CODE")\nclass E:\n    code = "OTHER"\n')
    assert _assigned_codes(tree) == {"NEW_CODE", "OTHER"}
    assert _literals(ast.parse('__all__ = ["A_B"]\nx = "C_D"')) == {"C_D"}


def test_no_reason_code_is_also_an_error_code() -> None:
    assert not NOT_ERROR_CODES & set(error_codes.CODES)


def test_every_row_is_complete() -> None:
    for code, row in error_codes.CODES.items():
        assert row.code == code and UPPER_WORD.match(code), code
        assert row.meaning and "|" not in row.meaning, code
        assert (row.error_type is None) == (row.severity is None), code
        assert row.severity is None or 1 <= row.severity <= 5, code
        assert getattr(error_codes, code) == code, code  # the module attribute is the code


def test_the_docs_page_is_generated_from_the_table() -> None:
    page = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    assert page == error_codes.markdown(), "run: python -m schemas.error_codes > docs/errors.md"
    for row in error_codes.CODES.values():
        assert f"| `{row.code}` | {row.meaning} | {'yes' if row.retriable else 'no'} |" in page


def test_runtime_classes_agree_with_the_table() -> None:
    for cls in (runtime.TransientError, runtime.PermanentError, runtime.UsageError,
                runtime.NotFoundError, runtime.ConfigError, StageError):
        assert error_codes.CODES[cls.code].retriable is cls.retriable, cls  # fmt: skip


@pytest.mark.parametrize(
    "error",
    [
        StageError("m"),
        SessionStageError("m", code="UNSUPPORTED_FORMAT"),
        EnvelopeError("m", code="ENVELOPE_INVALID"),
        ExprCompileError("m", code="EXPR_SYNTAX"),
        DagError("m"),
        IllegalTransition("m", code="ILLEGAL_JOB_TRANSITION"),
        SchemaFileError("f.yaml", ["m"]),
        runtime.UsageError("m"),
        runtime.NotFoundError("m"),
        runtime.ConfigError("m"),
        runtime.TransientError("m", code="PG_UNAVAILABLE"),
        runtime.PermanentError("m"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_one_root_and_one_way_of_printing(error: TidewayError) -> None:
    assert isinstance(error, TidewayError)
    assert runtime.TidewayError is TidewayError
    assert error.code in error_codes.CODES
    assert str(error) == error.message
    assert error.describe() == f"{error.message} ({error.code})"


def test_dag_errors_and_stage_errors_keep_their_flags() -> None:
    assert DagError("cycle").code == "INVALID_DAG" and not DagError("cycle").retriable
    assert runtime.TransientError("x").retriable and not runtime.PermanentError("x").retriable
    assert StageError("x", retriable=True).retriable


def test_schemas_import_neither_stages_nor_streams() -> None:
    for path in (ROOT / "schemas").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in ("stages", "streams"), (path, name)
