"""The ``telemetry`` config section.

Only pydantic and the stdlib here: the section is registered while plugins load,
and a config without it (or with ``enabled: false``) must import nothing from
OpenTelemetry. Every key left unset falls back to the standard ``OTEL_*``
environment variable that OpenTelemetry's SDK reads (``OTEL_SERVICE_NAME``,
``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_PROTOCOL``,
``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``,
``OTEL_TRACES_SAMPLER``, ``OTEL_METRIC_EXPORT_INTERVAL``, ``OTEL_BSP_*``...), then to
OpenTelemetry's defaults. A key set in the config wins over the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

SECTION = "telemetry"
#: The key of a run's telemetry in ``RunInfo.state`` (present only while telemetry traces it).
RUN_STATE = "koboi_otel"

Exporter = Literal["otlp", "console", "none"]
Protocol = Literal["http/protobuf", "grpc"]


class TelemetrySettings(BaseModel):
    """OpenTelemetry traces and metrics of the agent's runs (koboi-otel)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=True,
        description="Trace and measure the agent's runs. false: koboi-otel does nothing and "
        "imports nothing from OpenTelemetry (also when OTEL_SDK_DISABLED=true).",
    )
    service_name: str | None = Field(
        default=None,
        description="service.name of the telemetry; default OTEL_SERVICE_NAME, else 'koboi'.",
    )
    traces: Exporter | None = Field(
        default=None,
        description="Where spans go: 'otlp' (a collector, Jaeger, Tempo, Honeycomb, "
        "Langfuse...), 'console' (JSON lines on stderr) or 'none'. Default: "
        "OTEL_TRACES_EXPORTER, else otlp.",
    )
    metrics: Exporter | None = Field(
        default=None,
        description="Where metrics go: 'otlp', 'console' (stderr) or 'none'. Default: "
        "OTEL_METRICS_EXPORTER, else otlp.",
    )
    protocol: Protocol | None = Field(
        default=None,
        description="OTLP transport: 'http/protobuf' (port 4318) or 'grpc' (port 4317, needs "
        "koboi-otel[grpc]). Default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf.",
    )
    endpoint: str | None = Field(
        default=None,
        description="OTLP endpoint: the collector's base URL (http://collector:4318; for gRPC "
        "http://collector:4317). Default: OTEL_EXPORTER_OTLP_ENDPOINT (and the per-signal "
        "variables), else localhost.",
    )
    headers: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Headers sent with every export (an API key of a hosted backend: write it "
        "as ${VAR}). Secrets: never shown or logged. Default: OTEL_EXPORTER_OTLP_HEADERS.",
    )
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Timeout of one export. Default: OTEL_EXPORTER_OTLP_TIMEOUT.",
    )
    sample_ratio: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Share of new traces recorded (a run that joins a caller's trace follows "
        "the caller's decision). Default: OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG, else "
        "every trace.",
    )
    metric_interval_seconds: float | None = Field(
        default=None,
        gt=0,
        description="How often metrics are exported. Default: OTEL_METRIC_EXPORT_INTERVAL, "
        "else 60 s.",
    )
    capture_content: bool = Field(
        default=False,
        description="Put message contents on the spans (the model's input and output messages, "
        "tool arguments and results), masked by the kernel's secret rules and the run's "
        "redactions. Off by default: contents may hold personal data.",
    )
    max_content_chars: int = Field(
        default=4000,
        ge=64,
        description="Longest content attribute when capture_content is on; longer ones are cut.",
    )
    resource_attributes: dict[str, str] = Field(
        default_factory=dict,
        description="More resource attributes (deployment.environment.name...), beside "
        "OTEL_RESOURCE_ATTRIBUTES.",
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint_is_a_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError(
                f"{value!r} is not an endpoint URL; write http://host:4318 (OTLP over HTTP) or "
                "http://host:4317 (gRPC)"
            )
        return value

    def active(self, environ: Mapping[str, str] | None = None) -> bool:
        """Whether telemetry runs: enabled here, and not disabled by ``OTEL_SDK_DISABLED``."""
        env = os.environ if environ is None else environ
        return self.enabled and env.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"


def settings_of(section: object) -> TelemetrySettings | None:
    """The section when it is a :class:`TelemetrySettings` that is on, else None."""
    if isinstance(section, TelemetrySettings) and section.active():
        return section
    return None
