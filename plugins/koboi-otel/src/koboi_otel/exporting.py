"""The OpenTelemetry SDK as a ``telemetry`` section configures it: providers and exporters.

One :class:`Pipeline` (a tracer provider with a batch span processor, a meter
provider with a periodic reader) per distinct configuration, kept for the life
of the process and flushed at exit, so agents opened again and again (a server's
job runner, tests) share it. The process's global OpenTelemetry providers are
left alone: an application that set up OpenTelemetry itself keeps its own.

Unset keys fall back to the ``OTEL_*`` variables: the exporters read the
endpoint, headers, timeout and TLS settings from them; the batch processor its
``OTEL_BSP_*`` settings; the sampler ``OTEL_TRACES_SAMPLER``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from koboi.errors import KoboiError
from koboi.logs import get_logger
from koboi_otel.settings import TelemetrySettings

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricReader
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    from koboi_otel.ids import ForcedIds

log = get_logger("koboi.otel")

#: The histogram buckets the GenAI conventions recommend.
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
DURATION_BUCKETS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)


@dataclass
class Pipeline:
    """What one configuration exports through."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    ids: ForcedIds
    readers: tuple[MetricReader, ...]
    #: A reader collected on demand (koboi serve's /metrics), when one was asked for.
    on_demand: InMemoryMetricReader | None = None

    def flush(self, timeout_millis: int = 10_000) -> None:
        self.tracer_provider.force_flush(timeout_millis)
        self.meter_provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):  # at exit: an exporter that cannot reach anyone
            self.tracer_provider.shutdown()
        with contextlib.suppress(Exception):  # the same, for the metrics exporter
            self.meter_provider.shutdown()


_pipelines: dict[str, Pipeline] = {}
#: Pipelines replaced by one with an on-demand reader: flushed and stopped at exit too.
_retired: list[Pipeline] = []
_lock = threading.Lock()


def pipeline_for(settings: TelemetrySettings, *, on_demand: bool = False) -> Pipeline:
    """The pipeline of ``settings``, built on first use and kept for the process.

    ``on_demand``: with a metric reader collected on demand (``Pipeline.on_demand``), for
    koboi serve's ``/metrics``; only a pipeline built now can get it (OpenTelemetry adds
    readers when a meter provider is made), so a pipeline built without one (by koboi
    serve's preflight) is replaced, and the old one kept until exit for whoever holds it.
    """
    key = _key(settings)
    with _lock:
        found = _pipelines.get(key)
        if found is not None and on_demand and found.on_demand is None:
            _retired.append(found)
            found = None
        if found is None:
            found = _pipelines[key] = _build(settings, on_demand=on_demand)
            if len(_pipelines) == 1:
                atexit.register(shutdown_all)
        return found


def flush_all(timeout_millis: int = 10_000) -> None:
    """Export now what every pipeline holds (tests, a command about to exit)."""
    for found in list(_pipelines.values()):
        found.flush(timeout_millis)


def shutdown_all() -> None:
    """Flush and stop every pipeline (at exit; tests between configurations)."""
    with _lock:
        found = [*_pipelines.values(), *_retired]
        _pipelines.clear()
        _retired.clear()
    for one in found:
        one.shutdown()


def _key(settings: TelemetrySettings) -> str:
    data = settings.model_dump(mode="json", exclude={"capture_content", "max_content_chars"})
    data["headers"] = {k: v.get_secret_value() for k, v in settings.headers.items()}
    return json.dumps(data, sort_keys=True)


