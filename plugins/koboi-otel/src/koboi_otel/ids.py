"""Span ids the tracer is told to use: a run's root span takes the ids of the trace
context the kernel started for it (``TraceContext.started_here``), so the journal's
``run_started.trace`` and every ``traceparent`` sent during the run name a span that
exists."""

from __future__ import annotations

import threading

from opentelemetry.sdk.trace.id_generator import RandomIdGenerator


class ForcedIds(RandomIdGenerator):
    """Random ids, except for the one span started inside :meth:`forcing`."""

    def __init__(self) -> None:
        self._local = threading.local()

    def force(self, trace_id: int, span_id: int) -> None:
        """The next root span started in this thread gets these ids."""
        self._local.trace_id, self._local.span_id = trace_id, span_id

    def generate_trace_id(self) -> int:
        forced: int | None = getattr(self._local, "trace_id", None)
        if forced is not None:
            self._local.trace_id = None
            return forced
        return super().generate_trace_id()

    def generate_span_id(self) -> int:
        forced: int | None = getattr(self._local, "span_id", None)
        if forced is not None:
            self._local.span_id = None
            return forced
        return super().generate_span_id()
