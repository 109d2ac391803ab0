"""koboi hooks of koboi-otel (plugin id ``telemetry``).

Imports nothing heavy, and nothing from OpenTelemetry: the SDK is imported when an
agent whose config has an enabled ``telemetry`` section opens
(``koboi_register_interceptors``), never for a config without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.hookspecs import RegisterConfigSection, RegisterInterceptor
    from koboi_http.hookspecs import RegisterRequestHook
    from koboi_server.extensions import ServerContext, ServerExtension
    from koboi_server.hookspecs import RegisterServerExtension


@hookimpl
def koboi_register_config_sections(register: RegisterConfigSection) -> None:
    from koboi_otel import aliases
    from koboi_otel.settings import SECTION, TelemetrySettings

    register(
        SECTION,
        TelemetrySettings,
        description="OpenTelemetry traces and metrics of the agent's runs (OTLP, console).",
        # koboi-agent's spelling: accepted, and `koboi validate --suggest` shows koboi's.
        aliases={"tracing": aliases.tracing},
    )


@hookimpl
def koboi_register_interceptors(register: RegisterInterceptor, config: AgentConfig) -> None:
    from koboi_otel.settings import SECTION, settings_of

    settings = settings_of(config.section(SECTION))
    if settings is None:
        return
    from koboi_otel.exporting import pipeline_for
    from koboi_otel.observer import CapturingTelemetry, Telemetry

    kind = CapturingTelemetry if settings.capture_content else Telemetry
    register(kind(settings, pipeline_for(settings)))


@hookimpl
def koboi_http_register_request_hooks(register: RegisterRequestHook) -> None:
    from koboi_otel.propagation import HOOK_NAME, SpanPropagation

    register(
        HOOK_NAME,
        SpanPropagation(),
        description="While telemetry traces a run, its requests carry the current span "
        "(the model call's, the tool's) as traceparent, to the peers koboi-http trusts.",
    )


def create_server_extension(context: ServerContext) -> ServerExtension | None:
    """koboi serve's /metrics gets the telemetry's run metrics (when both are on)."""
    from koboi_otel.settings import SECTION, settings_of

    settings = settings_of(context.config.section(SECTION))
    if settings is None or not context.settings.metrics.enabled:
        return None
    from koboi_otel.exporting import pipeline_for
    from koboi_otel.prometheus import TelemetryCollector
    from koboi_server.extensions import ServerExtension

    pipeline = pipeline_for(settings, on_demand=True)
    assert pipeline.on_demand is not None
    return ServerExtension(collectors=[TelemetryCollector(pipeline.on_demand)])


@hookimpl
def koboi_server_register_extensions(register: RegisterServerExtension) -> None:
    register(
        "telemetry",
        create_server_extension,
        description="The run metrics of the telemetry section (tokens, cost, tool calls by "
        "verdict, runs by outcome) on koboi serve's /metrics.",
    )
