"""The journal contract: event types with their schemas, and folding a journal back.

Every step of a run is committed to the session's journal: an event *before*
each model call and tool call begins and another *after* it ends. The journal
is the truth: the conversation of a session is what :func:`fold_messages`
rebuilds from it.

Each kernel event type is an :class:`EventKind`: a ``str`` (``event.type ==
J.RUN_STARTED`` works) that also carries the event's schema, a ``TypedDict``.
Code that reads an event reads it through its kind, so a type checker knows
every field::

    if event.type == J.RUN_FINISHED:
        data = J.RUN_FINISHED.of(event)
        print(data["outcome"], data.get("error"))

``docs/events.md`` documents every schema; a test keeps the two in step and
checks that what the loop writes validates against them.

Plugins record events of their own, typed ``"<plugin id>.<name>"``
(:func:`is_plugin_event`); the kernel stores, shows and streams them, hands
them back to their plugin when a session continues, and otherwise leaves them
alone: an event of a plugin that is not installed survives untouched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, NotRequired, TypeVar, cast

from typing_extensions import TypedDict

from koboi.messages import Message, ModelRequest, ModelResponse, ToolCall, Usage

if TYPE_CHECKING:
    from koboi.store import SessionTotals

T = TypeVar("T")


class EventKind(str, Generic[T]):
    """A kernel event type: its name (the ``str`` itself) and its schema (``T``)."""

    schema: Any
    summary: str

    def __new__(cls, name: str, schema: Any, summary: str) -> EventKind[T]:
        kind = super().__new__(cls, name)
        kind.schema = schema
        kind.summary = summary
        return kind

    def of(self, event: Any) -> T:
        """The data of ``event`` (a :class:`~koboi.store.JournalEvent` of this kind), typed."""
        if event.type != self:
            raise ValueError(f"event {event.seq} is a {event.type!r} event, not {str(self)!r}")
        return cast(T, event.data)

    def data(self, data: Mapping[str, Any]) -> T:
        """``data`` (already known to be of this kind), typed."""
        return cast(T, data)


# ---------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------


class TraceData(TypedDict):
    """W3C trace context of a run (https://www.w3.org/TR/trace-context/)."""

    traceparent: str
    tracestate: NotRequired[str]


class DirectCallData(TypedDict):
    """The tool call a direct run makes (``agent.call_tool``)."""

    id: str
    name: str
    arguments: dict[str, Any]


class ToolDefinitionData(TypedDict):
    """A toolset's tool as the journal keeps it (``koboi.toolsets.tool_definition``):
    its own name, offered as ``<namespace>__<name>``."""

    name: str
    toolset: str
    namespace: NotRequired[str]
    description: str
    parameters: dict[str, Any]
    risk: str
    idempotent: bool
    planning: bool
    live_events: bool


class RunStartedData(TypedDict):
    """A run began: a new user message, or one governed tool call (``kind: tool_call``)."""

    input: str
    agent: str
    config_hash: str
    #: Nobody could approve anything (a job, a schedule, an A2A call).
    autonomous: bool
    #: ``message`` (the loop answers ``input``) or ``tool_call`` (``call`` runs alone).
    kind: NotRequired[Literal["message", "tool_call"]]
    call: NotRequired[DirectCallData]
    #: The names of the tools the run offered the model when it began.
    tools: NotRequired[list[str]]
    #: Toolset tools not offered because another tool has their name (``"toolset:tool"``).
    tools_skipped: NotRequired[list[str]]
    #: The toolsets' tools offered, defined, so the run can be replayed without its
    #: toolsets (a direct call: the called tool). Absent when no toolset offers a tool.
    toolset_tools: NotRequired[list[ToolDefinitionData]]
    #: The runner (``agent.runner``) when it is not the kernel's ``loop``.
    runner: NotRequired[str]
    trace: NotRequired[TraceData]
    #: What decides the model's answers besides the request (the provider's cache
    #: identity): request keys (side calls, rewritten requests) are hashed with it.
    model: NotRequired[dict[str, Any]]


class ModelCallStartedData(TypedDict):
    """A model call is about to be made."""

    step: int
    #: Interceptors that replaced the request (``before_model_call``), in order.
    rewritten_by: NotRequired[list[str]]
    #: The replaced request: its cache key and how it differs from the loop's own.
    request: NotRequired[dict[str, Any]]


class ModelCallFinishedData(TypedDict):
    """A model call answered: the whole response (a dumped :class:`ModelResponse`)."""

    step: int
    response: dict[str, Any]


class ModelCallFailedData(TypedDict):
    """A model call failed; ``streamed`` is the text delivered before it did."""

    step: int
    error: str
    streamed: NotRequired[str]


class ProviderEventData(TypedDict):
    """Something a provider did on the way to an answer (retry, failover, cache hit...).

    The details are the reporter's (``koboi.provider.report(kind, **details)``),
    beside ``step`` and ``kind``; those the kernel's pools, cache and HTTP providers
    report are listed here. A third-party provider may report keys of its own.
    """

    step: int
    kind: str
    #: The side call it happened in (absent: the run's own model call).
    purpose: NotRequired[str]
    #: The pool (``llm.pool``) and the provider in it.
    pool: NotRequired[str]
    provider: NotRequired[str]
    model: NotRequired[str]
    #: ``failover``: the provider asked next (None: no member is left).
    next: NotRequired[str | None]
    #: ``breaker_open``: the failures in a row, and how long the provider is skipped.
    failures: NotRequired[int]
    cooldown_seconds: NotRequired[float]
    #: ``retry``: the attempt that failed and the wait before the next.
    attempt: NotRequired[int]
    delay_seconds: NotRequired[float]
    #: What failed, in one line.
    reason: NotRequired[str]
    #: ``cache_hit``: the start of the response cache's key.
    key: NotRequired[str]


class BudgetExceededData(TypedDict):
    """A budget (``agent.max_total_tokens``, ``agent.max_cost_usd``, or for a run
    that has children ``agent.max_iterations``) was used up."""

    step: int
    budget: str
    limit: float
    used: float
    #: The session whose budget it was, when not this run's own: a parent's, which
    #: its child runs share.
    of_session: NotRequired[str]


class DecisionData(TypedDict):
    """What one stage of the decision pipeline said about a tool call."""

    stage: str
    action: str
    reason: NotRequired[str]


class ToolCallRefusedData(TypedDict):
    """A tool call was refused by a stage of the pipeline; the model reads ``reason``."""

    step: int
    call_id: str
    name: str
    stage: str
    reason: str


class ApprovalRequestedData(TypedDict):
    """A tool call waits for an approver's decision (until ``expires_at``)."""

    step: int
    call_id: str
    name: str
    risk: str
    arguments_hash: str
    reason: str
    approval_id: str
    expires_at: float


class ApprovalDecidedData(TypedDict):
    """The approver decided."""

    step: int
    call_id: str
    approval_id: str
    approved: bool
    reason: str
    decided_by: str
    scope: str


class ToolCallStartedData(TypedDict):
    """A tool call is about to run, after every decision."""

    step: int
    call_id: str
    name: str
    #: The arguments it runs with (after any rewrite by an interceptor).
    arguments: dict[str, Any]
    idempotent: bool
    decision: list[DecisionData]
    #: Interceptors that rewrote the model's arguments, and the hash of the originals.
    rewritten_by: NotRequired[list[str]]
    original_arguments_hash: NotRequired[str]


class ToolCallFinishedData(TypedDict):
    """A tool call ended: its result as the model reads it."""

    step: int
    call_id: str
    name: str
    content: str
    is_error: bool


class ToolCallSuspendedData(TypedDict):
    """A tool call suspended the run (``ctx.suspend``): it did nothing, and runs again with
    the reply when the run continues."""

    step: int
    call_id: str
    name: str
    reason: str
    kind: str
    data: dict[str, Any]


class ToolCallInterruptedData(TypedDict):
    """Resume found a started, unfinished, non-idempotent call: its outcome is unknown."""

    step: int
    call_id: str
    name: str
    policy: str


class SuspensionData(TypedDict):
    """What a suspended run waits for (raised by a tool with ``ctx.suspend``)."""

    reason: str
    kind: str
    data: dict[str, Any]
    #: The call that suspended the run (the first, when several did).
    call_id: NotRequired[str]
    name: NotRequired[str]
    step: NotRequired[int]
    #: Every call that suspended the run (parallel calls may each).
    calls: NotRequired[list[str]]


class RunResumedData(TypedDict):
    """A run continues: after its process died, or (``reply``) after it was suspended."""

    after_seq: int
    step: int
    holder: str | None
    reply: NotRequired[Any]
    trace: NotRequired[TraceData]


class ContextAddedData(TypedDict):
    """An interceptor added context that stays in the session (a system message)."""

    step: int
    text: str
    source: str


class AnswerReplacedData(TypedDict):
    """An interceptor replaced the final answer (``before_finish``)."""

    step: int
    by: str
    text: str


class RunContinuedData(TypedDict):
    """The run goes on with a user message: an interceptor's ``before_finish``, or a runner's
    ``RunHandle.add_message``."""

    step: int
    by: str
    message: str
    #: True when a runner added the message: only ``before_finish`` continuations count
    #: against ``agent.max_continuations``.
    runner: NotRequired[bool]


class SideCallStartedData(TypedDict):
    """A plugin asks the run's model something on the side (``run.model.complete``)."""

    step: int
    purpose: str
    #: The request's cache key: a side call with the same purpose and key is served
    #: from the journal on resume and replay.
    key: str


class SideCallFinishedData(TypedDict):
    """A side call answered."""

    step: int
    purpose: str
    key: str
    response: dict[str, Any]


class SideCallFailedData(TypedDict):
    """A side call failed."""

    step: int
    purpose: str
    key: str
    error: str


class ToolsChangedData(TypedDict):
    """The tools offered to the model changed between steps (a toolset's list changed)."""

    step: int
    tools: list[str]
    added: list[str]
    removed: list[str]
    skipped: NotRequired[list[str]]
    #: The added toolset tools, defined as in ``run_started.toolset_tools`` (absent: none).
    definitions: NotRequired[list[ToolDefinitionData]]


class RunFinishedData(TypedDict):
    """A run ended (whatever the outcome)."""

    outcome: str
    output: str
    steps: int
    usage: dict[str, Any]
    cost_usd: float
    error: str | None
    #: For ``refused``: the stage (interceptor) that refused the run.
    refused_by: NotRequired[str]
    #: For ``suspended``: what the run waits for.
    suspension: NotRequired[SuspensionData]


RUN_STARTED: EventKind[RunStartedData] = EventKind(
    "run_started", RunStartedData, "a run began (a user message, or one direct tool call)"
)
MODEL_CALL_STARTED: EventKind[ModelCallStartedData] = EventKind(
    "model_call_started", ModelCallStartedData, "a model call is about to be made"
)
MODEL_CALL_FINISHED: EventKind[ModelCallFinishedData] = EventKind(
    "model_call_finished", ModelCallFinishedData, "a model call answered"
)
MODEL_CALL_FAILED: EventKind[ModelCallFailedData] = EventKind(
    "model_call_failed", ModelCallFailedData, "a model call failed"
)
PROVIDER_EVENT: EventKind[ProviderEventData] = EventKind(
    "provider_event", ProviderEventData, "a retry, failover, breaker change or cache hit"
)
BUDGET_EXCEEDED: EventKind[BudgetExceededData] = EventKind(
    "budget_exceeded", BudgetExceededData, "a run's budget was used up"
)
TOOL_CALL_REFUSED: EventKind[ToolCallRefusedData] = EventKind(
    "tool_call_refused", ToolCallRefusedData, "a stage of the pipeline refused a tool call"
)
APPROVAL_REQUESTED: EventKind[ApprovalRequestedData] = EventKind(
    "approval_requested", ApprovalRequestedData, "a tool call waits for an approver"
)
APPROVAL_DECIDED: EventKind[ApprovalDecidedData] = EventKind(
    "approval_decided", ApprovalDecidedData, "the approver decided"
)
TOOL_CALL_STARTED: EventKind[ToolCallStartedData] = EventKind(
    "tool_call_started", ToolCallStartedData, "a tool call is about to run"
)
TOOL_CALL_FINISHED: EventKind[ToolCallFinishedData] = EventKind(
    "tool_call_finished", ToolCallFinishedData, "a tool call ended"
)
TOOL_CALL_SUSPENDED: EventKind[ToolCallSuspendedData] = EventKind(
    "tool_call_suspended", ToolCallSuspendedData, "a tool call suspended the run"
)
TOOL_CALL_INTERRUPTED: EventKind[ToolCallInterruptedData] = EventKind(
    "tool_call_interrupted", ToolCallInterruptedData, "resume found a call in doubt"
)
RUN_RESUMED: EventKind[RunResumedData] = EventKind(
    "run_resumed", RunResumedData, "a run continues after a crash or a suspension"
)
CONTEXT_ADDED: EventKind[ContextAddedData] = EventKind(
    "context_added", ContextAddedData, "context kept in the session was added"
)
ANSWER_REPLACED: EventKind[AnswerReplacedData] = EventKind(
    "answer_replaced", AnswerReplacedData, "an interceptor replaced the final answer"
)
RUN_CONTINUED: EventKind[RunContinuedData] = EventKind(
    "run_continued", RunContinuedData, "an interceptor continued the run with a message"
)
SIDE_CALL_STARTED: EventKind[SideCallStartedData] = EventKind(
    "side_call_started", SideCallStartedData, "a side model call is about to be made"
)
SIDE_CALL_FINISHED: EventKind[SideCallFinishedData] = EventKind(
    "side_call_finished", SideCallFinishedData, "a side model call answered"
)
SIDE_CALL_FAILED: EventKind[SideCallFailedData] = EventKind(
    "side_call_failed", SideCallFailedData, "a side model call failed"
)
TOOLS_CHANGED: EventKind[ToolsChangedData] = EventKind(
    "tools_changed", ToolsChangedData, "the tools offered to the model changed"
)
RUN_FINISHED: EventKind[RunFinishedData] = EventKind("run_finished", RunFinishedData, "a run ended")

EVENT_KINDS: tuple[EventKind[Any], ...] = (
    RUN_STARTED,
    MODEL_CALL_STARTED,
    MODEL_CALL_FINISHED,
    MODEL_CALL_FAILED,
    PROVIDER_EVENT,
    BUDGET_EXCEEDED,
    TOOL_CALL_REFUSED,
    APPROVAL_REQUESTED,
    APPROVAL_DECIDED,
    TOOL_CALL_STARTED,
    TOOL_CALL_FINISHED,
    TOOL_CALL_SUSPENDED,
    TOOL_CALL_INTERRUPTED,
    RUN_RESUMED,
    CONTEXT_ADDED,
    ANSWER_REPLACED,
    RUN_CONTINUED,
    SIDE_CALL_STARTED,
    SIDE_CALL_FINISHED,
    SIDE_CALL_FAILED,
    TOOLS_CHANGED,
    RUN_FINISHED,
)
EVENT_TYPES: tuple[str, ...] = tuple(str(kind) for kind in EVENT_KINDS)
KINDS_BY_NAME: dict[str, EventKind[Any]] = {str(kind): kind for kind in EVENT_KINDS}

INTERRUPTED_RESULT = (
    "This tool call was interrupted before it reported a result; whether it took effect is "
    "unknown. Check the current state before trying again."
)

_PLUGIN_EVENT = re.compile(r"^[a-z][a-z0-9_-]*\.[a-z0-9][a-z0-9_.-]*$")


def is_plugin_event(event_type: str) -> bool:
    """True for a plugin's own event type, ``"<plugin id>.<name>"`` (``weather.briefed``)."""
    return "." in event_type and _PLUGIN_EVENT.match(event_type) is not None


def check_plugin_event_type(event_type: str) -> str:
    """``event_type`` if it is a valid plugin event type, else a ValueError saying why."""
    if not isinstance(event_type, str) or not is_plugin_event(event_type):
        raise ValueError(
            f"plugin event type {event_type!r} must be '<plugin id>.<name>' in lower case "
            "(letters, digits, '_', '-', '.'), e.g. 'weather.briefed'"
        )
    return event_type


#: The keys of the audit records the kernel writes (``RunInfo.audit`` from the loop).
AUDIT_FIELDS: frozenset[str] = frozenset(
    {
        "action",
        "approval_id",
        "approved",
        "arguments",
        "arguments_hash",
        "call_id",
        "decided_by",
        "decision",
        "error",
        "interceptor",
        "method",
        "outcome",
        "phase",
        "reason",
        "result_chars",
        "risk",
        "sandbox",
        "scope",
        "session_id",
        "stage",
        "stages",
        "step",
        "tool",
    }
)


def field_names() -> frozenset[str]:
    """Every key the kernel writes in journal events (at any depth of their schemas and of
    the dumped messages, tool calls, usage and responses) and in its audit records.

    What a redactor may skip as a *key* (it still reads every value): the kernel's own
    field names are never secrets. A kernel test runs the loop and checks that every
    key it journals is here, so the two cannot drift.
    """
    names: set[str] = set(AUDIT_FIELDS)

    def walk(schema: Any) -> None:
        for name, annotation in getattr(schema, "__annotations__", {}).items():
            names.add(name)
            for inner in getattr(annotation, "__args__", ()) or ():
                if hasattr(inner, "__annotations__"):
                    walk(inner)

    for kind in EVENT_KINDS:
        walk(kind.schema)
    for nested in (TraceData, DirectCallData, DecisionData, SuspensionData):
        walk(nested)
    for model in (ModelRequest, ModelResponse, Message, ToolCall, Usage):
        names.update(model.model_fields)
    return frozenset(names)


# ---------------------------------------------------------------------------
# Folding
# ---------------------------------------------------------------------------


@dataclass
class PendingCall:
    """A tool call of the last model response, and what the journal knows about it."""

    call: ToolCall
    step: int
    started: bool = False
    idempotent: bool = False
    #: (content, is_error) when the journal already has the call's outcome.
    outcome: tuple[str, bool] | None = None
    #: The ``approval_requested`` data of an approval still waiting for its decision.
    approval: Mapping[str, Any] | None = None
    #: The call suspended the run (``ctx.suspend``): it runs again when the run continues.
    suspended: bool = False
    #: The reply the run was continued with, for a call that suspended it.
    reply: Any = None
    #: The call is a direct one (``agent.call_tool``), not the model's.
    direct: bool = False


@dataclass
class SessionState:
    """What a session's journal says, folded: enough to continue or resume it."""

    #: The conversation so far (without the system prompt); for an interrupted
    #: run, without results for ``pending`` calls.
    messages: list[Message] = field(default_factory=list)
    #: Sequence number of the last event.
    last_seq: int = 0
    #: True when a run started and has not finished (the process died or was killed).
    interrupted: bool = False
    #: Model calls finished in the interrupted run.
    step: int = 0
    #: Usage of the interrupted run so far (side calls included).
    usage: Usage = field(default_factory=Usage)
    #: Cost of the interrupted run's model calls so far, at the configured prices.
    cost_usd: float = 0.0
    #: Every call of the last model response not yet answered in ``messages``, in the
    #: model's order, with the outcome the journal has for it (None when it has none).
    #: Non-empty only for an interrupted or suspended run.
    pending: list[PendingCall] = field(default_factory=list)
    #: How the last finished run ended (``completed``, ``failed``...), if any.
    last_outcome: str | None = None
    #: What the last run waits for, when it ended ``suspended``.
    suspended: Mapping[str, Any] | None = None
    #: The input of the run in progress (interrupted) or suspended.
    input: str = ""
    #: The run in progress is a direct tool call (``agent.call_tool``).
    direct: bool = False
    #: Side calls of the run in progress that answered: ``(purpose, key) -> response``.
    side_calls: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: Tool calls of the run in progress that no model asked for (a runner's own,
    #: ``RunHandle.call_tool``), by call id, with what the journal has for each.
    runner_calls: dict[str, PendingCall] = field(default_factory=dict)
    #: Every plugin event of the session, in journal order (see :func:`is_plugin_event`).
    plugin_events: list[Any] = field(default_factory=list)
    #: The trace context of the run in progress (or of the last run).
    trace: Mapping[str, Any] | None = None
    #: The runner of the run in progress, when not the kernel's ``loop``.
    runner: str | None = None
    #: The seq of the ``run_started`` of the run in progress (or of the last run).
    run_seq: int = 0
    #: How many times ``before_finish`` continued the run in progress: a resumed run
    #: counts on from here, so it never exceeds ``agent.max_continuations``.
    continuations: int = 0


def fold_messages(events: Iterable[Any]) -> list[Message]:
    """Rebuild the conversation (without the system prompt) from journal events.

    Each ``run_started`` adds the user message, each ``model_call_finished`` the
    assistant message, each ``tool_call_finished`` / ``tool_call_refused`` the
    tool result, each ``context_added`` a system message and each ``run_continued``
    a user message. A tool call the model made that has no recorded outcome (the
    process died while it ran) gets an "interrupted, outcome unknown" result, so
    the folded conversation is always well formed.
    """
    state = fold_state(events)
    return [*state.messages, *(result_message(p) for p in state.pending)]


def totals_of(events: Iterable[Any]) -> SessionTotals:
    """What the runs of ``events`` used: :class:`koboi.store.SessionTotals`.

    ``events`` are journal events (or events about to be appended: anything with
    ``type`` and ``data``). Each ``run_started`` is a run, each
    ``model_call_finished`` a model call; the usage and ``cost_usd`` of every
    ``model_call_finished`` and ``side_call_finished`` response are added (a side
    call answered from the journal on resume is not journaled again, so nothing
    counts twice). Totals of consecutive batches add up to the totals of the whole.
    """
    from koboi.store import SessionTotals

    runs = calls = input_tokens = output_tokens = 0
    cost = 0.0
    for event in events:
        kind = event.type
        if kind == RUN_STARTED:
            runs += 1
            continue
        if kind != MODEL_CALL_FINISHED and kind != SIDE_CALL_FINISHED:
            continue
        if kind == MODEL_CALL_FINISHED:
            calls += 1
        response = event.data.get("response")
        if not isinstance(response, Mapping):
            continue
        usage = response.get("usage")
        if isinstance(usage, Mapping):
            input_tokens += _count(usage.get("input_tokens"))
            output_tokens += _count(usage.get("output_tokens"))
        spent = response.get("cost_usd")
        if isinstance(spent, int | float) and not isinstance(spent, bool):
            cost += float(spent)
    return SessionTotals(runs, calls, input_tokens, output_tokens, cost)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def result_message(pending: PendingCall) -> Message:
    """The tool message answering ``pending``: its recorded outcome, else "interrupted"."""
    content, is_error = pending.outcome or (INTERRUPTED_RESULT, True)
    return Message.tool_result(pending.call, content, is_error=is_error)


def fold_state(events: Iterable[Any]) -> SessionState:
    """Fold a journal into a :class:`SessionState` (the inverse of what the loop wrote)."""
    state = SessionState()
    messages = state.messages
    # Calls of the last model response (or the direct call), in order, with outcomes.
    pending: dict[str, PendingCall] = {}

    def settle() -> None:
        messages.extend(result_message(p) for p in pending.values() if not p.direct)
        pending.clear()

    for event in events:
        kind, data = event.type, event.data
        state.last_seq = event.seq
        if kind == RUN_STARTED:
            settle()
            started = RUN_STARTED.data(data)
            state.interrupted, state.step, state.usage = True, 0, Usage()
            state.cost_usd, state.suspended, state.side_calls = 0.0, None, {}
            state.runner_calls = {}
            state.continuations = 0
            state.input = str(started.get("input", ""))
            state.trace = started.get("trace")
            state.runner = started.get("runner")
            state.run_seq = event.seq
            made = started.get("call") if started.get("kind") == "tool_call" else None
            state.direct = made is not None
            if made is not None:
                direct = ToolCall(
                    id=str(made["id"]), name=str(made["name"]), arguments=made["arguments"]
                )
                pending[direct.id] = PendingCall(direct, 0, direct=True)
            else:
                messages.append(Message.user(state.input))
        elif kind == MODEL_CALL_FINISHED:
            settle()
            response = ModelResponse.model_validate(MODEL_CALL_FINISHED.data(data)["response"])
            messages.append(response.message)
            state.step = int(data.get("step", state.step + 1))
            state.usage = state.usage + response.usage
            state.cost_usd += response.cost_usd or 0.0
            for call in response.message.tool_calls:
                pending[call.id] = PendingCall(call, state.step)
        elif kind == APPROVAL_REQUESTED:
            entry = pending.get(str(data.get("call_id")))
            if entry is not None:
                entry.approval = data
        elif kind == APPROVAL_DECIDED:
            entry = pending.get(str(data.get("call_id")))
            if entry is not None:
                entry.approval = None
        elif kind == TOOL_CALL_STARTED:
            entry = pending.get(str(data.get("call_id")))
            if entry is None:
                entry = _runner_call(state, data)
            entry.started = True
            entry.idempotent = bool(data.get("idempotent"))
        elif kind == TOOL_CALL_SUSPENDED:
            entry = pending.get(str(data.get("call_id")))
            if entry is not None:
                entry.suspended = True
        elif kind in (TOOL_CALL_FINISHED, TOOL_CALL_REFUSED, TOOL_CALL_INTERRUPTED):
            entry = pending.get(str(data.get("call_id")))
            if entry is None:
                entry = _runner_call(state, data)
            entry.outcome = _outcome(kind, data)
            entry.suspended = False
        elif kind == CONTEXT_ADDED:
            settle()
            messages.append(Message.system(str(CONTEXT_ADDED.data(data)["text"])))
        elif kind == ANSWER_REPLACED:
            text = str(ANSWER_REPLACED.data(data)["text"])
            if messages and messages[-1].role == "assistant":
                messages[-1] = messages[-1].model_copy(update={"content": text})
        elif kind == RUN_CONTINUED:
            settle()
            continued = RUN_CONTINUED.data(data)
            messages.append(Message.user(str(continued["message"])))
            if not continued.get("runner"):
                state.continuations += 1
        elif kind == SIDE_CALL_FINISHED:
            side = SIDE_CALL_FINISHED.data(data)
            state.side_calls[(str(side["purpose"]), str(side["key"]))] = side["response"]
            answered = ModelResponse.model_validate(side["response"])
            state.usage = state.usage + answered.usage
            state.cost_usd += answered.cost_usd or 0.0
        elif kind == RUN_RESUMED:
            resumed = RUN_RESUMED.data(data)
            if state.suspended is not None:
                # Continued after a suspension: the suspended calls did nothing, and run
                # again with the reply (even after another crash).
                for entry in pending.values():
                    if entry.suspended:
                        entry.started, entry.reply = False, resumed.get("reply")
                state.suspended = None
            state.interrupted = True
            if resumed.get("trace"):
                state.trace = resumed.get("trace")
        elif kind == RUN_FINISHED:
            finished = RUN_FINISHED.data(data)
            state.last_outcome = str(finished.get("outcome"))
            state.interrupted = False
            suspension = finished.get("suspension")
            if state.last_outcome == "suspended" and suspension is not None:
                state.suspended = suspension
                for call_id in _suspended_calls(suspension):
                    entry = pending.get(call_id)
                    if entry is not None and entry.outcome is None:
                        entry.suspended = True
                continue
            settle()
            state.direct = False
        elif is_plugin_event(kind):
            state.plugin_events.append(event)
    state.pending = list(pending.values())
    return state


def _runner_call(state: SessionState, data: Mapping[str, Any]) -> PendingCall:
    """The entry of a call no model response asked for (a runner's own call)."""
    call_id = str(data.get("call_id"))
    entry = state.runner_calls.get(call_id)
    if entry is None:
        arguments = data.get("arguments")
        call = ToolCall(
            id=call_id,
            name=str(data.get("name", "")),
            arguments=dict(arguments) if isinstance(arguments, Mapping) else {},
        )
        entry = PendingCall(call, int(data.get("step", 0)))
        state.runner_calls[call_id] = entry
    return entry


def _suspended_calls(suspension: Mapping[str, Any]) -> Sequence[str]:
    calls = suspension.get("calls")
    if isinstance(calls, list):
        return [str(c) for c in calls]
    call_id = suspension.get("call_id")
    return [str(call_id)] if call_id else []


def _outcome(kind: str, data: Mapping[str, Any]) -> tuple[str, bool]:
    if kind == TOOL_CALL_FINISHED:
        return str(data.get("content", "")), bool(data.get("is_error"))
    if kind == TOOL_CALL_INTERRUPTED:
        return INTERRUPTED_RESULT, True
    return str(data.get("reason", "refused")), True
