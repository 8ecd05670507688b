"""The run config: what a processing run is told besides its files, described once.

A run's config is a JSON object given with the upload (``tideway sessions upload --config``,
the API's ``config`` field, a device notice's ``config``) or with a reprocess. :class:`RunConfig`
is the one description of it: every key, its type, bounds and default. It is validated where
a run is asked for - the CLI, the HTTP API and intake (a device's notice reaches only intake) -
so a misspelt key (``config.laps.min_lap_sx``) or a bad value is refused there, with the key
named, before anything is stored; the stages read their sections through the same models
(``stages.batch.contract.run_config``), so a key that is not described here does nothing.

Values arrive as decoded JSON, so types are strict: ``true`` is not a number and ``"10"`` is
not an integer; an integer is accepted where a number is expected, and a number without a
fraction (``10.0``) where an integer is - JSON Schema, which the API's document uses, counts it
as one. Integers stop at 2**63 - 1 (a ``jsonb`` value the JSON encoder can write). The run
stores the config as given (validated, not rewritten), which is also what dataset keys hash.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

__all__ = [
    "DownsampleConfig",
    "FusionConfig",
    "FusionQualityConfig",
    "LapsConfig",
    "RunConfig",
    "SegmentsConfig",
    "StartFinish",
    "TrackConfig",
    "explain",
    "parse_run_config",
]


_INT_MAX: Final = 2**63 - 1


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


Integer = Annotated[int, BeforeValidator(_integral)]
"""An integer, written ``10`` or ``10.0`` (still strict: not ``"10"``, not ``true``)."""


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class LapsConfig(_Section):
    """``laps``: tuning of ``detect_laps`` (see that stage's theory of operation)."""

    min_lap_s: float = Field(10.0, gt=0, description="Crossings closer than this are one.")
    fit_window_s: float = Field(0.5, gt=0, description="Crossing-time fit, each side.")
    auto_half_width_m: float = Field(20.0, gt=0, description="Found line's half width.")
    close_radius_m: float = Field(12.0, gt=0, description="How near a track closes on itself.")
    min_loop_m: float = Field(300.0, gt=0, description="Shortest loop that closes the track.")
    pit_deviation_m: float = Field(6.0, gt=0, description="Off the racing line beyond this.")
    pit_min_s: float = Field(2.0, ge=0, description="Shortest off-line stretch of a pit lap.")
    stop_speed_mps: float = Field(1.0, ge=0, description="Below this a vehicle is stopped.")
    stop_min_s: float = Field(3.0, ge=0, description="Shortest stop counted in stopped_s.")
    default_sectors: Integer = Field(
        3, ge=1, le=32, description="Equal-distance sectors when no sector line is given."
    )
    mini_sectors: Integer = Field(
        20, ge=0, le=200, description="Equal-distance mini-sectors per lap (0: none)."
    )
    reference_lap: Integer | None = Field(
        None, ge=1, le=_INT_MAX, description="Lap the delta is taken against (unset: best)."
    )


class SegmentsConfig(_Section):
    """``segments``: tuning of ``detect_segments``."""

    smooth_s: float = Field(0.5, gt=0)
    kappa_on: float = Field(1.0 / 200.0, gt=0)
    kappa_off: float = Field(1.0 / 350.0, gt=0)
    min_turn_deg: float = Field(20.0, ge=0)
    min_speed_mps: float = Field(3.0, ge=0)
    merge_gap_s: float = Field(0.3, ge=0)
    min_straight_s: float = Field(1.0, ge=0)
    free_fall_g: float = Field(0.35, gt=0)
    min_air_s: float = Field(0.2, gt=0)
    landing_window_s: float = Field(0.3, gt=0)
    landing_g: float = Field(1.8, gt=0)


class FusionConfig(_Section):
    """``fusion``: tuning of the ``fuse_gnss_imu`` estimator."""

    accel_psd: float = Field(0.3, gt=0, description="(m/s²)²/Hz IMU acceleration error.")
    gnss_sigma_m: float | None = Field(
        None, gt=0, description="Per-axis GNSS σ at median HDOP (unset: from the data)."
    )
    min_fixes: Integer = Field(10, ge=1, le=_INT_MAX)
    gate_nis: float = Field(16.0, gt=0, description="Fix gate: 2-dof χ² ≈ 99.97 %.")
    use_gnss_velocity: bool = Field(True, description="Doppler speed + course as velocity.")
    gnss_velocity_sigma_mps: float | None = Field(
        None, gt=0, description="GNSS velocity σ (unset: from the data)."
    )
    heading_window_s: float = Field(15.0, gt=0)
    heading_min_speed_mps: float = Field(3.0, ge=0)
    confidence_scale_m: float = Field(2.0, gt=0)
    hdop_degraded: float = Field(3.0, gt=0)
    sigma_degraded_m: float = Field(8.0, gt=0)
    max_fix_interval_s: float = Field(1.0, gt=0, description="A longer gap is a GNSS gap.")
    gap_fraction_degraded: float = Field(0.2, ge=0, le=1)


class FusionQualityConfig(_Section):
    """``fusion_quality``: thresholds of ``fuse_quality_summary``."""

    gap_s: float = Field(1.0, gt=0, description="A longer interval between fixes is a gap.")
    window_s: float = Field(30.0, gt=0, description="Length of one health window.")
    divergence_fraction: float = Field(0.3, gt=0, le=1)


class DownsampleConfig(_Section):
    """``downsample``: bucket widths of the L1 and L2 levels."""

    L1_bucket_s: float = Field(0.5, gt=0)
    L2_bucket_s: float = Field(5.0, gt=0)


class StartFinish(_Section):
    """``start_finish``: the timing line, two points across the track (WGS84 degrees)."""

    lat1: float = Field(ge=-90, le=90)
    lon1: float = Field(ge=-180, le=180)
    lat2: float = Field(ge=-90, le=90)
    lon2: float = Field(ge=-180, le=180)


class TrackConfig(_Section):
    """A saved track: its timing lines (an operator's, stamped into a run's ``tracks``)."""

    name: str = Field(min_length=1, max_length=100)
    start_finish: StartFinish = Field(
        description="The start/finish line of a circuit; the start line of a stage."
    )
    finish: StartFinish | None = Field(
        None, description="A stage's own finish line (point to point); unset: a circuit."
    )
    sectors: list[StartFinish] = Field(default_factory=list, max_length=32)


Stream = Literal["gnss", "imu", "aux"]


class RunConfig(_Section):
    """A run's whole config (see the module docstring). Every key is optional."""

    session_date: dt.date | None = Field(
        None,
        strict=False,
        description="The day a dateless log was recorded (YYYY-MM-DD; set from --date).",
    )
    max_artifact_bytes: Integer = Field(
        256 * 1024 * 1024, gt=0, le=_INT_MAX, description="Largest file."
    )
    max_decompressed_bytes: Integer = Field(
        1024 * 1024 * 1024, gt=0, le=_INT_MAX, description="Largest file once gzip is inflated."
    )
    skip_fusion: bool = False
    skip_laps: bool = False
    skip_segments: bool = False
    start_finish: StartFinish | None = None
    finish: StartFinish | None = Field(
        None, description="A separate finish line (point to point): laps run start → finish."
    )
    sectors: list[StartFinish] = Field(
        default_factory=list, max_length=32, description="Sector lines, in driving order."
    )
    track: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        description="A saved or library track by name ('none': detect none; unset: detect).",
    )
    tracks: list[TrackConfig] = Field(
        default_factory=list, max_length=500, description="The tenant's saved tracks."
    )

    @model_validator(mode="after")
    def _finish_needs_a_start(self) -> RunConfig:
        if self.finish is not None and self.start_finish is None:
            raise ValueError("finish needs start_finish (the stage's start line)")
        return self
    time_offsets_s: dict[Stream, float] = Field(
        default_factory=dict, description="Per-stream clock correction, seconds."
    )
    laps: LapsConfig = LapsConfig()
    segments: SegmentsConfig = SegmentsConfig()
    fusion: FusionConfig = FusionConfig()
    fusion_quality: FusionQualityConfig = FusionQualityConfig()
    downsample: DownsampleConfig = DownsampleConfig()


def parse_run_config(raw: Mapping[str, Any] | None) -> RunConfig:
    """``raw`` as a :class:`RunConfig`; pydantic's ``ValidationError`` when it is not one
    (:func:`explain` says why in one line). ``None`` sections count as absent."""
    data = {k: v for k, v in (raw or {}).items() if v is not None}
    return RunConfig.model_validate(data)


def explain(exc: ValidationError, *, limit: int = 3, root: str = "config") -> str:
    """The first problems of ``exc`` in one line, each with its key's path from ``root``:
    ``config.laps.min_lap_sx: unknown key``.

    Pydantic's own ``str(exc)`` quotes each input (``input_value=51.5``); this names the key
    and pydantic's description of the problem, never the value (which may be a coordinate,
    a start/finish line's, spec 000 §15)."""
    parts = []
    for error in exc.errors()[:limit]:
        path = ".".join([root, *(str(p) for p in error["loc"])])
        what = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        parts.append(f"{path}: {what}")
    more = len(exc.errors()) - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
