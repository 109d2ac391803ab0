"""W3C trace context (https://www.w3.org/TR/trace-context/) of a run, and what runs now.

A run carries the trace context its caller gave (``agent.stream(..., trace=...)``:
the ``traceparent`` of an HTTP request, a job, an A2A call) or a new one; it is
journaled with the run (``run_started.trace``), so the trace id comes back in the
journal of every instance a request crossed. While a run executes,
:func:`current_trace` and :func:`current_run` tell code that has no handle on it
(an HTTP client adding ``traceparent`` to its requests, a log filter) which run
it serves.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi.interceptors import RunInfo
    from koboi.journal import TraceData

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_INVALID_TRACE = "0" * 32
_INVALID_SPAN = "0" * 16
#: tracestate: at most 32 list members, 512 characters as the spec recommends.
_MAX_TRACESTATE = 512


@dataclass(frozen=True)
class TraceContext:
    """One position in a distributed trace: ``trace_id``, ``span_id`` (the parent of
    what comes next), ``flags`` (``01`` sampled), and the vendors' ``tracestate``."""

    trace_id: str
    span_id: str
    flags: str = "01"
    tracestate: str = ""
    #: True for a trace this process started (:meth:`new`): nobody gave it, so no span
    #: ``span_id`` exists anywhere yet and a tracer may use it as its root span's id.
    #: False for a caller's context (:meth:`parse`, :meth:`from_data`, :meth:`child`).
    #: Not part of the journaled form, nor of equality.
    started_here: bool = field(default=False, compare=False)

    @property
    def traceparent(self) -> str:
        """The ``traceparent`` header value (version 00)."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    @classmethod
    def parse(cls, traceparent: str, tracestate: str = "") -> TraceContext | None:
        """The context a ``traceparent`` header gives, or None when it is invalid
        (the spec says to start a new trace then, never to fail the request)."""
        match = _TRACEPARENT.match(traceparent.strip().lower()) if traceparent else None
        if match is None:
            return None
        version, trace_id, span_id, flags = match.groups()
        if version == "ff" or trace_id == _INVALID_TRACE or span_id == _INVALID_SPAN:
            return None
        state = tracestate.strip()
        if len(state) > _MAX_TRACESTATE:
            state = ""
        return cls(trace_id, span_id, flags, state)

    @classmethod
    def new(cls) -> TraceContext:
        """A new trace (random ids, sampled)."""
        return cls(os.urandom(16).hex(), os.urandom(8).hex(), started_here=True)

    def child(self) -> TraceContext:
        """The same trace, a new span id: what an outgoing call carries."""
        return TraceContext(self.trace_id, os.urandom(8).hex(), self.flags, self.tracestate)

    def to_data(self) -> TraceData:
        """As journaled: ``{"traceparent": ..., "tracestate": ...}``."""
        data: TraceData = {"traceparent": self.traceparent}
        if self.tracestate:
            data["tracestate"] = self.tracestate
        return data

    @classmethod
    def from_data(cls, data: Any) -> TraceContext | None:
        if not isinstance(data, dict):
            return None
        return cls.parse(str(data.get("traceparent", "")), str(data.get("tracestate", "")))


_current_run: ContextVar[RunInfo | None] = ContextVar("koboi_current_run", default=None)


def current_run() -> RunInfo | None:
    """The run executing in this task (None outside a run)."""
    return _current_run.get()


def current_trace() -> TraceContext | None:
    """The trace context of the run executing in this task (None outside a run)."""
    run = _current_run.get()
    return run.trace if run is not None else None


@contextlib.contextmanager
def running(run: RunInfo) -> Iterator[None]:
    """Make ``run`` the current run for the block (the loop's side of the seam)."""
    token = _current_run.set(run)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # closed from another context: nothing to undo
            _current_run.reset(token)
