"""OpenTelemetry traces, optional: every call here is a no-op unless tracing is on.

Tracing is on when the ``otel`` extra is installed (``pip install 'tideway[otel]'``) and the
environment asks for it with one of the standard variables (:data:`SWITCHES`:
``OTEL_TRACES_EXPORTER``, ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
or ``OTEL_SERVICE_NAME``), and ``OTEL_SDK_DISABLED`` is not ``true``. Everything else is the
SDK's own environment handling: the exporter named by ``OTEL_TRACES_EXPORTER`` (default
``otlp``) is loaded through the SDK's ``opentelemetry_traces_exporter`` entry points and reads
its ``OTEL_EXPORTER_OTLP_*`` settings itself; the resource reads ``OTEL_SERVICE_NAME`` /
``OTEL_RESOURCE_ATTRIBUTES``, the sampler ``OTEL_TRACES_SAMPLER``, the batch processor
``OTEL_BSP_*``.

With tracing off, :func:`active` is ``False`` and the span helpers return one shared
``nullcontext``: the ingest hot path checks :func:`active` once per batch and builds no links.

What is traced (docs/operating.md#traces):

* ingest: one ``ingest.batch`` span per batch, linked to each envelope's recorded
  ``traceparent`` (a batch has many parents, so links, never a span per envelope), with child
  spans around the Postgres, Redis and ClickHouse round trips;
* sessions: an upload starts a trace (or continues the caller's ``traceparent``), the run
  stores it (``runs.traceparent``), and every job attempt is a ``job.attempt`` span of that
  trace whose trace id ``job_attempts.trace_id`` records.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the otel extra is optional: imported only once tracing is switched on
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

SWITCHES = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SERVICE_NAME")
"""Setting any of these (to anything but ``none`` for the exporter) switches tracing on."""

TRACER_NAME = "tideway"

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_NULL: AbstractContextManager[None] = contextlib.nullcontext()

_tracer: Tracer | None = None
_provider: TracerProvider | None = None


def active() -> bool:
    """Whether spans are being recorded (the hot path's one check per batch)."""
    return _tracer is not None


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces (see the module docstring)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(env.get(name, "").strip() for name in SWITCHES)


def configure_tracing(service_name: str) -> bool:
    """Switch tracing on for this process when the environment asks for it; ``True`` if on.

    ``service_name`` is the default ``service.name`` (``tideway-ingest``, …); the operator's
    ``OTEL_SERVICE_NAME`` wins. Without the ``otel`` extra, or without any :data:`SWITCHES`,
    nothing changes. Calling it again in the same process keeps the first set-up.
    """
    if _tracer is not None or not wanted():
        return _tracer is not None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:  # the extra is not installed: tracing stays off
        return False
    # Resource.create reads OTEL_RESOURCE_ATTRIBUTES; attributes given here would override
    # OTEL_SERVICE_NAME, so the operator's name is chosen first.
    name = os.environ.get("OTEL_SERVICE_NAME", "").strip() or service_name
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    exporters = os.environ.get("OTEL_TRACES_EXPORTER", "otlp")
    for exporter in (n.strip() for n in exporters.split(",") if n.strip()):
        (point,) = entry_points(group="opentelemetry_traces_exporter", name=exporter) or (None,)
        if point is None:  # a ConfigError: the CLI prints it as one line, not a traceback
            from streams.errors import ConfigError

            raise ConfigError(f"OTEL_TRACES_EXPORTER names an unknown exporter: {exporter!r}")
        provider.add_span_processor(BatchSpanProcessor(point.load()()))
    trace.set_tracer_provider(provider)
    install(provider)
    return True


def install(provider: TracerProvider | None) -> None:
    """Record spans through ``provider`` (tests pass one with an in-memory exporter);
    ``None`` switches tracing off again."""
    global _tracer, _provider
    _provider = provider
    _tracer = None if provider is None else provider.get_tracer(TRACER_NAME)


def shutdown() -> None:
    """Flush and stop the exporters (at process exit)."""
    if _provider is not None:
        _provider.shutdown()


def trace_id_of(traceparent: str | None) -> str | None:
    """The 32-hex trace id of a W3C ``traceparent`` (``None`` when absent or malformed)."""
    if not traceparent:
        return None
    match = _TRACEPARENT.match(traceparent)
    return match.group(1) if match else None


def current_traceparent() -> str | None:
    """The ``traceparent`` of the span current in this task (``None`` when there is none)."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _remote(traceparent: str | None) -> Any:
    """A parent context from a ``traceparent`` (``None``: the current context)."""
    if not traceparent or trace_id_of(traceparent) is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def span(name: str, attributes: Mapping[str, Any] | None = None) -> AbstractContextManager[None]:
    """A child span of the current one around a block (a round trip to a dependency)."""
    if _tracer is None:
        return _NULL
    return _span(name, attributes, parent=None)


def batch_span(traceparents: Iterable[str | None],
               attributes: Mapping[str, Any] | None = None) -> AbstractContextManager[None]:
    """The ``ingest.batch`` span, linked to every valid ``traceparent`` in ``traceparents``.

    The links are built only when tracing is on (the iterable is not consumed otherwise).
    """
    if _tracer is None:
        return _NULL
    from opentelemetry import trace

    links = []
    for traceparent in traceparents:
        if traceparent is None:
            continue
        context = trace.get_current_span(_remote(traceparent)).get_span_context()
        if context.is_valid:
            links.append(trace.Link(context))
    return _span("ingest.batch", attributes, parent=None, links=links, root=True)


@contextmanager
def continue_trace(name: str, traceparent: str | None,
                   attributes: Mapping[str, Any] | None = None) -> Iterator[str | None]:
    """A span continuing ``traceparent``'s trace (a new trace when it is ``None``); yields
    the ``traceparent`` to hand on: the span's own when tracing is on, else ``traceparent``
    itself when it is well-formed (a caller's trace is still recorded), else ``None``."""
    if _tracer is None:
        yield traceparent if trace_id_of(traceparent) is not None else None
        return
    with _span(name, attributes, parent=_remote(traceparent), root=traceparent is None):
        yield current_traceparent()


@contextmanager
def _span(name: str, attributes: Mapping[str, Any] | None, *, parent: Any,
          links: list[Any] | None = None, root: bool = False) -> Iterator[None]:
    assert _tracer is not None
    from opentelemetry import context as otel_context

    if parent is None and root:
        parent = otel_context.Context()  # a new trace, whatever is current
    with _tracer.start_as_current_span(name, context=parent, links=links,
                                       attributes=dict(attributes or {})):
        yield


def start_span(name: str, traceparent: str | None,
               attributes: Mapping[str, Any] | None = None) -> Any:
    """Start a span continuing ``traceparent`` (a new trace without one) that outlives a
    block, such as a job attempt from its claim to its recorded end; ``None`` when off.

    Make it current with :func:`using`, end it with :func:`end_span`.
    """
    if _tracer is None:
        return None
    from opentelemetry import context as otel_context

    parent = _remote(traceparent)
    return _tracer.start_span(name, context=parent if parent is not None
                              else otel_context.Context(), attributes=dict(attributes or {}))


def using(started: Any) -> AbstractContextManager[Any]:
    """Make a :func:`start_span` span current for the block (tasks created in it inherit it)."""
    if started is None:
        return _NULL
    from opentelemetry import trace

    return trace.use_span(started, end_on_exit=False)


def span_trace_id(started: Any) -> str | None:
    """The 32-hex trace id of a :func:`start_span` span (``None`` when off)."""
    if started is None:
        return None
    return f"{started.get_span_context().trace_id:032x}"


def end_span(started: Any, *, outcome: str, error_code: str = "", failed: bool = False) -> None:
    """End a :func:`start_span` span with its outcome (an error status when ``failed``)."""
    if started is None:
        return
    from opentelemetry.trace import Status, StatusCode

    started.set_attribute("tideway.outcome", outcome)
    if error_code:
        started.set_attribute("tideway.error_code", error_code)
    if failed:
        started.set_status(Status(StatusCode.ERROR, error_code or outcome))
    started.end()
