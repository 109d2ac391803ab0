"""Spans and metrics of runs, derived from the kernel's seams: no plugin is named here.

One :class:`Telemetry` interceptor per agent. It is the last interceptor
(highest priority number), so it sees the response and the result every other
interceptor settled on, and its spans start and end closest to the work:

- ``invoke_agent {agent}`` (INTERNAL): one per run, from ``on_run_start`` (or the
  first seam that sees the run) to ``run_finished``. Its parent is the span that is
  current where the run starts (the ``execute_tool`` span of the call that started a
  sub-agent), else the run's W3C trace context: a caller's ``traceparent`` is the
  remote parent; a trace the kernel started for the run (``started_here``) makes
  this span the root, with the context's own ids, so the journal's
  ``run_started.trace`` names it.
- ``chat {model}`` (CLIENT): one per model call, from ``model_call_started`` to
  ``after_model_call`` (or ``model_call_failed``); side calls too
  (``side_call_started`` to ``side_call_finished``, with ``koboi.side_call.purpose``:
  a summary, a retrieval's query rewrite, a routing decision).
- ``execute_tool {tool}`` (INTERNAL): one per tool call, from ``admit_tool_call``
  (after every decision) to ``after_tool_call``, with the governance verdict of
  every stage (``tool_call_started.decision``); a refused call is a span of its
  own, with the stage that refused it.

Everything else a run journals lands on the current span as an event: approvals,
provider retries and failovers, budgets, context added, plugin events (by type;
their data only when contents are captured). While a model call or a tool call
runs, its span is OpenTelemetry's current span in that task, so an outbound
request (koboi-http), a sub-agent and any code instrumented with OpenTelemetry
nest under it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from koboi import journal as J
from koboi.interceptors import Interceptor, PendingToolCall, RunInfo, Verdict
from koboi.logs import get_logger
from koboi.secrets import mask_secrets
from koboi_otel import semconv as A
from koboi_otel.content import input_messages, masked_json, masked_text, output_messages
from koboi_otel.metrics import Instruments
from koboi_otel.settings import RUN_STATE as STATE

if TYPE_CHECKING:
    from koboi.messages import ModelRequest, ModelResponse
    from koboi.store import JournalEvent
    from koboi.tools import ToolResult
    from koboi.tracing import TraceContext
    from koboi_otel.exporting import Pipeline
    from koboi_otel.settings import TelemetrySettings

log = get_logger("koboi.otel")

#: Outcomes that are an error of the run (a refusal or a suspension is not).
_FAILED_OUTCOMES = frozenset({"failed", "cancelled", "budget_exceeded", "max_iterations"})
#: How long an error description on a span may get.
_ERROR_CHARS = 300


def _task() -> int:
    return anyio.get_current_task().id


@dataclass
class _Open:
    """A span this run has open, and the context to go back to when it ends."""

    span: Span
    started: float
    previous: otel_context.Context | None = None
    task: int | None = None


@dataclass
class _RunTrace:
    """What the telemetry of one run keeps (``run.state[STATE]``)."""

    run: _Open
    agent: str
    session_id: str
    provider: str = ""
    model: str = ""
    chat: _Open | None = None
    chat_step: int = 0
    request: ModelRequest | None = None
    tools: dict[str, _Open] = field(default_factory=dict)
    side_calls: dict[tuple[str, str], _Open] = field(default_factory=dict)


class Telemetry(Interceptor):
    """Traces and measures every run of the agent it is registered for."""

    name = "telemetry"
    #: Last of all: the response and result every other interceptor settled on, and
    #: spans that start and end closest to the work.
    priority = 1_000_000

    def __init__(self, settings: TelemetrySettings, pipeline: Pipeline) -> None:
        from koboi_otel._version import __version__

        self.settings = settings
        self.pipeline = pipeline
        self.tracer = pipeline.tracer_provider.get_tracer("koboi", __version__)
        self.metrics = Instruments.of(pipeline)
        self.capture = settings.capture_content
        self.limit = settings.max_content_chars

    # -- the run ------------------------------------------------------------------

    async def on_run_start(self, run: RunInfo) -> None:
        traced = self._trace(run)
        if traced.run.task is None:
            traced.run.previous = _enter(traced.run.span)
            traced.run.task = _task()
        return None

    def _trace(self, run: RunInfo) -> _RunTrace:
        """The run's telemetry, its ``invoke_agent`` span started on first sight."""
        found: _RunTrace | None = run.state.get(STATE)
        if found is not None:
            return found
        agent = run.config.agent.name
        parent = self._parent_of(run)
        attributes = {
            A.OPERATION: "invoke_agent",
            A.AGENT_NAME: agent,
            A.CONVERSATION_ID: run.session_id,
            A.RUN_RESUMED: run.resumed,
        }
        span = self._start(f"invoke_agent {agent}", parent, SpanKind.INTERNAL, attributes)
        traced = _RunTrace(_Open(span, time.perf_counter()), agent, run.session_id)
        run.state[STATE] = traced
        return traced

    def _parent_of(self, run: RunInfo) -> otel_context.Context | _Root:
        """Where a run's span hangs: see the module's doc."""
        trace_context: TraceContext | None = run.trace
        current = trace.get_current_span()
        here = current.get_span_context()
        same = trace_context is None or format(here.trace_id, "032x") == trace_context.trace_id
        if here.is_valid and current.is_recording() and same:
            return otel_context.get_current()  # a sub-agent, under its parent's tool span
        if trace_context is None:
            return otel_context.Context()
        if trace_context.started_here and not self._claimed(trace_context):
            return _Root(int(trace_context.trace_id, 16), int(trace_context.span_id, 16))
        remote = SpanContext(
            int(trace_context.trace_id, 16),
            int(trace_context.span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(int(trace_context.flags, 16)),
            trace_state=_trace_state(trace_context.tracestate),
        )
        return trace.set_span_in_context(NonRecordingSpan(remote), otel_context.Context())

    def _claimed(self, trace_context: TraceContext) -> bool:
        """Whether a run already took this context's span id (its sub-agents share it)."""
        key = (trace_context.trace_id, trace_context.span_id)
        if key in _CLAIMED:
            return True
        _CLAIMED[key] = None
        if len(_CLAIMED) > 4096:  # keep the last few thousand: enough to see siblings
            for old in list(_CLAIMED)[:1024]:
                del _CLAIMED[old]
        return False

    def _start(
        self,
        name: str,
        parent: otel_context.Context | _Root,
        kind: SpanKind,
        attributes: Mapping[str, Any],
    ) -> Span:
        if isinstance(parent, _Root):
            self.pipeline.ids.force(parent.trace_id, parent.span_id)
            return self.tracer.start_span(
                name, context=otel_context.Context(), kind=kind, attributes=attributes
            )
        return self.tracer.start_span(name, context=parent, kind=kind, attributes=attributes)

    def _child(
        self, traced: _RunTrace, name: str, kind: SpanKind, attributes: Mapping[str, Any]
    ) -> Span:
        """A span under what is current in this task when it belongs to the run, else under
        the run's span."""
        current = trace.get_current_span()
        if current.is_recording() and _same_trace(current, traced.run.span):
            parent = otel_context.get_current()
        else:
            parent = trace.set_span_in_context(traced.run.span)
        return self.tracer.start_span(name, context=parent, kind=kind, attributes=attributes)

    # -- model calls ----------------------------------------------------------------

    async def after_model_call(self, response: ModelResponse, run: RunInfo) -> None:
        traced: _RunTrace | None = run.state.get(STATE)
        if traced is None or traced.chat is None:
            return None
        chat, traced.chat = traced.chat, None
        usage = response.usage
        span = chat.span
        model = response.model or traced.model
        span.set_attributes(
            {
                A.RESPONSE_MODEL: model,
                A.FINISH_REASONS: [response.finish_reason],
                A.INPUT_TOKENS: usage.input_tokens,
                A.OUTPUT_TOKENS: usage.output_tokens,
            }
        )
        if usage.cache_read_tokens:
            span.set_attribute(A.CACHE_READ_TOKENS, usage.cache_read_tokens)
        if usage.cache_write_tokens:
            span.set_attribute(A.CACHE_WRITE_TOKENS, usage.cache_write_tokens)
        if response.cost_usd is not None:
            span.set_attribute(A.COST, response.cost_usd)
        if self.capture:
            span.set_attribute(
                A.OUTPUT_MESSAGES, masked_json(output_messages(response), self.limit)
            )
        span.end()
        _leave(chat)
        self.metrics.model_call(
            traced,
            model,
            usage.input_tokens,
            usage.output_tokens,
            time.perf_counter() - chat.started,
            response.cost_usd,
            error=None,
        )
        return None

    def _chat_started(self, traced: _RunTrace, step: int, data: Mapping[str, Any]) -> None:
        attributes: dict[str, Any] = {
            A.OPERATION: "chat",
            A.PROVIDER: traced.provider or "koboi",
            A.REQUEST_MODEL: traced.model,
            A.CONVERSATION_ID: traced.session_id,
            A.STEP: step,
        }
        rewritten = data.get("rewritten_by")
        if isinstance(rewritten, list) and rewritten:
            attributes[A.REWRITTEN_BY] = [str(n) for n in rewritten]
        span = self._child(traced, f"chat {traced.model}".strip(), SpanKind.CLIENT, attributes)
        if self.capture and traced.request is not None:
            span.set_attribute(
                A.INPUT_MESSAGES, masked_json(input_messages(traced.request.messages), self.limit)
            )
            traced.request = None
        opened = _Open(span, time.perf_counter())
        opened.previous, opened.task = _enter(span), _task()
        traced.chat, traced.chat_step = opened, step

    def _chat_failed(self, traced: _RunTrace, data: Mapping[str, Any]) -> None:
        chat, traced.chat = traced.chat, None
        if chat is None:
            return
        _fail(chat.span, "model_call_failed", str(data.get("error", "")))
        chat.span.end()
        _leave(chat)
        self.metrics.model_call(
            traced,
            traced.model,
            0,
            0,
            time.perf_counter() - chat.started,
            None,
            error="model_call_failed",
        )

    # -- side calls -----------------------------------------------------------------

    def _side_started(self, traced: _RunTrace, data: Mapping[str, Any]) -> None:
        purpose = str(data.get("purpose", ""))
        attributes = {
            A.OPERATION: "chat",
            A.PROVIDER: traced.provider or "koboi",
            A.REQUEST_MODEL: traced.model,
            A.CONVERSATION_ID: traced.session_id,
            A.SIDE_CALL_PURPOSE: purpose,
            A.STEP: int(data.get("step", 0)),
        }
        span = self._child(traced, f"chat {traced.model}".strip(), SpanKind.CLIENT, attributes)
        traced.side_calls[(purpose, str(data.get("key", "")))] = _Open(span, time.perf_counter())

    def _side_ended(self, traced: _RunTrace, kind: str, data: Mapping[str, Any]) -> None:
        key = (str(data.get("purpose", "")), str(data.get("key", "")))
        opened = traced.side_calls.pop(key, None)
        if opened is None:
            return
        span = opened.span
        response = data.get("response")
        input_tokens = output_tokens = 0
        cost = None
        if kind == J.SIDE_CALL_FAILED:
            _fail(span, "side_call_failed", str(data.get("error", "")))
        elif isinstance(response, Mapping):
            usage = response.get("usage") or {}
            input_tokens = int(usage.get("input_tokens", 0) or 0)
            output_tokens = int(usage.get("output_tokens", 0) or 0)
            raw_cost = response.get("cost_usd")
            cost = float(raw_cost) if isinstance(raw_cost, int | float) else None
            span.set_attributes(
                {
                    A.RESPONSE_MODEL: str(response.get("model") or traced.model),
                    A.FINISH_REASONS: [str(response.get("finish_reason", "stop"))],
                    A.INPUT_TOKENS: input_tokens,
                    A.OUTPUT_TOKENS: output_tokens,
                }
            )
            if self.capture:
                span.set_attribute(
                    A.OUTPUT_MESSAGES, masked_json(output_messages(response), self.limit)
                )
        span.end()
        self.metrics.model_call(
            traced,
            traced.model,
            input_tokens,
            output_tokens,
            time.perf_counter() - opened.started,
            cost,
            error="side_call_failed" if kind == J.SIDE_CALL_FAILED else None,
            purpose=key[0],
        )

    # -- tool calls -----------------------------------------------------------------

    async def admit_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
        """Every stage has decided: the call runs now. Its span starts (this is no stage:
        it never returns a verdict)."""
        traced = self._trace(run)
        tool = pending.tool
        attributes = {
            A.OPERATION: "execute_tool",
            A.TOOL_NAME: tool.name,
            A.TOOL_CALL_ID: pending.call.id,
            A.TOOL_TYPE: "function",
            A.CONVERSATION_ID: traced.session_id,
            A.TOOL_RISK: tool.risk.value,
            A.TOOL_IDEMPOTENT: tool.idempotent,
            A.TOOL_VERDICT: "allow",
            A.STEP: pending.step,
        }
        span = self._child(traced, f"execute_tool {tool.name}", SpanKind.INTERNAL, attributes)
        opened = _Open(span, time.perf_counter())
        opened.previous, opened.task = _enter(span), _task()
        traced.tools[pending.call.id] = opened
        return None

    async def after_tool_call(
        self, pending: PendingToolCall, result: ToolResult, run: RunInfo
    ) -> None:
        traced: _RunTrace | None = run.state.get(STATE)
        opened = traced.tools.pop(pending.call.id, None) if traced is not None else None
        if traced is None or opened is None:
            return None
        span = opened.span
        outcome = "error" if result.is_error else "ok"
        span.set_attribute(A.TOOL_OUTCOME, outcome)
        if result.is_error:
            _fail(span, "tool_error", result.content)
        if self.capture:
            span.set_attribute(A.TOOL_RESULT, masked_text(result.content, self.limit))
        span.end()
        _leave(opened)
        self.metrics.tool_call(
            traced, pending.tool.name, "allow", outcome, time.perf_counter() - opened.started
        )
        return None

    def _tool_started(self, traced: _RunTrace, data: Mapping[str, Any]) -> None:
        opened = traced.tools.get(str(data.get("call_id", "")))
        if opened is None:
            return
        span = opened.span
        decisions = data.get("decision") or []
        span.set_attribute(
            A.TOOL_DECISION,
            [
                f"{d.get('stage', '')}:{d.get('action', '')}"
                for d in decisions
                if isinstance(d, Mapping)
            ],
        )
        rewritten = data.get("rewritten_by")
        if isinstance(rewritten, list) and rewritten:
            span.set_attribute(A.REWRITTEN_BY, [str(n) for n in rewritten])
        if self.capture:
            span.set_attribute(A.TOOL_ARGUMENTS, masked_json(data.get("arguments", {}), self.limit))

    def _tool_refused(self, traced: _RunTrace, data: Mapping[str, Any]) -> None:
        name = str(data.get("name", ""))
        stage = str(data.get("stage", ""))
        attributes = {
            A.OPERATION: "execute_tool",
            A.TOOL_NAME: name,
            A.TOOL_CALL_ID: str(data.get("call_id", "")),
            A.TOOL_TYPE: "function",
            A.CONVERSATION_ID: traced.session_id,
            A.TOOL_VERDICT: "deny",
            A.TOOL_REFUSED_BY: stage,
            A.TOOL_OUTCOME: "refused",
            A.STEP: int(data.get("step", 0)),
        }
        span = self._child(traced, f"execute_tool {name}", SpanKind.INTERNAL, attributes)
        _fail(span, "refused", str(data.get("reason", "")))
        span.end()
        self.metrics.tool_call(traced, name, "deny", "refused", 0.0, stage=stage)

    def _tool_suspended(self, traced: _RunTrace, data: Mapping[str, Any]) -> None:
        opened = traced.tools.pop(str(data.get("call_id", "")), None)
        if opened is None:
            return
        opened.span.set_attribute(A.TOOL_OUTCOME, "suspended")
        opened.span.add_event(
            "koboi.tool.suspended", {"koboi.suspension.kind": str(data.get("kind", ""))}
        )
        opened.span.end()
        _leave(opened)
        self.metrics.tool_call(
            traced,
            str(data.get("name", "")),
            "allow",
            "suspended",
            time.perf_counter() - opened.started,
        )

    # -- the journal ----------------------------------------------------------------

    async def on_event(self, event: JournalEvent, run: RunInfo) -> None:
        kind = event.type
        if kind == J.RUN_FINISHED:
            self._finished(run, event.data)
            return
        traced = self._trace(run)
        data = event.data
        if kind == J.MODEL_CALL_STARTED:
            self._chat_started(traced, int(data.get("step", 0)), data)
        elif kind == J.TOOL_CALL_STARTED:
            self._tool_started(traced, data)
        elif kind == J.TOOL_CALL_REFUSED:
            self._tool_refused(traced, data)
        elif kind == J.TOOL_CALL_SUSPENDED:
            self._tool_suspended(traced, data)
        elif kind == J.MODEL_CALL_FAILED:
            self._chat_failed(traced, data)
        elif kind == J.SIDE_CALL_STARTED:
            self._side_started(traced, data)
        elif kind in (J.SIDE_CALL_FINISHED, J.SIDE_CALL_FAILED):
            self._side_ended(traced, kind, data)
        elif kind in (J.RUN_STARTED, J.RUN_RESUMED):
            self._begun(traced, kind, data)
        elif kind == J.TOOL_CALL_INTERRUPTED:
            self._in_doubt(traced, data)
        elif kind != J.MODEL_CALL_FINISHED and kind != J.TOOL_CALL_FINISHED:
            self._note(traced, kind, data)

    def _begun(self, traced: _RunTrace, kind: str, data: Mapping[str, Any]) -> None:
        span = traced.run.span
        model = data.get("model")
        if isinstance(model, Mapping):
            traced.provider = str(model.get("provider", "") or "")
            traced.model = str(model.get("model", "") or "")
        attributes: dict[str, Any] = {A.PROVIDER: traced.provider or "koboi"}
        if traced.model:
            attributes[A.REQUEST_MODEL] = traced.model
        if kind == J.RUN_STARTED:
            attributes[A.RUN_KIND] = str(data.get("kind", "message"))
            if data.get("runner"):
                attributes[A.RUNNER] = str(data["runner"])
            if data.get("autonomous"):
                attributes[A.AUTONOMOUS] = True
        span.set_attributes(attributes)
        if self.capture and kind == J.RUN_STARTED and data.get("input"):
            span.set_attribute(
                A.INPUT_MESSAGES,
                masked_json(
                    [{"role": "user", "parts": [{"type": "text", "content": data["input"]}]}],
                    self.limit,
                ),
            )

    def _in_doubt(self, traced: _RunTrace, data: Mapping[str, Any]) -> None:
        name, policy = str(data.get("name", "")), str(data.get("policy", ""))
        traced.run.span.add_event(
            "koboi.tool.in_doubt",
            {
                A.TOOL_NAME: name,
                A.TOOL_CALL_ID: str(data.get("call_id", "")),
                "koboi.policy": policy,
            },
        )
        self.metrics.in_doubt(traced, name, policy)

    def _note(self, traced: _RunTrace, kind: str, data: Mapping[str, Any]) -> None:
        """Anything else the run journals: an event on the span current in this task."""
        current = trace.get_current_span()
        span = (
            current
            if current.is_recording() and _same_trace(current, traced.run.span)
            else traced.run.span
        )
        attributes: dict[str, Any] = {}
        for key in _NOTE_KEYS.get(kind, ()):
            value = data.get(key)
            if isinstance(value, str | bool | int | float):
                attributes[f"koboi.{key}"] = (
                    mask_secrets(value) if isinstance(value, str) else value
                )
        if self.capture and J.is_plugin_event(kind):
            attributes["koboi.data"] = masked_json(dict(data), self.limit)
        span.add_event(kind, attributes)

    def _finished(self, run: RunInfo, data: Mapping[str, Any]) -> None:
        traced = self._trace(run)
        for opened in [*traced.tools.values(), *traced.side_calls.values()]:
            opened.span.end()  # a call the run ended without (a cancellation)
        if traced.chat is not None:
            traced.chat.span.end()
        span = traced.run.span
        outcome = str(data.get("outcome", ""))
        usage = data.get("usage") or {}
        cost = data.get("cost_usd")
        attributes: dict[str, Any] = {
            A.RUN_OUTCOME: outcome,
            A.RUN_STEPS: int(data.get("steps", 0) or 0),
            A.INPUT_TOKENS: int(usage.get("input_tokens", 0) or 0),
            A.OUTPUT_TOKENS: int(usage.get("output_tokens", 0) or 0),
        }
        if isinstance(cost, int | float):
            attributes[A.COST] = float(cost)
        if data.get("refused_by"):
            attributes[A.RUN_REFUSED_BY] = str(data["refused_by"])
        span.set_attributes(attributes)
        if outcome in _FAILED_OUTCOMES:
            _fail(span, outcome, str(data.get("error") or ""))
        if self.capture and data.get("output"):
            span.set_attribute(
                A.OUTPUT_MESSAGES,
                masked_json(
                    [{"role": "assistant", "parts": [{"type": "text", "content": data["output"]}]}],
                    self.limit,
                ),
            )
        span.end()
        _leave(traced.run)
        self.metrics.run(traced, outcome, time.perf_counter() - traced.run.started)
        run.state.pop(STATE, None)


class CapturingTelemetry(Telemetry):
    """:class:`Telemetry` that also keeps each model request for the span's input messages
    (``telemetry.capture_content``): one more seam per step, only when asked for."""

    async def before_model_call(self, request: ModelRequest, run: RunInfo) -> None:
        self._trace(run).request = request
        return None


@dataclass(frozen=True)
class _Root:
    """A root span with these ids (a trace this process started for the run)."""

    trace_id: int
    span_id: int


#: (trace id, span id) of the trace contexts whose span id a run's root span took.
_CLAIMED: dict[tuple[str, str], None] = {}

#: The data of kernel events worth an attribute on their span event (never contents).
_NOTE_KEYS: dict[str, Sequence[str]] = {
    J.APPROVAL_REQUESTED: ("call_id", "name", "risk", "approval_id"),
    J.APPROVAL_DECIDED: ("call_id", "approved", "decided_by", "scope", "approval_id"),
    J.PROVIDER_EVENT: ("kind", "provider", "pool", "attempt", "delay_seconds", "next"),
    J.BUDGET_EXCEEDED: ("budget", "limit", "used"),
    J.CONTEXT_ADDED: ("source",),
    J.ANSWER_REPLACED: ("by",),
    J.RUN_CONTINUED: ("by",),
    J.TOOLS_CHANGED: (),
}


def _enter(span: Span) -> otel_context.Context:
    """Make ``span`` OpenTelemetry's current span in this task; return what was current.

    Never detached by token: :func:`_leave` attaches the previous context again, which
    is safe even when the span ends in another task (it then changes nothing here).
    """
    previous = otel_context.get_current()
    otel_context.attach(trace.set_span_in_context(span, previous))
    return previous


def _leave(opened: _Open) -> None:
    if opened.previous is not None and opened.task == _task():
        otel_context.attach(opened.previous)


def _fail(span: Span, error_type: str, description: str) -> None:
    span.set_attribute(A.ERROR_TYPE, error_type)
    text = " ".join(mask_secrets(description).split())
    span.set_status(Status(StatusCode.ERROR, text[:_ERROR_CHARS] or error_type))


def _same_trace(span: Span, other: Span) -> bool:
    return span.get_span_context().trace_id == other.get_span_context().trace_id


def _trace_state(tracestate: str) -> TraceState:
    if not tracestate:
        return TraceState()
    try:
        return TraceState.from_header([tracestate])
    except ValueError:  # an unusual member: the span still joins the trace
        return TraceState()