def _env(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    value = (os.environ if environ is None else environ).get(name, "").strip()
    return value or None


def exporter_choice(configured: str | None, variable: str) -> str:
    """``otlp``, ``console`` or ``none``: the config's, else the variable's first entry."""
    if configured is not None:
        return configured
    value = (_env(variable) or "otlp").split(",")[0].strip().lower()
    if value not in ("otlp", "console", "none"):
        raise KoboiError(
            f"{variable}={value!r} is not supported by koboi-otel; use otlp, console or none"
        )
    return value


def protocol_choice(settings: TelemetrySettings, signal: str) -> str:
    value = (
        settings.protocol
        or _env(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
        or _env("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if value not in ("http/protobuf", "grpc"):
        raise KoboiError(
            f"OTLP protocol {value!r} is not supported by koboi-otel; use http/protobuf or grpc "
            "(telemetry.protocol, OTEL_EXPORTER_OTLP_PROTOCOL)"
        )
    return value


def _build(settings: TelemetrySettings, *, on_demand: bool = False) -> Pipeline:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    from koboi_otel._version import __version__
    from koboi_otel.ids import ForcedIds

    attributes: dict[str, str] = {
        "service.version": _koboi_version(),
        **settings.resource_attributes,
    }
    attributes["telemetry.distro.name"] = "koboi-otel"
    attributes["telemetry.distro.version"] = __version__
    name = settings.service_name or _env("OTEL_SERVICE_NAME")
    attributes["service.name"] = name or "koboi"
    resource = Resource.create(attributes)
    ids = ForcedIds()
    sampler = (
        ParentBased(TraceIdRatioBased(settings.sample_ratio))
        if settings.sample_ratio is not None
        else None
    )
    tracer_provider = TracerProvider(
        resource=resource, id_generator=ids, sampler=sampler, shutdown_on_exit=False
    )
    processor = _span_processor(settings)
    if processor is not None:
        tracer_provider.add_span_processor(processor)
    readers = _metric_readers(settings)
    memory = None
    if on_demand:
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        memory = InMemoryMetricReader()
        readers.append(memory)
    views = [
        View(
            instrument_name="gen_ai.client.token.usage",
            aggregation=ExplicitBucketHistogramAggregation(TOKEN_BUCKETS),
        ),
        View(
            instrument_name="*.duration",
            aggregation=ExplicitBucketHistogramAggregation(DURATION_BUCKETS),
        ),
    ]
    # Exemplars (a sampled span's id on each histogram bucket) cost a context lookup and a
    # reservoir offer per measurement: off unless OTEL_METRICS_EXEMPLAR_FILTER asks for them.
    exemplars = None
    if _env("OTEL_METRICS_EXEMPLAR_FILTER") is None:
        from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter

        exemplars = AlwaysOffExemplarFilter()
    meter_provider = MeterProvider(
        resource=resource,
        metric_readers=readers,
        views=views,
        shutdown_on_exit=False,
        exemplar_filter=exemplars,
    )
    return Pipeline(tracer_provider, meter_provider, ids, tuple(readers), memory)


def _span_processor(settings: TelemetrySettings) -> SpanProcessor | None:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    choice = exporter_choice(settings.traces, "OTEL_TRACES_EXPORTER")
    if choice == "none":
        return None
    if choice == "console":
        return BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr))
    return BatchSpanProcessor(_otlp_span_exporter(settings))


def _metric_readers(settings: TelemetrySettings) -> list[MetricReader]:
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    choice = exporter_choice(settings.metrics, "OTEL_METRICS_EXPORTER")
    if choice == "none":
        return []
    interval = (
        int(settings.metric_interval_seconds * 1000)
        if settings.metric_interval_seconds is not None
        else None
    )
    if choice == "console":
        exporter: Any = ConsoleMetricExporter(out=sys.stderr)
    else:
        exporter = _otlp_metric_exporter(settings)
    return [PeriodicExportingMetricReader(exporter, export_interval_millis=interval)]


def _headers(settings: TelemetrySettings) -> dict[str, str] | None:
    if not settings.headers:
        return None
    return {k: v.get_secret_value() for k, v in settings.headers.items()}


def _otlp_span_exporter(settings: TelemetrySettings) -> Any:
    if protocol_choice(settings, "traces") == "grpc":
        grpc = _grpc_module("trace_exporter")
        return grpc.OTLPSpanExporter(
            endpoint=settings.endpoint,
            insecure=_insecure(settings.endpoint),
            headers=_headers(settings),
            timeout=settings.timeout_seconds,
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    endpoint = f"{settings.endpoint}/v1/traces" if settings.endpoint else None
    return OTLPSpanExporter(
        endpoint=endpoint, headers=_headers(settings), timeout=settings.timeout_seconds
    )


def _otlp_metric_exporter(settings: TelemetrySettings) -> Any:
    if protocol_choice(settings, "metrics") == "grpc":
        grpc = _grpc_module("metric_exporter")
        return grpc.OTLPMetricExporter(
            endpoint=settings.endpoint,
            insecure=_insecure(settings.endpoint),
            headers=_headers(settings),
            timeout=settings.timeout_seconds,
        )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    endpoint = f"{settings.endpoint}/v1/metrics" if settings.endpoint else None
    return OTLPMetricExporter(
        endpoint=endpoint, headers=_headers(settings), timeout=settings.timeout_seconds
    )


def _insecure(endpoint: str | None) -> bool | None:
    # An http:// endpoint is plain text; https:// (or the variables' choice) is TLS.
    return True if endpoint is not None and endpoint.startswith("http://") else None


def _grpc_module(name: str) -> Any:
    import importlib

    try:
        return importlib.import_module(f"opentelemetry.exporter.otlp.proto.grpc.{name}")
    except ImportError:
        raise KoboiError(
            "telemetry over OTLP/gRPC needs the gRPC exporter: install koboi-otel[grpc] "
            "(or set telemetry.protocol: http/protobuf)"
        ) from None


def _koboi_version() -> str:
    from koboi import __version__

    return str(__version__)
