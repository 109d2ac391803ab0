"""koboi's run metrics on ``koboi serve``'s Prometheus ``/metrics`` (a server extension).

The pipeline of the served agent's ``telemetry`` section gets one more metric reader,
read when Prometheus scrapes: the same numbers the OTLP exporter sends (tokens,
cost, durations, runs by outcome, tool calls by verdict, in-doubt calls), as
Prometheus families. Names and label names are the OpenTelemetry ones with every
other character than letters, digits and ``_`` written ``_`` (and ``_seconds``,
``_usd`` for those units): ``gen_ai.client.token.usage`` is
``gen_ai_client_token_usage``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

_NOT_NAME = re.compile(r"[^a-zA-Z0-9_]")
_UNITS = {"s": "_seconds", "USD": "_usd"}


def _name(name: str, unit: str) -> str:
    clean = _NOT_NAME.sub("_", name)
    suffix = _UNITS.get(unit, "")
    return clean if clean.endswith(suffix) else clean + suffix


def _labels(attributes: Any) -> dict[str, str]:
    return {_NOT_NAME.sub("_", str(k)): str(v) for k, v in dict(attributes or {}).items()}


class TelemetryCollector(Collector):
    """Reads the telemetry pipeline's metrics at each scrape."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self.reader = reader

    def collect(self) -> Iterator[Metric]:
        from opentelemetry.sdk.metrics.export import Histogram, Sum

        data = self.reader.get_metrics_data()
        if data is None:
            return
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for found in scope.metrics:
                    metric: Any = found
                    name = _name(metric.name, metric.unit or "")
                    description = metric.description or ""
                    points: list[Any] = list(metric.data.data_points)
                    keys = sorted({k for p in points for k in _labels(p.attributes)})
                    if isinstance(metric.data, Histogram):
                        family: Any = HistogramMetricFamily(name, description, labels=keys)
                        for p in points:
                            labels = _labels(p.attributes)
                            buckets, running = [], 0
                            for bound, count in zip(
                                p.explicit_bounds, p.bucket_counts, strict=False
                            ):
                                running += count
                                buckets.append((_bound(bound), running))
                            buckets.append(("+Inf", p.count))
                            family.add_metric([labels.get(k, "") for k in keys], buckets, p.sum)
                    elif isinstance(metric.data, Sum) and metric.data.is_monotonic:
                        family = CounterMetricFamily(name, description, labels=keys)
                        for p in points:
                            labels = _labels(p.attributes)
                            family.add_metric([labels.get(k, "") for k in keys], p.value)
                    else:
                        family = GaugeMetricFamily(name, description, labels=keys)
                        for p in points:
                            labels = _labels(p.attributes)
                            family.add_metric([labels.get(k, "") for k in keys], p.value)
                    yield family


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
