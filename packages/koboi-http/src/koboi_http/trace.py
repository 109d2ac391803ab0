"""koboi-http's own request hook: W3C trace context propagation.

Every request made during a run carries the run's trace to the peers the
run's config trusts with it (``http.trace_peers``, by default the model
providers only, and ``http.trace_hosts``): ``traceparent`` with the run's
trace id and a new span id per request (:meth:`koboi.tracing.TraceContext.child`:
each attempt is a span of its own), and ``tracestate`` when the run has one.

Why not everywhere: a trace id sent to a site lets whoever runs it correlate
the requests of one run (and, when a caller gave the trace, tie them to the
caller's own trace). A model provider or an operator's own service is a peer
the operator chose; a URL a model asked ``web_fetch`` for, or one an API
client gave as a webhook, is not.
"""

from __future__ import annotations

from koboi_http.hooks import OutboundRequest, RequestHook
from koboi_http.settings import DEFAULT_SETTINGS, SECTION, HTTPSettings

#: The name koboi-http registers it under.
TRACE_HOOK = "trace_propagation"


class TracePropagation(RequestHook):
    """Adds ``traceparent`` (and ``tracestate``) to a run's requests to trusted peers.

    A request that already has a ``traceparent`` (a provider's ``headers``
    option, a tracing plugin's own hook) keeps it, and its ``tracestate``.
    Nothing happens outside a run.
    """

    def on_request(self, request: OutboundRequest) -> None:
        run = request.run
        trace = run.trace if run is not None else None
        if trace is None or run is None:
            return
        headers = request.headers
        if "traceparent" in headers:
            return
        section = run.config.section(SECTION)
        settings = section if isinstance(section, HTTPSettings) else DEFAULT_SETTINGS
        if not settings.propagate_trace:
            return
        trusted = settings.trusted
        if request.peer not in trusted.peers and not trusted.host(request.host):
            return
        span = trace.child()
        headers["traceparent"] = span.traceparent
        if span.tracestate and "tracestate" not in headers:
            headers["tracestate"] = span.tracestate
