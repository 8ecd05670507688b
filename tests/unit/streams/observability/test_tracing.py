"""The tracing switch: off unless the OTEL_* environment asks, the SDK's own exporters when on."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streams.errors import ConfigError
from streams.observability import tracing

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_only_the_standard_variables_switch_tracing_on() -> None:
    assert not tracing.wanted({})
    assert not tracing.wanted({"PATH": "/bin", "OTEL_BSP_SCHEDULE_DELAY": "100"})
    for name in tracing.SWITCHES:
        assert tracing.wanted({name: "x"}), name
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_SERVICE_NAME": "a"})
    assert not tracing.wanted({"OTEL_SDK_DISABLED": "true", "OTEL_SERVICE_NAME": "a"})


def test_off_the_helpers_do_nothing_and_cost_no_links() -> None:
    assert not tracing.active()

    def never() -> object:
        raise AssertionError("links were built with tracing off")
        yield  # a generator that fails when iterated

    with tracing.batch_span(never()), tracing.span("postgres.record"):
        pass
    assert tracing.start_span("job.attempt", VALID) is None
    assert tracing.current_traceparent() is None
    with tracing.continue_trace("session.upload", VALID) as passed:
        assert passed == VALID  # a caller's trace context is handed on as it came
    with tracing.continue_trace("session.upload", "00-bad") as passed:
        assert passed is None


def test_trace_ids_come_only_from_well_formed_traceparents() -> None:
    assert tracing.trace_id_of(VALID) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert tracing.trace_id_of(None) is None
    assert tracing.trace_id_of("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") is None


def test_the_environment_picks_the_sdks_exporter_and_service_name() -> None:
    script = (
        "from streams.observability import tracing\n"
        "assert tracing.configure_tracing('tideway-ingest')\n"
        "with tracing.span('postgres.record'):\n"
        "    pass\n"
        "assert tracing.current_traceparent() is None\n"
        "with tracing.continue_trace('session.upload', None) as tp:\n"
        "    assert tracing.trace_id_of(tp)\n"
        "tracing.shutdown()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="edge-ingest")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert '"name": "session.upload"' in done.stdout
    assert '"service.name": "edge-ingest"' in done.stdout
    env.pop("OTEL_TRACES_EXPORTER")
    env.pop("OTEL_SERVICE_NAME")
    off = subprocess.run([sys.executable, "-c", "from streams.observability import tracing\n"
                          "assert not tracing.configure_tracing('tideway')\n"
                          "import sys\nassert 'opentelemetry' not in sys.modules\n"],
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert off.returncode == 0, off.stderr


def test_an_unknown_exporter_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "no-such-exporter")
    with pytest.raises(ConfigError, match="no-such-exporter"):
        tracing.configure_tracing("tideway")
    assert not tracing.active()
