"""The journal contract: event types, and folding a journal back into a conversation.

Every step of a run is committed to the session's journal: an event *before*
each model call and tool call begins and another *after* it ends. The journal
is the truth: the conversation of a session is what :func:`fold_messages`
rebuilds from it.

Event types and their data (all JSON):

=========================  ============================================================
``run_started``            ``input`` (user text), ``agent``, ``config_hash``, ``autonomous``
``model_call_started``     ``step``
``model_call_finished``    ``step``, ``response`` (a dumped ModelResponse)
``model_call_failed``      ``step``, ``error``, ``streamed`` (text delivered before it failed)
``provider_event``         ``step``, ``kind`` (retry, failover, breaker_open, breaker_closed,
                           cache_hit), details of the kind
``budget_exceeded``        ``step``, ``budget`` (max_total_tokens / max_cost_usd), ``limit``,
                           ``used``
``tool_call_refused``      ``step``, ``call_id``, ``name``, ``stage``, ``reason``
``approval_requested``     ``step``, ``call_id``, ``name``, ``risk``, ``arguments_hash``, ``reason``,
                           ``approval_id``, ``expires_at``
``approval_decided``       ``step``, ``call_id``, ``approval_id``, ``approved``, ``reason``,
                           ``decided_by``, ``scope``
``tool_call_started``      ``step``, ``call_id``, ``name``, ``arguments``, ``idempotent``,
                           ``decision`` (each stage that spoke: stage, action, reason)
``tool_call_finished``     ``step``, ``call_id``, ``name``, ``content``, ``is_error``
``tool_call_interrupted``  ``step``, ``call_id``, ``name``, ``policy`` (resume found it in doubt)
``run_resumed``            ``after_seq``, ``step``, ``holder``
``run_finished``           ``outcome``, ``output``, ``steps``, ``usage``, ``cost_usd``, ``error``
=========================  ============================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from koboi.messages import Message, ModelResponse, ToolCall, Usage

RUN_STARTED = "run_started"
MODEL_CALL_STARTED = "model_call_started"
MODEL_CALL_FINISHED = "model_call_finished"
MODEL_CALL_FAILED = "model_call_failed"
PROVIDER_EVENT = "provider_event"
BUDGET_EXCEEDED = "budget_exceeded"
TOOL_CALL_REFUSED = "tool_call_refused"
APPROVAL_REQUESTED = "approval_requested"
APPROVAL_DECIDED = "approval_decided"
TOOL_CALL_STARTED = "tool_call_started"
TOOL_CALL_FINISHED = "tool_call_finished"
TOOL_CALL_INTERRUPTED = "tool_call_interrupted"
RUN_RESUMED = "run_resumed"
RUN_FINISHED = "run_finished"

EVENT_TYPES = (
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
    TOOL_CALL_INTERRUPTED,
    RUN_RESUMED,
    RUN_FINISHED,
)

INTERRUPTED_RESULT = (
    "This tool call was interrupted before it reported a result; whether it took effect is "
    "unknown. Check the current state before trying again."
)


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
    #: Usage of the interrupted run so far.
    usage: Usage = field(default_factory=Usage)
    #: Cost of the interrupted run's model calls so far, at the configured prices.
    cost_usd: float = 0.0
    #: Every call of the last model response not yet answered in ``messages``, in the
    #: model's order, with the outcome the journal has for it (None when it has none).
    #: Non-empty only for an interrupted run.
    pending: list[PendingCall] = field(default_factory=list)
    #: How the last finished run ended (``completed``, ``failed``...), if any.
    last_outcome: str | None = None


def fold_messages(events: Iterable[Any]) -> list[Message]:
    """Rebuild the conversation (without the system prompt) from journal events.

    Each ``run_started`` adds the user message, each ``model_call_finished`` the
    assistant message, each ``tool_call_finished`` / ``tool_call_refused`` the
    tool result. A tool call the model made that has no recorded outcome (the
    process died while it ran) gets an "interrupted, outcome unknown" result, so
    the folded conversation is always well formed.
    """
    state = fold_state(events)
    return [*state.messages, *(result_message(p) for p in state.pending)]


def result_message(pending: PendingCall) -> Message:
    """The tool message answering ``pending``: its recorded outcome, else "interrupted"."""
    content, is_error = pending.outcome or (INTERRUPTED_RESULT, True)
    return Message.tool_result(pending.call, content, is_error=is_error)


def _outcome(kind: str, data: Mapping[str, Any]) -> tuple[str, bool]:
    if kind == TOOL_CALL_FINISHED:
        return str(data.get("content", "")), bool(data.get("is_error"))
    if kind == TOOL_CALL_INTERRUPTED:
        return INTERRUPTED_RESULT, True
    return str(data.get("reason", "refused")), True


def fold_state(events: Iterable[Any]) -> SessionState:
    """Fold a journal into a :class:`SessionState` (the inverse of what the loop wrote)."""
    state = SessionState()
    messages = state.messages
    # Calls of the last model response, in the model's order, with their outcomes.
    pending: dict[str, PendingCall] = {}

    def settle() -> None:
        messages.extend(result_message(p) for p in pending.values())
        pending.clear()

    for event in events:
        kind, data = event.type, event.data
        state.last_seq = event.seq
        if kind == RUN_STARTED:
            settle()
            messages.append(Message.user(str(data.get("input", ""))))
            state.interrupted, state.step, state.usage = True, 0, Usage()
            state.cost_usd = 0.0
        elif kind == MODEL_CALL_FINISHED:
            settle()
            response = ModelResponse.model_validate(data["response"])
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
            if entry is not None:
                entry.started = True
                entry.idempotent = bool(data.get("idempotent"))
        elif kind in (TOOL_CALL_FINISHED, TOOL_CALL_REFUSED, TOOL_CALL_INTERRUPTED):
            entry = pending.get(str(data.get("call_id")))
            if entry is not None:
                entry.outcome = _outcome(kind, data)
        elif kind == RUN_FINISHED:
            settle()
            state.interrupted = False
            state.last_outcome = str(data.get("outcome"))
    state.pending = list(pending.values())
    return state
