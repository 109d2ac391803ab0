"""The agent loop: model call -> tool calls -> results -> next model call.

Every step goes through the journal: an event is committed before each model
call and tool call begins and after it ends, so the journal alone tells what
happened and what was in flight. The loop ends with a final answer, or after
``agent.max_iterations`` model calls with the outcome ``max_iterations`` —
never silently — or with ``failed`` / ``cancelled``; in every case a
``run_finished`` event is journaled and a :class:`~koboi.events.FinalEvent` is
the last thing yielded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

import anyio

from koboi import journal as J
from koboi.approval import (
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    arguments_hash,
    canonical_arguments,
)
from koboi.errors import FencedOut, KoboiError, ToolArgumentError, ToolError, describe_error
from koboi.events import (
    AgentEvent,
    FinalEvent,
    Outcome,
    RunResult,
    StepEvent,
    TextDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from koboi.interceptors import (
    Interceptor,
    PendingToolCall,
    Redaction,
    RunInfo,
    StreamRedaction,
    Verdict,
    overrides,
)
from koboi.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    TextDelta,
    ToolCall,
    Usage,
    argument_problem,
)
from koboi.provider import ProviderReport, collect_reports
from koboi.store import Lease, NewEvent, SessionStatus, Store
from koboi.tools import Risk, Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.provider import ModelProvider
    from koboi.sandbox import Sandbox

_RISK_RANK = {Risk.SAFE: 0, Risk.MODERATE: 1, Risk.DESTRUCTIVE: 2}

#: The session status a run's outcome leaves behind.
_SESSION_STATUS: dict[Outcome, SessionStatus] = {
    "completed": "completed",
    "max_iterations": "completed",
    "budget_exceeded": "failed",
    "failed": "failed",
    "cancelled": "interrupted",
}


class _Masks:
    """Every redaction the interceptors provide, applied in order; free when there is none."""

    __slots__ = ("active", "redactions")

    def __init__(self, redactions: Sequence[Redaction]) -> None:
        self.redactions = [r for r in redactions if r.active]
        self.active = bool(self.redactions)

    def text(self, text: str) -> str:
        for redaction in self.redactions:
            text = redaction.redact(text)
        return text

    def data(self, data: Any) -> Any:
        for redaction in self.redactions:
            data = redaction.redact_data(data)
        return data

    def stream(self) -> _StreamMasks | None:
        return _StreamMasks([r.stream() for r in self.redactions]) if self.active else None


class _StreamMasks:
    __slots__ = ("streams",)

    def __init__(self, streams: list[StreamRedaction]) -> None:
        self.streams = streams

    def feed(self, text: str) -> str:
        for stream in self.streams:
            text = stream.feed(text)
        return text

    def flush(self) -> str:
        text = ""
        for stream in self.streams:
            text = stream.feed(text) + stream.flush() if text else stream.flush()
        return text


@dataclass
class _Guard:
    final: FinalEvent | None = None


@dataclass
class _Refusal:
    stage: str
    reason: str


@dataclass
class LoopParts:
    """Everything one run needs, assembled by :class:`koboi.KoboiAgent`."""

    config: AgentConfig
    provider: ModelProvider
    store: Store
    sandbox: Sandbox
    approver: Approver
    tools: Mapping[str, Tool]
    interceptors: Sequence[Interceptor] = ()
    resources: Mapping[type[Any], Any] = field(default_factory=dict)
    #: No human can approve anything (a job, a schedule, an A2A call).
    autonomous: bool = False


class HistoryView(Sequence[Message]):
    """A read-only, fixed-length view of the run's message list.

    Each model request gets one: O(1) to make however long the conversation,
    and what a provider or interceptor keeps does not change as the run goes on.
    """

    __slots__ = ("_items", "_length")

    def __init__(self, items: list[Message], length: int) -> None:
        self._items = items
        self._length = length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return self._items[: self._length][index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("message index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[Message]:
        items = self._items
        for i in range(self._length):
            yield items[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"HistoryView({list(self)!r})"


class AgentRun:
    """One run of the loop in one session: a new user message, or the resumption of one.

    Journal writes are batched so a step costs at most two durable commits: an
    event that ends a piece of work is committed together with the event that
    starts the next one. Nothing is ever left uncommitted when an effect (a
    model call, a tool call, a wait for a human) begins.
    """

    def __init__(
        self,
        parts: LoopParts,
        session_id: str,
        state: J.SessionState,
        *,
        lease: Lease | None = None,
    ) -> None:
        self.parts = parts
        self.session_id = session_id
        self.config = parts.config
        self.state = state
        self.messages: list[Message] = state.messages
        self.usage = state.usage
        self.cost_usd = state.cost_usd
        self.step = state.step
        self.info = RunInfo(
            session_id=session_id,
            step=state.step,
            config=parts.config,
            interactive=not parts.autonomous,
            store=parts.store,
            sandbox_isolated=parts.sandbox.isolated,
        )
        self.lease = lease
        icp = parts.interceptors
        self._before_model = [i for i in icp if overrides(i, "before_model_call")]
        self._after_model = [i for i in icp if overrides(i, "after_model_call")]
        self._before_tool = [i for i in icp if overrides(i, "before_tool_call")]
        self._admit_tool = [i for i in icp if overrides(i, "admit_tool_call")]
        self._after_tool = [i for i in icp if overrides(i, "after_tool_call")]
        self._observers = [i for i in icp if overrides(i, "on_event")]
        self._after_approval = [i for i in icp if overrides(i, "after_approval")]
        self._masks = _Masks([r for i in icp if (r := i.redaction()) is not None])
        #: Approvals that were waiting for a decision when the run was interrupted.
        self._waiting_approvals = {
            p.call.id: p.approval for p in state.pending if p.approval is not None
        }
        self._max_argument_bytes = parts.config.tools.max_argument_bytes
        self._specs = tuple(t.spec() for t in parts.tools.values())
        self._approval_rank = _RISK_RANK[Risk(parts.config.agent.approval_risk)]
        self._tool_timeout = parts.config.tools.timeout_seconds
        self._lease_ttl = parts.config.agent.lease_seconds
        self._finished = False
        self._fenced_out = False
        self._store_failed = False
        self._final: FinalEvent | None = None
        self._buffer: list[NewEvent] = []
        # fast_acquire: an uncontended flush (the usual case) takes the lock without
        # a trip through the event loop.
        self._flush_lock = anyio.Lock(fast_acquire=True)
        self._next_seq = state.last_seq + 1
        system = parts.config.agent.system_prompt
        # One append-only list holds what the model sees (system prompt first); each
        # request gets an O(1) view of it, never a copy.
        self._conversation: list[Message] = (
            [Message.system(system), *self.messages] if system else self.messages
        )

    def _append(self, message: Message) -> None:
        self.messages.append(message)
        if self._conversation is not self.messages:
            self._conversation.append(message)

    # -- journal ---------------------------------------------------------------

    async def record(self, type_: str, data: Mapping[str, Any], *, commit: bool = True) -> int:
        """Journal one event; return its sequence number.

        With ``commit=False`` the event waits for the next commit (the one that
        announces the next piece of work), so ends and starts share a transaction.
        """
        if self._masks.active:
            data = self._masks.data(data)
        self._buffer.append(NewEvent(type_, data))
        seq = self._next_seq
        self._next_seq += 1
        if commit:
            await self.flush()
        return seq

    async def flush(self) -> None:
        """Commit the buffered events in one transaction, under this run's lease.

        Flushes are serialised (parallel tool calls share the run), so batches
        reach the store in the order their sequence numbers were handed out.
        """
        async with self._flush_lock:
            if not self._buffer and not self.info.pending_audit:
                return
            batch, self._buffer = self._buffer, []
            audit, self.info.pending_audit = self.info.pending_audit, []
            if audit and self._masks.active:
                audit = [self._masks.data(record) for record in audit]
            first = self._next_seq - len(batch) - len(self._buffer)
            fence = self.lease.fence if self.lease is not None else None
            try:
                stored = await self.parts.store.append(
                    self.session_id, batch, fence=fence, audit=audit
                )
            except FencedOut:
                self._fenced_out = True
                raise
            except Exception:
                # The store failed (disk full, I/O error, connection lost): stop without
                # trying to write any more, leaving the run interrupted and resumable
                # from what was committed.
                self._store_failed = True
                raise
            if stored and stored[0].seq != first:
                raise KoboiError(
                    f"session {self.session_id!r} was written by someone else during this run "
                    f"(expected seq {first}, got {stored[0].seq})"
                )
            for event in stored:
                for observer in self._observers:
                    with contextlib.suppress(Exception):
                        await observer.on_event(event, self.info)
        await self._renew_if_due()

    async def _renew_if_due(self, *, margin: float = 0.5) -> None:
        """Renew the lease when less than ``margin`` of its time is left.

        Called after every commit, and by the agent's lease keeper while the run
        waits on something slow (a model, a tool, a human).
        """
        lease = self.lease
        if lease is None or self._fenced_out:
            return
        if lease.expires_at - time.time() > self._lease_ttl * margin:
            return
        try:
            self.lease = await self.parts.store.renew_lease(lease, self._lease_ttl)
        except FencedOut:
            self._fenced_out = True
            raise

    # -- entry points --------------------------------------------------------------

    async def execute(self, user_input: str) -> AsyncGenerator[AgentEvent, None]:
        """Run the loop for a new user message; the last event is always a FinalEvent."""
        config = self.config
        # A new run counts its own steps, usage and cost, whatever earlier runs used.
        self.usage, self.step, self.cost_usd = Usage(), 0, 0.0
        async with self._guard() as guard:
            await self.parts.store.set_status(self.session_id, "running", fence=self._fence())
            await self.record(
                J.RUN_STARTED,
                {
                    "input": user_input,
                    "agent": config.agent.name,
                    "config_hash": config.config_hash,
                    # Who could approve: nobody, in a job, a schedule or an A2A call.
                    "autonomous": self.parts.autonomous,
                },
                commit=False,
            )
            self._append(Message.user(user_input))
            async for event in self._loop(1, ""):
                yield event
        if guard.final is not None:
            yield guard.final

    async def resume(self) -> AsyncGenerator[AgentEvent, None]:
        """Finish an interrupted run from its journal.

        Tool calls that completed are never run again (their results come from
        the journal); a call the model asked for that never started runs now; a
        call that started and never finished runs again only if its tool is
        idempotent, otherwise ``agent.on_interrupted_tool`` decides. A model call
        that never finished is asked again.
        """
        state = self.state
        async with self._guard() as guard:
            await self.parts.store.set_status(self.session_id, "running", fence=self._fence())
            await self.record(
                J.RUN_RESUMED,
                {
                    "after_seq": state.last_seq,
                    "step": state.step,
                    "holder": self.lease.holder if self.lease else None,
                },
                commit=False,
            )
            self.step = self.info.step = state.step
            results = []
            ended = False
            last = self.messages[-1] if self.messages else None
            if not state.pending and last is not None and last.role == "assistant":
                # The final answer was journaled; only "run_finished" was lost.
                self._final = await self._finish("completed", last.content)
                ended = True
            for pending in state.pending if not ended else ():
                if pending.outcome is not None:  # done before the crash: never run again
                    message = J.result_message(pending)
                    recorded = ToolResultEvent(
                        pending.call.id,
                        pending.call.name,
                        message.content,
                        message.is_error,
                        pending.step,
                    )
                    results.append((message, recorded))
                    continue
                outcome = await self._resume_call(pending)
                if outcome is None:
                    ended = True
                    break
                results.append(outcome)
            if not ended:
                for result_message, result_event in results:
                    self._append(result_message)
                    yield self._mask_result(result_event)
                async for event in self._loop(state.step + 1, ""):
                    yield event
        if guard.final is not None:
            yield guard.final

    async def _resume_call(self, pending: J.PendingCall) -> tuple[Message, ToolResultEvent] | None:
        """Settle one call left without an outcome. None: the run was ended (policy 'fail')."""
        call, step = pending.call, pending.step
        if not pending.started or pending.idempotent:
            return await self._run_tool_call(call, step)
        policy = self.config.agent.on_interrupted_tool
        if policy == "ask":
            tool = self.parts.tools.get(call.name)
            if tool is not None:
                args = tool.parse_arguments(call.arguments)
                refusal = await self._approve(
                    PendingToolCall(call=call, tool=tool, args=args, step=step),
                    [
                        Verdict(
                            "ask",
                            "this call was interrupted and its outcome is unknown; run it again?",
                            stage="resume",
                        )
                    ],
                )
                if refusal is None:
                    return await self._run_tool_call(call, step)
        seq = await self.record(
            J.TOOL_CALL_INTERRUPTED,
            {"step": step, "call_id": call.id, "name": call.name, "policy": policy},
            commit=False,
        )
        if policy == "fail":
            self._final = await self._finish(
                "failed",
                "",
                f"tool call '{call.name}' ({call.id}) was interrupted and its outcome is unknown "
                "(agent.on_interrupted_tool: fail)",
            )
            return None
        return (
            Message.tool_result(call, J.INTERRUPTED_RESULT, is_error=True),
            ToolResultEvent(call.id, call.name, J.INTERRUPTED_RESULT, True, step, "resume", seq),
        )

    def _fence(self) -> int | None:
        return self.lease.fence if self.lease is not None else None

    @contextlib.asynccontextmanager
    async def _guard(self) -> AsyncIterator[_Guard]:
        """Whatever ends the run, journal how it ended (unless the lease was lost)."""
        guard = _Guard()
        self._final = None
        try:
            yield guard
            guard.final = self._final
        except FencedOut:
            raise
        except Exception as exc:
            if self._finished or self._fenced_out or self._store_failed:
                raise
            try:
                guard.final = await self._finish("failed", "", describe_error(exc))
            except Exception:
                raise exc from None
        finally:
            if not (self._finished or self._fenced_out or self._store_failed):
                # Cancelled, or the caller stopped listening: record it, whatever happens next.
                with anyio.CancelScope(shield=True):
                    await self._finish("cancelled", "", "the run was cancelled")

    # -- the loop ----------------------------------------------------------------

    async def _loop(self, first_step: int, final_text: str) -> AsyncGenerator[AgentEvent, None]:
        config = self.config
        conversation = self._conversation
        for step in range(first_step, config.agent.max_iterations + 1):
            self.step = self.info.step = step
            request = ModelRequest.model_construct(
                messages=HistoryView(conversation, len(conversation)),
                tools=self._specs,
                options={},
                response_format=None,
            )
            for icp in self._before_model:
                request = await icp.before_model_call(request, self.info) or request
            over = self._over_budget()
            if over is not None:
                self._final, _ = await self._stop_for_budget(step - 1, over, final_text, ())
                return
            await self.record(J.MODEL_CALL_STARTED, {"step": step})
            response: ModelResponse | None = None
            streamed: list[str] = []
            # Streamed text is shown through the redaction, which holds back what may be
            # the start of a secret until the next piece tells.
            mask = self._masks.stream()
            with collect_reports() as reports:
                try:
                    if config.agent.stream:
                        async for item in self.parts.provider.stream(request):
                            if isinstance(item, TextDelta):
                                streamed.append(item.text)
                                shown = mask.feed(item.text) if mask else item.text
                                if shown:
                                    yield TextDeltaEvent(shown, step)
                            elif isinstance(item, ResponseDone):
                                response = item.response
                        if mask is not None and (rest := mask.flush()):
                            yield TextDeltaEvent(rest, step)
                        if response is None:
                            raise KoboiError("the provider's stream ended without a response")
                    else:
                        response = await self.parts.provider.complete(request)
                except Exception as exc:
                    error = describe_error(exc)
                    await self._record_reports(step, reports)
                    failed: dict[str, Any] = {"step": step, "error": error}
                    if streamed:
                        failed["streamed"] = "".join(streamed)
                    await self.record(J.MODEL_CALL_FAILED, failed, commit=False)
                    self._final = await self._finish("failed", final_text, error)
                    return
            await self._record_reports(step, reports)
            for icp in self._after_model:
                response = await icp.after_model_call(response, self.info) or response
            if not config.agent.stream and response.message.content:
                # Not streamed: shown once the interceptors are done with it (a guardrail
                # may have withheld it).
                yield TextDeltaEvent(self._mask(response.message.content), step)
            seq = await self.record(
                J.MODEL_CALL_FINISHED,
                {"step": step, "response": response.model_dump(mode="json", exclude_defaults=True)},
                commit=False,
            )
            self.usage = self.usage + response.usage
            self.cost_usd += response.cost_usd or 0.0
            message = response.message
            self._append(message)
            final_text = message.content
            yield StepEvent(step, response.usage, len(message.tool_calls), seq)
            if not message.tool_calls:
                self._final = await self._finish("completed", final_text)
                return
            over = self._over_budget()
            if over is not None:
                self._final, refusals = await self._stop_for_budget(
                    step, over, final_text, message.tool_calls
                )
                for call in message.tool_calls:
                    yield ToolCallEvent(self._mask_call(call), step)
                for event in refusals:
                    yield self._mask_result(event)
                return
            for call in message.tool_calls:
                yield ToolCallEvent(self._mask_call(call), step)
            if config.agent.parallel_tool_calls and len(message.tool_calls) > 1:
                results = await self._run_parallel(message.tool_calls, step)
            else:
                results = [await self._run_tool_call(c, step) for c in message.tool_calls]
            for result_message, event in results:
                self._append(result_message)
                yield self._mask_result(event)
        self._final = await self._finish(
            "max_iterations",
            final_text,
            f"stopped after {config.agent.max_iterations} model calls without a final answer "
            "(agent.max_iterations)",
        )

    async def _record_reports(self, step: int, reports: Sequence[ProviderReport]) -> None:
        """Journal what the provider reported during one call (retries, failovers...)."""
        for item in reports:
            await self.record(
                J.PROVIDER_EVENT, {**item.data, "step": step, "kind": item.kind}, commit=False
            )

    def _over_budget(self) -> tuple[str, float, float] | None:
        """The first budget this run has used up, as (name, limit, used); None if none."""
        agent = self.config.agent
        if agent.max_total_tokens is not None:
            used = self.usage.total_tokens
            if used >= agent.max_total_tokens:
                return "max_total_tokens", agent.max_total_tokens, used
        if agent.max_cost_usd is not None and self.cost_usd >= agent.max_cost_usd:
            return "max_cost_usd", agent.max_cost_usd, self.cost_usd
        return None

    async def _stop_for_budget(
        self,
        step: int,
        over: tuple[str, float, float],
        final_text: str,
        calls: Sequence[ToolCall],
    ) -> tuple[FinalEvent, list[ToolResultEvent]]:
        """End the run because a budget is used up; tool calls asked for are refused."""
        budget, limit, used = over
        unit = "tokens" if budget == "max_total_tokens" else "USD"
        reason = (
            f"budget exceeded: the run used {used:g} {unit}, its limit is {limit:g} "
            f"(agent.{budget})"
        )
        await self.record(
            J.BUDGET_EXCEEDED,
            {"step": step, "budget": budget, "limit": limit, "used": used},
            commit=False,
        )
        refusals = []
        for call in calls:
            why = f"not run: {reason}"
            seq = await self.record(
                J.TOOL_CALL_REFUSED,
                {
                    "step": step,
                    "call_id": call.id,
                    "name": call.name,
                    "stage": "budget",
                    "reason": why,
                },
                commit=False,
            )
            # The refusal answers the call, so the conversation stays well formed.
            self._append(Message.tool_result(call, why, is_error=True))
            refusals.append(ToolResultEvent(call.id, call.name, why, True, step, "budget", seq))
        return await self._finish("budget_exceeded", final_text, reason), refusals

    async def _finish(self, outcome: Outcome, output: str, error: str | None = None) -> FinalEvent:
        self._finished = True
        usage = self.usage
        seq = await self.record(
            J.RUN_FINISHED,
            {
                "outcome": outcome,
                "output": output,
                "steps": self.step,
                "error": error,
                "usage": usage.model_dump(),
                "cost_usd": round(self.cost_usd, 10),
            },
        )
        await self.parts.store.set_status(
            self.session_id, _SESSION_STATUS[outcome], fence=self._fence()
        )
        messages = list(self.messages)
        if self._masks.active:
            output = self._mask(output)
            error = self._mask(error) if error is not None else None
            messages = [
                m.model_copy(update={"content": self._mask(m.content)}) if m.content else m
                for m in messages
            ]
        result = RunResult(
            session_id=self.session_id,
            outcome=outcome,
            output=output,
            usage=usage,
            steps=self.step,
            messages=messages,
            error=error,
            cost_usd=self.cost_usd,
        )
        return FinalEvent(result, seq)

    # -- redaction of what the run shows -------------------------------------------

    def _mask(self, text: str) -> str:
        return self._masks.text(text) if self._masks.active else text

    def _mask_call(self, call: ToolCall) -> ToolCall:
        if not self._masks.active:
            return call
        return call.model_copy(update={"arguments": self._masks.data(call.arguments)})

    def _mask_result(self, event: ToolResultEvent) -> ToolResultEvent:
        if not self._masks.active:
            return event
        return dataclasses.replace(event, content=self._mask(event.content))

    async def _run_parallel(
        self, calls: Sequence[ToolCall], step: int
    ) -> list[tuple[Message, ToolResultEvent]]:
        results: list[tuple[Message, ToolResultEvent] | None] = [None] * len(calls)

        async def one(index: int, call: ToolCall) -> None:
            results[index] = await self._run_tool_call(call, step)

        async with anyio.create_task_group() as tg:
            for index, call in enumerate(calls):
                tg.start_soon(one, index, call)
        return [r for r in results if r is not None]

    # -- one tool call -------------------------------------------------------------

    async def _run_tool_call(self, call: ToolCall, step: int) -> tuple[Message, ToolResultEvent]:
        """The documented pipeline of one call; see koboi.interceptors for the order."""
        trail: list[dict[str, str]] = []
        decided = await self._decide(call, step, trail)
        audit = {
            "action": "tool_call",
            "step": step,
            "call_id": call.id,
            "tool": call.name,
            "arguments_hash": arguments_hash(call.arguments),
        }
        if isinstance(decided, _Refusal):
            self.info.audit(
                {
                    **audit,
                    "phase": "decision",
                    "decision": "deny",
                    "stage": decided.stage,
                    "reason": decided.reason,
                    "stages": trail,
                }
            )
            seq = await self.record(
                J.TOOL_CALL_REFUSED,
                {
                    "step": step,
                    "call_id": call.id,
                    "name": call.name,
                    "stage": decided.stage,
                    "reason": decided.reason,
                },
                commit=False,
            )
            return (
                Message.tool_result(call, decided.reason, is_error=True),
                ToolResultEvent(call.id, call.name, decided.reason, True, step, decided.stage, seq),
            )
        pending = decided
        tool = pending.tool
        ctx = ToolContext(
            session_id=self.session_id,
            call_id=call.id,
            step=step,
            sandbox=self.parts.sandbox,
            workdir=self.parts.sandbox.workdir_for(self.session_id),
            resources=self.parts.resources,
            subagent_runner=self._run_subagent,
        )
        # The "started" marker is committed as late as possible: after every decision,
        # immediately before the effect begins; the audit trail's "before" record with it.
        self.info.audit(
            {
                **audit,
                "phase": "before",
                "decision": "allow",
                "stages": trail,
                "arguments": call.arguments,
                "risk": tool.risk.value,
                "sandbox": self.parts.sandbox.name,
            }
        )
        await self.record(
            J.TOOL_CALL_STARTED,
            {
                "step": step,
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "idempotent": tool.idempotent,
                # Which stages allowed it, and why: each decision is in the journal.
                "decision": trail,
            },
        )
        result = await self._invoke(pending, ctx)
        for icp in self._after_tool:
            result = await icp.after_tool_call(pending, result, self.info) or result
        self.info.audit(
            {
                **audit,
                "phase": "after",
                "outcome": "error" if result.is_error else "ok",
                "result_chars": len(result.content),
            }
        )
        seq = await self.record(
            J.TOOL_CALL_FINISHED,
            {
                "step": step,
                "call_id": call.id,
                "name": call.name,
                "content": result.content,
                "is_error": result.is_error,
            },
            commit=False,
        )
        return (
            Message.tool_result(call, result.content, is_error=result.is_error),
            ToolResultEvent(call.id, call.name, result.content, result.is_error, step, None, seq),
        )

    async def _decide(
        self, call: ToolCall, step: int, trail: list[dict[str, str]]
    ) -> PendingToolCall | _Refusal:
        """Every stage of the pipeline, in order; ``trail`` collects what each one said."""
        # Exact lookup: no case folding, no trimming, no Unicode normalisation, so a
        # name that merely looks like a tool's never reaches it.
        tool = self.parts.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.parts.tools)) or "none"
            return _Refusal(
                "lookup", f"unknown tool {call.name!r} (names must match exactly); tools: {known}"
            )
        if call.raw_arguments is not None:
            return _Refusal(
                "arguments",
                f"invalid arguments for tool '{call.name}': {argument_problem(call.raw_arguments)}",
            )
        size = len(canonical_arguments(call.arguments).encode())
        if size > self._max_argument_bytes:
            return _Refusal(
                "arguments",
                f"the arguments of tool '{call.name}' are {size} bytes, more than the "
                f"{self._max_argument_bytes} allowed (tools.max_argument_bytes)",
            )
        try:
            args = tool.parse_arguments(call.arguments)
        except ToolArgumentError as exc:
            return _Refusal("arguments", str(exc))
        pending = PendingToolCall(call=call, tool=tool, args=args, step=step)
        if (
            self.parts.autonomous
            and tool.risk == Risk.DESTRUCTIVE
            and not self.parts.sandbox.isolated
        ):
            # The C3 rule, checked again at each call: the run may have started with a
            # sandbox that was swapped since, or with tools added later.
            return _Refusal("sandbox", c3_refusal(tool.name, self.parts.sandbox.name))

        verdicts: list[Verdict] = []
        for icp in self._before_tool:
            verdict = await icp.before_tool_call(pending, self.info)
            if verdict is None:
                continue
            trail.append(
                {
                    "stage": verdict.stage or icp.name,
                    "action": verdict.action,
                    "reason": verdict.reason,
                }
            )
            if verdict.action == "deny":
                return _Refusal(verdict.stage or icp.name, verdict.reason or "denied")
            verdicts.append(verdict)
        needs_approval = _RISK_RANK[tool.risk] >= self._approval_rank
        if any(v.action == "ask" for v in verdicts):
            needs_approval = True
        elif verdicts and all(v.action == "allow" and v.skip_approval for v in verdicts):
            needs_approval = False
        if needs_approval:
            refusal = await self._approve(pending, verdicts)
            trail.append({"stage": "approval", "action": "deny" if refusal else "allow"})
            if refusal is not None:
                return refusal
        for icp in self._admit_tool:
            verdict = await icp.admit_tool_call(pending, self.info)
            if verdict is None:
                continue
            trail.append(
                {
                    "stage": verdict.stage or icp.name,
                    "action": verdict.action,
                    "reason": verdict.reason,
                }
            )
            if verdict.action == "deny":
                return _Refusal(verdict.stage or icp.name, verdict.reason or "not admitted")
        return pending

    async def _approve(self, pending: PendingToolCall, verdicts: list[Verdict]) -> _Refusal | None:
        """Ask the approver, within the journaled deadline; the answer must fit the request.

        A request still waiting when the run was interrupted is asked again under
        the same id and deadline, so it stays one pending approval across a crash.
        """
        call, tool = pending.call, pending.tool
        reasons = [v.reason for v in verdicts if v.action == "ask" and v.reason]
        reason = "; ".join(reasons) or f"tool risk is {tool.risk.value}"
        digest = arguments_hash(call.arguments)
        waiting = self._waiting_approvals.pop(call.id, None)
        if waiting is not None and waiting.get("arguments_hash") == digest:
            approval_id = str(waiting.get("approval_id") or "")
            expires_at = float(waiting.get("expires_at") or 0.0)
        else:
            approval_id = f"ap_{uuid.uuid4().hex}"
            expires_at = time.time() + self.config.agent.approval_timeout_seconds
        request = ApprovalRequest(
            session_id=self.session_id,
            step=pending.step,
            call_id=call.id,
            tool_name=call.name,
            arguments=call.arguments,
            risk=tool.risk,
            reason=reason,
            arguments_hash=digest,
            approval_id=approval_id,
            expires_at=expires_at,
        )
        base = {
            "action": "approval",
            "step": pending.step,
            "call_id": call.id,
            "tool": call.name,
            "approval_id": approval_id,
            "arguments_hash": digest,
        }
        if waiting is None or waiting.get("approval_id") != approval_id:
            self.info.audit({**base, "phase": "requested", "reason": reason})
            await self.record(
                J.APPROVAL_REQUESTED,
                {
                    "step": pending.step,
                    "call_id": call.id,
                    "name": call.name,
                    "risk": tool.risk.value,
                    "arguments_hash": digest,
                    "reason": reason,
                    "approval_id": approval_id,
                    "expires_at": expires_at,
                },
            )
        decision = await self._ask_approver(request)
        mismatch = decision.mismatch(request) if decision.approved else None
        if mismatch is not None:
            decision = dataclasses.replace(
                decision, approved=False, reason=f"approval refused: {mismatch}"
            )
        # Committed with what comes next (the call's start, or its refusal): losing a
        # decision to a crash only means the approver is asked again on resume.
        await self.record(
            J.APPROVAL_DECIDED,
            {
                "step": pending.step,
                "call_id": call.id,
                "approval_id": approval_id,
                "approved": decision.approved,
                "reason": decision.reason,
                "decided_by": decision.decided_by,
                "scope": decision.scope,
            },
            commit=False,
        )
        self.info.audit(
            {
                **base,
                "phase": "decided",
                "approved": decision.approved,
                "reason": decision.reason,
                "decided_by": decision.decided_by,
                "scope": decision.scope,
            }
        )
        for icp in self._after_approval:
            with contextlib.suppress(Exception):
                await icp.after_approval(pending, request, decision, self.info)
        if decision.approved:
            return None
        return _Refusal("approval", decision.reason or f"tool '{call.name}' was not approved")

    async def _ask_approver(self, request: ApprovalRequest) -> ApprovalDecision:
        """The approver's decision; a failure or no answer before the deadline is a no."""
        approver = self.parts.approver
        left = (request.expires_at or 0.0) - time.time()
        if left <= 0:
            return ApprovalDecision(
                approved=False,
                reason=f"the approval request for '{request.tool_name}' expired before a decision",
                decided_by="deadline",
            )
        try:
            with anyio.move_on_after(left):
                return await approver.decide(request)
        except Exception as exc:
            return ApprovalDecision(
                approved=False,
                reason=f"the approver failed: {describe_error(exc)}",
                decided_by=approver.name,
            )
        return ApprovalDecision(
            approved=False,
            reason=f"no decision on '{request.tool_name}' within {left:.0f} s "
            "(agent.approval_timeout_seconds): denied",
            decided_by="deadline",
        )

    async def _invoke(self, pending: PendingToolCall, ctx: ToolContext) -> ToolResult:
        tool = pending.tool
        try:
            if self._tool_timeout is None:
                return await self.parts.sandbox.run_tool(tool, pending.args, ctx)
            with anyio.CancelScope(deadline=anyio.current_time() + self._tool_timeout):
                return await self.parts.sandbox.run_tool(tool, pending.args, ctx)
            raise TimeoutError  # only reached when the deadline cancelled the call
        except TimeoutError:
            return ToolResult(
                f"tool '{tool.name}' timed out after {self._tool_timeout:g} s "
                "(tools.timeout_seconds)",
                is_error=True,
            )
        except ToolError as exc:
            return ToolResult(f"tool '{tool.name}' failed: {exc}", is_error=True)
        except Exception as exc:
            return ToolResult(f"tool '{tool.name}' failed: {describe_error(exc)}", is_error=True)

    async def _run_subagent(
        self,
        message: str,
        *,
        parent_session_id: str,
        tools: Sequence[str] | None = None,
        system_prompt: str | None = None,
        name: str | None = None,
    ) -> RunResult:
        """A child run with this run's parts: same pipeline, a subset of the tools."""
        parts = self.parts
        if tools is None:
            child_tools = dict(parts.tools)
        else:
            unknown = sorted(set(tools) - set(parts.tools))
            if unknown:
                raise ToolError(
                    f"a sub-agent may only use its parent's tools; not available: {', '.join(unknown)}"
                )
            child_tools = {n: parts.tools[n] for n in tools}
        update = {
            k: v for k, v in (("system_prompt", system_prompt), ("name", name)) if v is not None
        }
        config = dataclasses.replace(
            parts.config, agent=parts.config.agent.model_copy(update=update)
        )
        child_parts = dataclasses.replace(parts, config=config, tools=child_tools)
        holder = self.lease.holder if self.lease is not None else f"subagent:{parent_session_id}"
        info = await parts.store.create_session(
            config_name=config.agent.name,
            config_hash=config.config_hash,
            metadata={"parent_session": parent_session_id, "parent_step": self.step},
        )
        lease = await parts.store.acquire_lease(info.id, holder, config.agent.lease_seconds)
        try:
            child = AgentRun(child_parts, info.id, J.SessionState(), lease=lease)
            final: FinalEvent | None = None
            async with contextlib.aclosing(child.execute(message)) as events:
                async for event in events:
                    if isinstance(event, FinalEvent):
                        final = event
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await parts.store.release_lease(lease)
        if final is None:  # pragma: no cover - execute always ends with one
            raise KoboiError("the sub-agent ended without a final event")
        return final.result


def c3_refusal(tool_names: str, backend: str) -> str:
    """Why an autonomous run may not run destructive tools in a sandbox that does not isolate.

    The C3 rule; said the same way before a run starts and at each call.
    """
    from koboi import _hints

    return (
        f"this run is autonomous (no human can approve) and '{tool_names}' is destructive, "
        f"so it may only run in a sandbox that isolates; sandbox.backend is '{backend}', "
        f"which does not ({_hints.isolating_sandboxes()})"
    )
