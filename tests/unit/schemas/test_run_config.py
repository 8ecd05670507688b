"""The run config model: every key described once, unknown keys refused with their path."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError

from schemas.run_config import RunConfig, explain, parse_run_config
from stages.batch.contract import SessionStageError, run_config


def _problem(raw: dict[str, object]) -> str:
    with pytest.raises(ValidationError) as err:
        parse_run_config(raw)
    return explain(err.value)


def test_a_misspelt_key_is_refused_with_its_path() -> None:
    assert _problem({"laps": {"min_lap_sx": 5}}) == "config.laps.min_lap_sx: unknown key"
    assert _problem({"skip_fusoin": True}) == "config.skip_fusoin: unknown key"


def test_values_are_checked_strictly_as_json() -> None:
    assert "config.laps.min_lap_s" in _problem({"laps": {"min_lap_s": "10"}})
    assert "config.max_artifact_bytes" in _problem({"max_artifact_bytes": True})
    assert "config.downsample.L1_bucket_s" in _problem({"downsample": {"L1_bucket_s": 0}})
    assert "config.time_offsets_s.wind" in _problem({"time_offsets_s": {"wind": 1.0}})
    assert "config.start_finish.lon2" in _problem(
        {"start_finish": {"lat1": 1, "lon1": 1, "lat2": 1}}
    )


def test_a_valid_config_reads_with_defaults() -> None:
    cfg = parse_run_config({"laps": {"min_lap_s": 5}, "session_date": "2026-03-01", "fusion": None})
    assert cfg.laps.min_lap_s == 5.0 and cfg.laps.fit_window_s == RunConfig().laps.fit_window_s
    assert cfg.session_date == dt.date(2026, 3, 1)
    assert cfg.fusion == RunConfig().fusion


def test_a_stage_refuses_what_intake_would_have_refused() -> None:
    with pytest.raises(SessionStageError) as err:
        run_config({"laps": {"min_lap_sx": 5}})
    assert err.value.code == "INVALID_CONFIG"
    assert "config.laps.min_lap_sx" in str(err.value)


def test_an_integer_may_be_written_as_json_schema_counts_one() -> None:
    # The API's document says `integer`, and JSON Schema counts 10.0 as one: so does the model.
    cfg = parse_run_config({"fusion": {"min_fixes": 12.0}, "max_artifact_bytes": 1024.0})
    assert (cfg.fusion.min_fixes, cfg.max_artifact_bytes) == (12, 1024)
    assert isinstance(cfg.fusion.min_fixes, int)
    assert "config.fusion.min_fixes" in _problem({"fusion": {"min_fixes": 12.5}})
    assert "config.fusion.min_fixes" in _problem({"fusion": {"min_fixes": "12"}})
    # Past a bigint the stored config could not be written (jsonb through orjson).
    assert "config.max_artifact_bytes" in _problem({"max_artifact_bytes": 2**63})


def test_timing_lines_tracks_and_lap_analysis_keys() -> None:
    line = {"lat1": 52.0, "lon1": -1.0, "lat2": 52.0003, "lon2": -1.0}
    cfg = parse_run_config({"start_finish": line, "finish": line, "sectors": [line, line],
                            "track": "Silverstone", "laps": {"mini_sectors": 0,
                                                             "reference_lap": 4}})
    assert cfg.finish is not None and len(cfg.sectors) == 2 and cfg.track == "Silverstone"
    assert (cfg.laps.default_sectors, cfg.laps.mini_sectors, cfg.laps.reference_lap) == (3, 0, 4)
    # A finish line alone times nothing: refused where the run is asked for, in words.
    assert "finish needs start_finish" in _problem({"finish": line})
    assert "config.sectors" in _problem({"sectors": [line] * 33})
    assert "config.laps.default_sectors" in _problem({"laps": {"default_sectors": 0}})
    assert "config.tracks.0.name" in _problem({"tracks": [{"name": "", "start_finish": line}]})
