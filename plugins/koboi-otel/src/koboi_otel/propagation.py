"""Outbound requests carry the span they are made from (a koboi-http request hook).

koboi-http sends the run's trace context to the peers the config trusts
(``http.trace_peers``, ``http.trace_hosts``) with a new span id per request, an id
no span has. While telemetry traces the run, this hook sends instead the span
current where the request is made (the ``chat`` span of a model call, the
``execute_tool`` span of a tool), to the same peers only, so the server's span
hangs under it. It runs before koboi-http's own hook, which then leaves the
header alone. A run that telemetry does not trace is left to koboi-http.

Imports nothing from OpenTelemetry until a traced run makes a request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from koboi_http.hooks import RequestHook
from koboi_otel.settings import RUN_STATE

if TYPE_CHECKING:
    from koboi_http.hooks import OutboundRequest

#: The name it is registered under.
HOOK_NAME = "otel_span_propagation"


class SpanPropagation(RequestHook):
    """``traceparent`` = the current span, for the peers that receive the trace."""

    def on_request(self, request: OutboundRequest) -> None:
        run = request.run
        if run is None or RUN_STATE not in run.state:
            return
        headers = request.headers
        if "traceparent" in headers:
            return
        from koboi_http.settings import DEFAULT_SETTINGS, SECTION, HTTPSettings

        section = run.config.section(SECTION)
        settings = section if isinstance(section, HTTPSettings) else DEFAULT_SETTINGS
        if not settings.propagate_trace or not settings.sends_trace_to(request.peer, request.host):
            return
        from opentelemetry import trace

        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return
        headers["traceparent"] = (
            f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
        )
        state = run.trace.tracestate if run.trace is not None else ""
        if state and "tracestate" not in headers:
            headers["tracestate"] = state
