"""Settings come from TIDEWAY_* variables and tideway.toml, with secrets masked on show."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from streams.config import Settings, mask_url
from streams.errors import ConfigError
from streams.names import Names


def test_defaults_leave_services_embedded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    s = Settings()
    assert s.nats_url is None and s.postgres_dsn is None
    assert s.consumer.capture_stage_snapshots is False
    with pytest.raises(ConfigError, match="TIDEWAY_POSTGRES_DSN"):
        s.postgres()


def test_environment_and_nested_groups(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIDEWAY_POSTGRES_DSN", "postgresql://u:hunter2@db:5432/x")
    monkeypatch.setenv("TIDEWAY_CONSUMER__BATCH_SIZE", "1000")
    monkeypatch.setenv("TIDEWAY_CONSUMER__CAPTURE_STAGE_SNAPSHOTS", "true")
    s = Settings()
    assert s.postgres() == "postgresql://u:hunter2@db:5432/x"
    assert s.consumer.batch_size == 1000
    assert s.consumer.capture_stage_snapshots is True
    shown = s.masked()
    assert shown["postgres_dsn"] == "postgresql://u:***@db:5432/x"
    assert "hunter2" not in repr(s)


def test_toml_file_is_read_and_env_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tideway.toml").write_text(
        'nats_url = "nats://from-toml:4222"\nnamespace = "prod"\n[consumer]\nbatch_size = 42\n'
    )
    s = Settings()
    assert s.nats() == "nats://from-toml:4222"
    assert s.consumer.batch_size == 42
    monkeypatch.setenv("TIDEWAY_NATS_URL", "nats://from-env:4222")
    assert Settings().nats() == "nats://from-env:4222"


def test_bad_values_are_rejected_with_the_field_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIDEWAY_CONSUMER__BATCH_SIZE", "0")
    with pytest.raises(ValidationError, match="batch_size"):
        Settings()


def test_mask_url_leaves_passwordless_urls_alone() -> None:
    assert mask_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert mask_url("redis://:pw@h:1/0") == "redis://:***@h:1/0"


def test_namespaced_names_never_collide_with_production() -> None:
    prod, test = Names(), Names(namespace="t1")
    assert prod.telemetry_stream == "TELEMETRY"
    assert test.telemetry_stream == "T1_TELEMETRY"
    assert prod.telemetry_subject("acme", "dev1", "state") == "telemetry.acme.dev1.state"
    assert test.telemetry_subject("acme", "dev1", "state") == "t1.telemetry.acme.dev1.state"
    assert test.hot_state_key("acme", "d") != prod.hot_state_key("acme", "d")
    assert test.session_bucket != prod.session_bucket


def test_load_settings_finds_a_running_tideway_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from streams.config import RUNTIME_FILE, load_settings

    monkeypatch.chdir(tmp_path)
    assert load_settings().postgres_dsn is None  # nothing running: still embedded
    (tmp_path / ".tideway").mkdir()
    (tmp_path / ".tideway" / RUNTIME_FILE).write_text(
        '{"postgres_dsn": "postgresql://postgres@/postgres?host=/sock",'
        ' "nats_url": "nats://127.0.0.1:4999"}'
    )
    found = load_settings()
    assert found.postgres() == "postgresql://postgres@/postgres?host=/sock"
    assert found.nats() == "nats://127.0.0.1:4999"
    # A configured URL always wins over what `tideway up` recorded.
    monkeypatch.setenv("TIDEWAY_NATS_URL", "nats://configured:4222")
    assert load_settings().nats() == "nats://configured:4222"


def test_load_settings_ignores_a_damaged_runtime_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from streams.config import RUNTIME_FILE, load_settings

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tideway").mkdir()
    (tmp_path / ".tideway" / RUNTIME_FILE).write_text("{not json")
    assert load_settings().postgres_dsn is None


def test_spec_name_of_the_snapshot_switch_is_an_alias(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INGESTION_CAPTURE_STAGE_SNAPSHOTS", "true")
    assert Settings().consumer.capture_stage_snapshots is True
    # Other consumer settings from the TIDEWAY_ names still apply beside the alias.
    monkeypatch.setenv("TIDEWAY_CONSUMER__BATCH_SIZE", "77")
    assert Settings().consumer.batch_size == 77
    assert Settings().consumer.capture_stage_snapshots is True
    # The TIDEWAY_ name wins when both are set.
    monkeypatch.setenv("TIDEWAY_CONSUMER__CAPTURE_STAGE_SNAPSHOTS", "false")
    assert Settings().consumer.capture_stage_snapshots is False
    monkeypatch.setenv("INGESTION_CAPTURE_STAGE_SNAPSHOTS", "not-a-bool")
    monkeypatch.delenv("TIDEWAY_CONSUMER__CAPTURE_STAGE_SNAPSHOTS")
    with pytest.raises(ValueError, match="capture_stage_snapshots"):
        Settings()


def test_job_max_attempts_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIDEWAY_RETRY__JOB_MAX_ATTEMPTS", "5")
    assert Settings().retry.job_max_attempts == 5
