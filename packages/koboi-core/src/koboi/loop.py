"""The agent loop: model call -> tool calls -> results -> next model call.

Every step goes through the journal: an event is committed before each model
call and tool call begins and after it ends, so the journal alone tells what
happened and what was in flight. The loop ends with a final answer, or after
``agent.max_iterations`` model calls with the outcome ``max_iterations`` —
never silently — or ``failed`` / ``cancelled`` / ``refused`` / ``suspended``;
in every case a ``run_finished`` event is journaled and a
:class:`~koboi.events.FinalEvent` is the last thing yielded.

The pieces live beside this module: the tool-call pipeline
(:mod:`koboi.toolcall`), the redaction of what a run shows (:mod:`koboi.masks`),
the history view of a request (:mod:`koboi.history`), child runs
(:mod:`koboi.subagents`), side model calls (:mod:`koboi.sidecalls`), toolsets
(:mod:`koboi.toolsets`) and runners (:mod:`koboi.runners`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

import anyio

from koboi import journal as J
from koboi.errors import FencedOut, KoboiError, describe_error
from koboi.events import (
    AgentEvent,
    FinalEvent,
    Outcome,
    PluginEvent,
    RunResult,
    StepEvent,
    TextDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from koboi.history import HistoryView
from koboi.interceptors import (
    FinishDecision,
    Interceptor,
    Refusal,
    RunInfo,
    check_namespace,
    namespace_of,
    overrides,
    speaker,
    speaking,
)
from koboi.logs import get_logger
from koboi.masks import Masks
from koboi.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    TextDelta,
    ToolCall,
    Usage,
)
from koboi.provider import ProviderReport, collect_reports
from koboi.runners import Ending, LoopRunner, RunHandle, Runner
from koboi.sidecalls import BudgetUse, RunModel
from koboi.store import Lease, NewEvent, SessionStatus, Store
from koboi.toolcall import Suspended, ToolCallPipeline
from koboi.tools import Tool
from koboi.toolsets import ToolList, Toolset
from koboi.tracing import TraceContext, running

if TYPE_CHECKING:
    from koboi.approval import Approver
    from koboi.config import AgentConfig
    from koboi.plugins import PluginHost
    from koboi.provider import ModelProvider
    from koboi.sandbox import Sandbox

log = get_logger("koboi.loop")

#: The session status a run's outcome leaves behind.
_SESSION_STATUS: dict[Outcome, SessionStatus] = {
    "completed": "completed",
    "max_iterations": "completed",
    "budget_exceeded": "failed",
    "failed": "failed",
    "refused": "failed",
    "cancelled": "interrupted",
    "suspended": "suspended",
}


def session_status(outcome: str) -> SessionStatus:
    """The session status a run that ended with ``outcome`` leaves behind (an outcome
    this version does not know, from a newer journal, reads as ``failed``)."""
    return _SESSION_STATUS.get(cast(Outcome, outcome), "failed")


_NOTHING: tuple[AgentEvent, ...] = ()


@dataclass
class _Guard:
    final: FinalEvent | None = None


Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], object]


@dataclass
class LoopParts:
    """Everything one run needs, assembled by :class:`koboi.KoboiAgent`."""

    config: AgentConfig
    provider: ModelProvider
    store: Store
    sandbox: Sandbox
    approver: Approver
    #: The config's own tools (``tools.builtin`` and the application's).
    tools: Mapping[str, Tool]
    interceptors: Sequence[Interceptor] = ()
    resources: Mapping[type[Any], Any] = field(default_factory=dict)
    #: No human can approve anything (a job, a schedule, an A2A call).
    autonomous: bool = False
    #: Opened toolsets; ``tool_list`` is the config's tools and theirs, together.
    toolsets: Sequence[Toolset] = ()
    tool_list: ToolList | None = None
    runner: Runner | None = None
    #: Starts a task in the agent's task group (live tool calls run there).
    spawn: Spawn | None = None
    host: PluginHost | None = None
    #: The provider of a name of the ``providers`` section (a child run's own model),
    #: built once per agent; None where no names can be built.
    named_model: Callable[[str], ModelProvider] | None = None


class _Side:
    """Events produced beside the loop (plugins, child runs), waiting to be yielded."""

    __slots__ = ("_wake", "items", "sink")

    def __init__(self) -> None:
        self.items: collections.deque[AgentEvent] = collections.deque()
        self._wake: anyio.Event | None = None
        #: Set while a runner runs in a task of its own: events go straight to the stream.
        self.sink: Callable[[AgentEvent], None] | None = None

    def put(self, event: AgentEvent) -> None:
        if self.sink is not None:
            self.sink(event)
        else:
            self.items.append(event)
        if self._wake is not None:
            self._wake.set()

    def take(self) -> Sequence[AgentEvent]:
        if not self.items:
            return _NOTHING
        taken = tuple(self.items)
        self.items.clear()
        return taken

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def wait(self) -> None:
        if self.items:
            return
        self._wake = anyio.Event()
        try:
            await self._wake.wait()
        finally:
            self._wake = None


class AgentRun(ToolCallPipeline):
    """One run in one session: a new user message, a direct tool call, or the resumption
    of one.

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
        owner: str | None = None,
        approver: Approver | None = None,
        parent: AgentRun | None = None,
    ) -> None:
        self.parts = parts
        #: The run that started this one (a child run), whose budgets it shares.
        self.parent = parent
        self.session_id = session_id
        self.config = parts.config
        self.state = state
        self.messages: list[Message] = state.messages
        self.usage = state.usage
        self.cost_usd = state.cost_usd
        self.step = state.step
        #: Model calls this run made, and those its children made (for the budgets
        #: a run shares with its children).
        self._steps_done = state.step
        self._child_steps = 0
        self.lease = lease
        self.approver = approver or parts.approver
        self.runner: Runner = parts.runner or LoopRunner()
        self.tool_list = parts.tool_list or ToolList.build(parts.tools, ())
        self._tools_seen: tuple[str, ...] = tuple(self.tool_list.tools)
        self.info = RunInfo(
            session_id=session_id,
            step=state.step,
            config=parts.config,
            interactive=not parts.autonomous,
            store=parts.store,
            sandbox_isolated=parts.sandbox.isolated,
            owner=owner,
            tools=self.tool_list.tools,
            host=parts.host,
            sandbox=parts.sandbox,
            parent=parent.info if parent is not None else None,
            started_seq=state.run_seq,
            _control=self,
        )
        icp = parts.interceptors
        self._restorers = [i for i in icp if i.event_namespace and overrides(i, "restore")]
        self._on_run_start = [i for i in icp if overrides(i, "on_run_start")]
        self._before_model = [i for i in icp if overrides(i, "before_model_call")]
        self._after_model = [i for i in icp if overrides(i, "after_model_call")]
        self._before_tool = [i for i in icp if overrides(i, "before_tool_call")]
        self._admit_tool = [i for i in icp if overrides(i, "admit_tool_call")]
        self._after_tool = [i for i in icp if overrides(i, "after_tool_call")]
        self._before_finish = [i for i in icp if overrides(i, "before_finish")]
        self._observers = [i for i in icp if overrides(i, "on_event")]
        self._after_approval = [i for i in icp if overrides(i, "after_approval")]
        self._masks = Masks([r for i in icp if (r := i.redaction()) is not None])
        #: Approvals that were waiting for a decision when the run was interrupted.
        self._waiting_approvals = {
            p.call.id: p.approval for p in state.pending if p.approval is not None
        }
        self._max_argument_bytes = parts.config.tools.max_argument_bytes
        self._specs = tuple(t.spec() for t in self.tool_list.tools.values())
        self._tool_timeout = parts.config.tools.timeout_seconds
        self._lease_ttl = parts.config.agent.lease_seconds
        self._max_continuations = parts.config.agent.max_continuations
        self._finished = False
        self._fenced_out = False
        self._store_failed = False
        self._final: FinalEvent | None = None
        #: How the run will end, set by the loop or the runner.
        self.ending: Ending | None = None
        self._buffer: list[NewEvent] = []
        #: A session status to commit with the next batch (the run's start or end).
        self._status_due: SessionStatus | None = None
        # fast_acquire: an uncontended flush (the usual case) takes the lock without
        # a trip through the event loop.
        self._flush_lock = anyio.Lock(fast_acquire=True)
        self._next_seq = state.last_seq + 1
        self._side = _Side()
        self._call_context: list[Message] = []
        self._queued: list[tuple[str, str]] = []
        #: ``before_finish`` continuations of this run so far (a resumed run goes on
        #: counting from its journal, so a crash never resets the bound).
        self._continuations = state.continuations
        self._settled = not (state.pending or state.interrupted)
        self._model: RunModel | None = None
        system = parts.config.agent.system_prompt
        # One append-only list holds what the model sees (system prompt first); each
        # request gets an O(1) view of it, never a copy.
        self._conversation: list[Message] = (
            [Message.system(system), *self.messages] if system else self.messages
        )
        #: id of each conversation message -> its position (built when first needed).
        self._positions: dict[int, int] | None = None
        #: The messages restored from the journal, masked when they were journaled: the
        #: run's result masks only the messages the run added, not the whole session
        #: again. (The tuple keeps them alive, so no other message can take an id.)
        self._restored = tuple(self.messages)
        self._restored_ids = frozenset(id(m) for m in self._restored)

    # -- what the run offers -------------------------------------------------------

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools the model is offered now."""
        return self.tool_list.tools

    @property
    def provider(self) -> ModelProvider:
        return self.parts.provider

    @property
    def model(self) -> RunModel:
        if self._model is None:
            self._model = RunModel(self)
        return self._model

    def _append(self, message: Message) -> None:
        self.messages.append(message)
        if self._conversation is not self.messages:
            self._conversation.append(message)
        if self._positions is not None:
            self._positions[id(message)] = len(self._conversation) - 1

    def _replace_last(self, message: Message) -> None:
        self.messages[-1] = message
        if self._conversation is not self.messages:
            self._conversation[-1] = message
        if self._positions is not None:
            self._positions[id(message)] = len(self._conversation) - 1

    def _position(self, message: Message, length: int) -> int | None:
        """Where ``message`` is in the first ``length`` messages of the conversation.

        The index is built once per run and kept up to date as the conversation
        grows, so describing a rewritten request costs what the request holds, not
        what the session has accumulated.
        """
        if self._positions is None:
            self._positions = {id(m): n for n, m in enumerate(self._conversation)}
        at = self._positions.get(id(message))
        if at is not None and at < length and self._conversation[at] is message:
            return at
        return None

    # -- journal ---------------------------------------------------------------

    def _buffer_event(self, type_: str, data: Mapping[str, Any]) -> int:
        if self._masks.active:
            data = self._masks.data(data)
        self._buffer.append(NewEvent(type_, data))
        seq = self._next_seq
        self._next_seq += 1
        return seq

    async def record(self, type_: str, data: Mapping[str, Any], *, commit: bool = True) -> int:
        """Journal one event; return its sequence number.

        With ``commit=False`` the event waits for the next commit (the one that
        announces the next piece of work), so ends and starts share a transaction.
        """
        seq = self._buffer_event(type_, data)
        if commit:
            await self.flush()
        return seq

    async def flush(self) -> None:
        """Commit the buffered events in one transaction, under this run's lease.

        Flushes are serialised (parallel tool calls share the run), so batches
        reach the store in the order their sequence numbers were handed out.
        Audit records added while observers look at a batch (a final ``run_finished``
        included) are committed before the flush returns, never dropped.
        """
        async with self._flush_lock:
            for _ in range(3):
                if not self._buffer and not self.info.pending_audit and self._status_due is None:
                    break
                await self._commit_batch()
        await self._renew_if_due()

    async def _commit_batch(self) -> None:
        batch, self._buffer = self._buffer, []
        audit, self.info.pending_audit = self.info.pending_audit, []
        status, self._status_due = self._status_due, None
        if audit and self._masks.active:
            audit = [self._masks.data(record) for record in audit]
        first = self._next_seq - len(batch) - len(self._buffer)
        fence = self.lease.fence if self.lease is not None else None
        try:
            stored = await self.parts.store.append(
                self.session_id, batch, fence=fence, audit=audit, status=status
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
            if "." in event.type:
                self._side.put(PluginEvent(event.type, event.data, self.step, event.seq))
            for observer in self._observers:
                try:
                    await observer.on_event(event, self.info)
                except Exception as exc:  # an observer never changes the run; it is logged
                    log.warning(
                        "interceptor %r (plugin %r) failed observing %s #%d of session %s: %s",
                        observer.name,
                        observer.plugin,
                        event.type,
                        event.seq,
                        self.session_id,
                        self._mask(describe_error(exc)),
                    )

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

    # -- what interceptors and tools ask of the run (RunControl) --------------------

    def record_plugin_event(self, event_type: str, data: Mapping[str, Any]) -> int:
        J.check_plugin_event_type(event_type)
        check_namespace(event_type)
        return self._buffer_event(event_type, data)

    def emit(self, event_type: str, data: Mapping[str, Any], call_id: str | None) -> None:
        J.check_plugin_event_type(event_type)
        check_namespace(event_type)
        if self._masks.active:
            data = self._masks.data(data)
        self._side.put(PluginEvent(event_type, dict(data), self.step, None, call_id))

    def add_context(self, text: str, scope: Literal["call", "session"], source: str) -> None:
        if not isinstance(text, str) or not text:
            raise KoboiError("add_context needs a non-empty text")
        source = source or speaker()[0] or "plugin"
        if scope == "session":
            self._buffer_event(J.CONTEXT_ADDED, {"step": self.step, "text": text, "source": source})
            self._append(Message.system(text))
        elif scope == "call":
            self._call_context.append(Message.system(text))
        else:
            raise KoboiError(f"add_context scope must be 'call' or 'session', not {scope!r}")

    def pending_context(self) -> Sequence[str]:
        return [message.content for message in self._call_context]

    def forward(self, event: AgentEvent) -> None:
        """Put an event produced beside the loop (a child run's) into the run's stream."""
        self._side.put(event)

    def queue_continuation(self, text: str, *, by: str) -> None:
        """A user message for the next turn of the loop (a runner's), journaled then."""
        self._queued.append((text, by))

    # -- side calls (SideCallHost) --------------------------------------------------

    def over_budget(self) -> BudgetUse | None:
        """The first budget used up, this run's or one its parents share with it; None
        if none."""
        over = self._own_budget_used(steps=self._child_steps > 0)
        run = self.parent
        while over is None and run is not None:
            over = run._own_budget_used(steps=True)
            if over is not None:
                over = over._replace(of_session=run.session_id)
            run = run.parent
        return over

    def _own_budget_used(self, *, steps: bool) -> BudgetUse | None:
        agent = self.config.agent
        if agent.max_total_tokens is not None:
            used = self.usage.total_tokens
            if used >= agent.max_total_tokens:
                return BudgetUse("max_total_tokens", agent.max_total_tokens, used)
        if agent.max_cost_usd is not None and self.cost_usd >= agent.max_cost_usd:
            return BudgetUse("max_cost_usd", agent.max_cost_usd, self.cost_usd)
        # A run's own model calls are bounded by its loop (outcome max_iterations); with
        # children, theirs count too, and using them up is a budget of the whole tree.
        if steps and self._steps_done + self._child_steps >= agent.max_iterations:
            return BudgetUse(
                "max_iterations", agent.max_iterations, self._steps_done + self._child_steps
            )
        return None

    def charge(self, usage: Usage, cost_usd: float, *, steps: int = 0, own: bool = True) -> None:
        """Count usage against this run's budgets and its parents' (``steps``: model calls;
        ``own``: made by this run rather than by one of its children)."""
        run: AgentRun | None = self
        while run is not None:
            run.usage = run.usage + usage
            run.cost_usd += cost_usd
            if own and run is self:
                run._steps_done += steps
            else:
                run._child_steps += steps
            run = run.parent

    def answered_side_call(self, purpose: str, key: str) -> Mapping[str, Any] | None:
        return self.state.side_calls.get((purpose, key))

    async def record_reports(
        self, step: int, reports: Sequence[ProviderReport], purpose: str | None = None
    ) -> None:
        """Journal what the provider reported during one call (retries, failovers...)."""
        for item in reports:
            data: dict[str, Any] = {**item.data, "step": step, "kind": item.kind}
            if purpose is not None:
                data["purpose"] = purpose
            await self.record(J.PROVIDER_EVENT, data, commit=False)

    # -- entry points --------------------------------------------------------------

    async def execute(
        self, user_input: str, *, trace: TraceContext | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run for a new user message; the last event is always a FinalEvent."""
        config = self.config
        # A new run counts its own steps, usage and cost, whatever earlier runs used.
        self.usage, self.step, self.cost_usd = Usage(), 0, 0.0
        self._steps_done = self._child_steps = 0
        self.state.side_calls, self.state.runner_calls = {}, {}
        self._continuations = 0
        self.info.input, self.info.resumed = user_input, False
        self.info.trace = trace or TraceContext.new()
        async with self._guard() as guard:
            # Committed with the run's first events (run_started or run_resumed).
            self._status_due = "running"
            self._refresh_tools()
            started: J.RunStartedData = {
                "input": user_input,
                "agent": config.agent.name,
                "config_hash": config.config_hash,
                # Who could approve: nobody, in a job, a schedule or an A2A call.
                "autonomous": self.parts.autonomous,
                "tools": list(self.tool_list.tools),
                "trace": self.info.trace.to_data(),
                "model": self.parts.provider.cache_identity(),
            }
            if self.tool_list.skipped:
                started["tools_skipped"] = list(self.tool_list.skipped)
            definitions = self.tool_list.definitions()
            if definitions:
                started["toolset_tools"] = definitions
            if self.runner.name != "loop":
                started["runner"] = self.runner.name
            self.info.started_seq = await self.record(J.RUN_STARTED, started, commit=False)
            self._append(Message.user(user_input))
            with running(self.info):
                async with contextlib.aclosing(self._begin_and_run()) as events:
                    async for event in events:
                        yield event
        if guard.final is not None:
            yield guard.final

    async def resume(
        self, *, reply: Any = None, trace: TraceContext | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """Finish an interrupted run, or continue a suspended one with ``reply``.

        Tool calls that completed are never run again (their results come from
        the journal); a call the model asked for that never started runs now; a
        call that started and never finished runs again only if its tool is
        idempotent, otherwise ``agent.on_interrupted_tool`` decides; a call that
        suspended the run runs again with the reply. A model call that never
        finished is asked again.
        """
        state = self.state
        self.info.input, self.info.resumed = state.input, True
        self.info.trace = trace or TraceContext.from_data(state.trace) or TraceContext.new()
        async with self._guard() as guard:
            # Committed with the run's first events (run_started or run_resumed).
            self._status_due = "running"
            resumed: J.RunResumedData = {
                "after_seq": state.last_seq,
                "step": state.step,
                "holder": self.lease.holder if self.lease else None,
            }
            if state.suspended is not None:
                resumed["reply"] = reply
                for pending in state.pending:
                    if pending.suspended:
                        pending.started, pending.reply = False, reply
            if trace is not None:
                resumed["trace"] = trace.to_data()
            await self.record(J.RUN_RESUMED, resumed, commit=False)
            self.step = self.info.step = state.step
            with running(self.info):
                body = self._finish_direct() if state.direct else self._begin_and_run()
                async with contextlib.aclosing(body) as events:
                    async for event in events:
                        yield event
        if guard.final is not None:
            yield guard.final

    async def call_tool(self, call: ToolCall) -> AsyncGenerator[AgentEvent, None]:
        """One governed tool call as a run of its own (``agent.call_tool``)."""
        config = self.config
        self.usage, self.step, self.cost_usd = Usage(), 0, 0.0
        self.info.input, self.info.resumed = "", False
        self.info.trace = self.info.trace or TraceContext.new()
        async with self._guard() as guard:
            # Committed with the run's first events (run_started or run_resumed).
            self._status_due = "running"
            self._refresh_tools()
            started: J.RunStartedData = {
                "input": "",
                "agent": config.agent.name,
                "config_hash": config.config_hash,
                "autonomous": self.parts.autonomous,
                "kind": "tool_call",
                "call": {"id": call.id, "name": call.name, "arguments": dict(call.arguments)},
                "trace": self.info.trace.to_data(),
            }
            # Only the called tool: what a replay needs to make the same call.
            definitions = self.tool_list.definitions([call.name])
            if definitions:
                started["toolset_tools"] = definitions
            self.info.started_seq = await self.record(
                J.RUN_STARTED,
                started,
                commit=False,
            )
            with running(self.info):
                await self._restore()
                yield ToolCallEvent(self._mask_call(call), 0)
                outcome = await self._run_tool_call(call, 0)
                for event in self._side.take():
                    yield event
                self.ending = self._direct_ending(call, outcome)
                if not isinstance(outcome, Suspended):
                    yield self._mask_result(outcome[1])
            self._final = await self._finish_with(self.ending)
        if guard.final is not None:
            yield guard.final

    def _direct_ending(
        self, call: ToolCall, outcome: tuple[Message, ToolResultEvent] | Suspended
    ) -> Ending:
        if isinstance(outcome, Suspended):
            return Ending("suspended", "", None, outcome.suspension(), None)
        event = outcome[1]
        if event.refused_by:
            return Ending("refused", "", event.content, refused_by=event.refused_by)
        if event.is_error:
            return Ending("failed", event.content, event.content)
        return Ending("completed", event.content)

    async def _finish_direct(self) -> AsyncGenerator[AgentEvent, None]:
        """Resume a direct call: the same rules as any call left without an outcome."""
        pending = self.state.pending[0] if self.state.pending else None
        if pending is None or pending.outcome is not None:
            content, is_error = pending.outcome if pending and pending.outcome else ("", False)
            self.ending = Ending("failed" if is_error else "completed", content, None)
        else:
            outcome = await self._resume_call(pending)
            if outcome is None:
                self.ending = self.ending or Ending("failed", "", "interrupted")
            else:
                call = pending.call
                if not isinstance(outcome, Suspended):
                    yield self._mask_result(outcome[1])
                self.ending = self._direct_ending(call, outcome)
        self._final = await self._finish_with(self.ending)

    async def _begin_and_run(self) -> AsyncGenerator[AgentEvent, None]:
        """Restore plugins, ask ``on_run_start``, then run the runner to its ending."""
        await self._restore()
        refusal = await self._run_start()
        for event in self._side.take():
            yield event
        if refusal is not None:
            self.ending = Ending(
                "refused", "", refusal.reason or "refused", refused_by=refusal.stage
            )
        else:
            if type(self.runner) is LoopRunner:
                # The kernel's own runner is the loop itself: no layers around each event.
                events = self.loop()
            elif self.parts.spawn is None:
                events = self._runner_events()
            else:
                events = self._runner_in_task()
            async with contextlib.aclosing(events):
                async for event in events:
                    yield event
            for event in self._side.take():
                yield event
            if self.ending is None:
                raise KoboiError(f"runner {self.runner.name!r} ended without finishing the run")
        self._final = await self._finish_with(self.ending)
        # Plugin events recorded last (in before_finish) are committed with run_finished:
        # stream them too, before the final event.
        for event in self._side.take():
            yield event

    async def _runner_events(self) -> AsyncGenerator[AgentEvent, None]:
        events = self.runner.run(RunHandle(self))
        try:
            async for event in events:
                yield event
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()

    async def _runner_in_task(self) -> AsyncGenerator[AgentEvent, None]:
        """Drive a runner other than the loop from a task of the agent's, so what happens
        beside it reaches the stream as it happens: a child run's events (``run.child``)
        while the runner awaits it, not when the runner next yields."""
        assert self.parts.spawn is not None
        send, receive = anyio.create_memory_object_stream[AgentEvent](math.inf)
        box: dict[str, Any] = {}
        scope = anyio.CancelScope()
        done = anyio.Event()

        async def work() -> None:
            try:
                with scope:
                    async with contextlib.aclosing(self._runner_events()) as events:
                        async for event in events:
                            send.send_nowait(event)
                    box["returned"] = True
            except Exception as exc:  # handed to the run, which raises it in its own task
                box["error"] = exc
            finally:
                self._side.sink = None
                send.close()
                done.set()

        for event in self._side.take():
            send.send_nowait(event)
        self._side.sink = send.send_nowait
        self.parts.spawn(work)
        try:
            with receive:
                async for event in receive:
                    yield event
        except BaseException:  # the stream closed or was cancelled: stop the runner, then go
            scope.cancel()
            with anyio.CancelScope(shield=True):
                await done.wait()
            raise
        await done.wait()
        if "error" in box:
            raise box["error"]
        if "returned" not in box:
            raise KoboiError(f"runner {self.runner.name!r} was cancelled (the agent is closing)")

    async def _restore(self) -> None:
        if not self._restorers or not self.state.plugin_events:
            return
        for icp in self._restorers:
            prefix = f"{icp.event_namespace}."
            mine = [e for e in self.state.plugin_events if e.type.startswith(prefix)]
            if mine:
                with speaking(icp.name, namespace_of(icp)):
                    await icp.restore(mine, self.info)

    async def _run_start(self) -> Refusal | None:
        for icp in self._on_run_start:
            with speaking(icp.name, namespace_of(icp)):
                refusal = await icp.on_run_start(self.info)
            if refusal is not None:
                if not isinstance(refusal, Refusal):
                    raise KoboiError(
                        f"interceptor {icp.name!r}: on_run_start returned {refusal!r}, "
                        "not a Refusal or None"
                    )
                return Refusal(refusal.reason, refusal.stage or icp.name)
        return None

    def loop(self) -> AsyncGenerator[AgentEvent, None]:
        """The standard loop (what :meth:`RunHandle.loop` runs)."""
        if self._settled and not self._queued:
            # Nothing to settle or add first (a new run): the loop itself, one generator
            # less around every event of every step.
            self.ending = None
            return self._loop(self.step + 1, self._last_text())
        return self._loop_from_here()

    async def _loop_from_here(self) -> AsyncGenerator[AgentEvent, None]:
        self.ending = None
        if not self._settled:
            self._settled = True
            async with contextlib.aclosing(self._settle_pending()) as settling:
                async for event in settling:
                    yield event
            if self.ending is not None:
                return
        for text, by in self._queued:
            await self.record(
                J.RUN_CONTINUED,
                {"step": self.step, "by": by, "message": text, "runner": True},
                commit=False,
            )
            self._append(Message.user(text))
        self._queued.clear()
        async with contextlib.aclosing(self._loop(self.step + 1, self._last_text())) as events:
            async for event in events:
                yield event

    def _last_text(self) -> str:
        last = self.messages[-1] if self.messages else None
        return last.content if last is not None and last.role == "assistant" else ""

    async def _settle_pending(self) -> AsyncGenerator[AgentEvent, None]:
        """Settle what the interrupted (or suspended) run left: see :meth:`resume`."""
        state = self.state
        last = self.messages[-1] if self.messages else None
        if not state.pending and last is not None and last.role == "assistant":
            # The final answer was journaled; only "run_finished" was lost.
            self.ending = Ending("completed", last.content)
            return
        results: list[tuple[Message, ToolResultEvent]] = []
        suspended: list[Suspended] = []
        for pending in state.pending:
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
                return
            if isinstance(outcome, Suspended):
                suspended.append(outcome)
                continue
            results.append(outcome)
        for event in self._side.take():
            yield event
        if suspended:
            for _message, result_event in results:
                yield self._mask_result(result_event)
            self.ending = Ending("suspended", "", None, Suspended.combine(suspended))
            return
        for result_message, result_event in results:
            self._append(result_message)
            yield self._mask_result(result_event)

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
        except Exception as exc:  # whatever ends the run is journaled as its failure
            if self._finished or self._fenced_out or self._store_failed:
                raise
            try:
                guard.final = await self._finish("failed", "", describe_error(exc))
            except Exception:  # journaling the failure failed too: the first error is the news
                raise exc from None
        finally:
            if not (self._finished or self._fenced_out or self._store_failed):
                # Cancelled, or the caller stopped listening: record it, whatever happens next.
                with anyio.CancelScope(shield=True):
                    await self._finish("cancelled", "", "the run was cancelled")

    # -- the loop ----------------------------------------------------------------

    def _refresh_tools(self) -> None:
        """Read the toolsets' lists again when one changed (journaled when it did)."""
        tool_list = self.tool_list
        if tool_list.changed():
            tool_list.refresh()
        names = tuple(tool_list.tools)
        if names == self._tools_seen:
            return
        before, after = set(self._tools_seen), set(names)
        self._tools_seen = names
        self.info.tools = tool_list.tools
        self._specs = tuple(t.spec() for t in tool_list.tools.values())
        changed: J.ToolsChangedData = {
            "step": self.step,
            "tools": list(names),
            "added": sorted(after - before),
            "removed": sorted(before - after),
        }
        if tool_list.skipped:
            changed["skipped"] = list(tool_list.skipped)
        definitions = tool_list.definitions(changed["added"])
        if definitions:
            changed["definitions"] = definitions
        self._buffer_event(J.TOOLS_CHANGED, changed)

    async def _loop(self, first_step: int, final_text: str) -> AsyncGenerator[AgentEvent, None]:
        config = self.config
        conversation = self._conversation
        for step in range(first_step, config.agent.max_iterations + 1):
            self.step = self.info.step = step
            if self.tool_list.toolsets:
                self._refresh_tools()
            base = ModelRequest.model_construct(
                messages=HistoryView(conversation, len(conversation)),
                tools=self._specs,
                options={},
                response_format=None,
            )
            request, rewritten_by = base, []
            for icp in self._before_model:
                with speaking(icp.name, namespace_of(icp)):
                    replaced = await icp.before_model_call(request, self.info)
                if replaced is not None and replaced is not request:
                    request = replaced
                    rewritten_by.append(icp.name)
            if self._call_context:
                request = request.model_copy(
                    update={"messages": [*request.messages, *self._call_context]}
                )
                rewritten_by.append("context")
                self._call_context = []
            for event in self._side.take():
                yield event
            over = self.over_budget()
            if over is not None:
                self.ending, _ = await self._stop_for_budget(step - 1, over, final_text, ())
                return
            started: J.ModelCallStartedData = {"step": step}
            if rewritten_by:
                started["rewritten_by"] = rewritten_by
                started["request"] = self._rewrite_record(base, request)
            await self.record(J.MODEL_CALL_STARTED, started)
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
                except Exception as exc:  # any provider failure ends the run, journaled
                    error = describe_error(exc)
                    await self.record_reports(step, reports)
                    failed: J.ModelCallFailedData = {"step": step, "error": error}
                    if streamed:
                        failed["streamed"] = "".join(streamed)
                    await self.record(J.MODEL_CALL_FAILED, failed, commit=False)
                    self.ending = Ending("failed", final_text, error)
                    return
            await self.record_reports(step, reports)
            for icp in self._after_model:
                with speaking(icp.name, namespace_of(icp)):
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
            self.charge(response.usage, response.cost_usd or 0.0, steps=1)
            message = response.message
            self._append(message)
            final_text = message.content
            for event in self._side.take():
                yield event
            yield StepEvent(step, response.usage, len(message.tool_calls), seq)
            if not message.tool_calls:
                decided = await self._finishing(final_text, step)
                for event in self._side.take():
                    yield event
                if decided is None:
                    continue  # an interceptor sent the run on with a message
                self.ending = Ending("completed", decided)
                return
            over = self.over_budget()
            if over is not None:
                self.ending, refusals = await self._stop_for_budget(
                    step, over, final_text, message.tool_calls
                )
                for call in message.tool_calls:
                    yield ToolCallEvent(self._mask_call(call), step)
                for result_event in refusals:
                    yield self._mask_result(result_event)
                return
            calls = message.tool_calls
            for call in calls:
                yield ToolCallEvent(self._mask_call(call), step)
            outcomes: list[tuple[Message, ToolResultEvent] | Suspended] = []
            if self.parts.spawn is not None and self._any_live(calls):
                async with contextlib.aclosing(self._live(calls, step, outcomes)) as live:
                    async for event in live:
                        yield event
            else:
                outcomes = await self._run_calls(calls, step)
                for event in self._side.take():
                    yield event
            suspended = [o for o in outcomes if isinstance(o, Suspended)]
            for outcome in outcomes:
                if isinstance(outcome, Suspended):
                    continue
                result_message, result_event = outcome
                if not suspended:
                    self._append(result_message)
                yield self._mask_result(result_event)
            if suspended:
                self.ending = Ending("suspended", final_text, None, Suspended.combine(suspended))
                return
        self.ending = Ending(
            "max_iterations",
            final_text,
            f"stopped after {config.agent.max_iterations} model calls without a final answer "
            "(agent.max_iterations)",
        )

    def _rewrite_record(self, base: ModelRequest, request: ModelRequest) -> dict[str, Any]:
        """How ``request`` differs from the loop's own ``base``: runs of base messages
        kept (by index) and messages added, the tools and options when they changed,
        and the request's cache key."""
        from koboi.models import request_key

        length = len(base.messages)
        segments: list[Any] = []
        for message in request.messages:
            at = self._position(message, length)
            if at is not None:
                last = segments[-1] if segments else None
                if isinstance(last, list) and last[0] == "keep" and last[2] == at:
                    last[2] = at + 1
                else:
                    segments.append(["keep", at, at + 1])
            else:
                dumped = message.model_dump(mode="json", exclude_defaults=True)
                last = segments[-1] if segments else None
                if isinstance(last, list) and last[0] == "add":
                    last[1].append(dumped)
                else:
                    segments.append(["add", [dumped]])
        record: dict[str, Any] = {
            "key": request_key(self.parts.provider.cache_identity(), request),
            "messages": segments,
        }
        if tuple(request.tools) != tuple(base.tools):
            record["tools"] = [t.name for t in request.tools]
        if request.options:
            record["options"] = dict(request.options)
        if request.response_format is not None:
            record["response_format"] = request.response_format
        return record

    async def _finishing(self, answer: str, step: int) -> str | None:
        """Ask ``before_finish``: the answer to end with, or None to go on (a continuation)."""
        for icp in self._before_finish:
            with speaking(icp.name, namespace_of(icp)):
                decision = await icp.before_finish(answer, self.info)
            if decision is None:
                continue
            if not isinstance(decision, FinishDecision):
                raise KoboiError(
                    f"interceptor {icp.name!r}: before_finish returned {decision!r}, "
                    "not a FinishDecision or None"
                )
            if decision.action == "accept":
                continue
            if decision.action == "replace":
                answer = decision.text
                await self.record(
                    J.ANSWER_REPLACED, {"step": step, "by": icp.name, "text": answer}, commit=False
                )
                last = self.messages[-1]
                self._replace_last(last.model_copy(update={"content": answer}))
                continue
            if self._continuations >= self._max_continuations:
                self.info.audit(
                    {
                        "action": "continuation_refused",
                        "interceptor": icp.name,
                        "step": step,
                        "reason": f"the run was already continued {self._continuations} times "
                        "(agent.max_continuations)",
                    }
                )
                log.info(
                    "session %s: %r asked to continue the run again; refused after %d "
                    "continuations (agent.max_continuations)",
                    self.session_id,
                    icp.name,
                    self._continuations,
                )
                continue
            self._continuations += 1
            await self.record(
                J.RUN_CONTINUED,
                {"step": step, "by": icp.name, "message": decision.text},
                commit=False,
            )
            self._append(Message.user(decision.text))
            return None
        return answer

    def _any_live(self, calls: Sequence[ToolCall]) -> bool:
        tools = self.tool_list.tools
        return any(getattr(tools.get(c.name), "live_events", False) for c in calls)

    async def _live(
        self,
        calls: Sequence[ToolCall],
        step: int,
        outcomes: list[tuple[Message, ToolResultEvent] | Suspended],
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run the calls in a task of the agent's, yielding their events as they come."""
        assert self.parts.spawn is not None
        done = anyio.Event()
        box: dict[str, Any] = {}
        scope = anyio.CancelScope()

        async def work() -> None:
            try:
                with scope:
                    box["result"] = await self._run_calls(calls, step)
            except Exception as exc:  # handed to the loop, which raises it in its own task
                box["error"] = exc
            finally:
                done.set()
                self._side.wake()

        self.parts.spawn(work)
        try:
            while not done.is_set():
                await self._side.wait()
                for event in self._side.take():
                    yield event
        except BaseException:  # the stream closed or was cancelled: stop the calls, then go
            scope.cancel()
            with anyio.CancelScope(shield=True):
                await done.wait()
            raise
        for event in self._side.take():
            yield event
        if "error" in box:
            raise box["error"]
        if "result" not in box:
            raise KoboiError("the tool calls were cancelled (the agent is closing)")
        outcomes.extend(box["result"])

    async def _stop_for_budget(
        self,
        step: int,
        over: BudgetUse,
        final_text: str,
        calls: Sequence[ToolCall],
    ) -> tuple[Ending, list[ToolResultEvent]]:
        """End the run because a budget is used up; tool calls asked for are refused."""
        reason = f"budget exceeded: {over.describe()}"
        exceeded: J.BudgetExceededData = {
            "step": step,
            "budget": over.budget,
            "limit": over.limit,
            "used": over.used,
        }
        if over.of_session is not None:
            exceeded["of_session"] = over.of_session
        await self.record(J.BUDGET_EXCEEDED, exceeded, commit=False)
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
        return Ending("budget_exceeded", final_text, reason), refusals

    async def _finish_with(self, ending: Ending) -> FinalEvent:
        return await self._finish(
            ending.outcome,
            ending.output,
            ending.error,
            suspension=ending.suspension,
            refused_by=ending.refused_by,
        )

    async def _finish(
        self,
        outcome: Outcome,
        output: str,
        error: str | None = None,
        *,
        suspension: dict[str, Any] | None = None,
        refused_by: str | None = None,
    ) -> FinalEvent:
        self._finished = True
        usage = self.usage
        finished: J.RunFinishedData = {
            "outcome": outcome,
            "output": output,
            "steps": self.step,
            "error": error,
            "usage": usage.model_dump(),
            "cost_usd": round(self.cost_usd, 10),
        }
        if refused_by is not None:
            finished["refused_by"] = refused_by
        if suspension is not None:
            finished["suspension"] = cast(J.SuspensionData, suspension)
        # The outcome is committed with run_finished, in one transaction.
        self._status_due = session_status(outcome)
        seq = await self.record(J.RUN_FINISHED, finished)
        messages = list(self.messages)
        if self._masks.active:
            output = self._mask(output)
            error = self._mask(error) if error is not None else None
            restored = self._restored_ids
            messages = [
                m.model_copy(update={"content": self._mask(m.content)})
                if m.content and id(m) not in restored
                else m
                for m in messages
            ]
            if suspension is not None:
                suspension = self._masks.data(suspension)
        result = RunResult(
            session_id=self.session_id,
            outcome=outcome,
            output=output,
            usage=usage,
            steps=self.step,
            messages=messages,
            error=error,
            cost_usd=self.cost_usd,
            suspension=suspension,
            refused_by=refused_by,
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

    async def _run_subagent(self, message: str, **options: Any) -> RunResult:
        """A child run with this run's parts: same pipeline, a subset of the tools
        (``options``: those of :func:`koboi.subagents.run_subagent`)."""
        from koboi.subagents import run_subagent

        return await run_subagent(self, message, **options)

    async def runner_tool_call(
        self, name: str, arguments: Mapping[str, Any], call_id: str | None
    ) -> ToolResultEvent:
        """A tool call the runner makes itself (``RunHandle.call_tool``), through the whole
        pipeline; one the journal already settled is answered from it, one left in
        doubt by a crash follows the in-doubt rule."""
        call = ToolCall(
            id=call_id or f"runner_{uuid.uuid4().hex[:16]}", name=name, arguments=dict(arguments)
        )
        known = self.state.runner_calls.get(call.id)
        if known is not None and known.call.name != name:
            raise KoboiError(
                f"call id {call.id!r} was already used in this run for another call "
                f"({known.call.name}); give each of the runner's calls its own id"
            )
        self._side.put(ToolCallEvent(self._mask_call(call), self.step))
        outcome: tuple[Message, ToolResultEvent] | Suspended | None
        if known is not None and known.outcome is not None:
            content, is_error = known.outcome
            event = ToolResultEvent(call.id, name, content, is_error, known.step)
            self._side.put(self._mask_result(event))
            return event
        if known is not None and known.started:
            outcome = await self._resume_call(known)
            if outcome is None:
                ending = self.ending
                self.ending = None
                raise KoboiError(ending.error if ending and ending.error else "interrupted")
        else:
            outcome = await self._run_tool_call(call, self.step)
        if isinstance(outcome, Suspended):
            raise KoboiError(
                f"tool '{name}' asked for input (it suspended), which a runner's own tool "
                "call cannot wait for"
            )
        self.state.runner_calls[call.id] = J.PendingCall(
            call, self.step, started=True, outcome=(outcome[1].content, outcome[1].is_error)
        )
        result = outcome[1]
        self._side.put(self._mask_result(result))
        return result


def unattended_destruction_refusal(tool_names: str, backend: str, hint: str = "") -> str:
    """Why an unattended run may not run destructive tools in a sandbox that does not isolate.

    The rule "destructive tools in unattended runs need an isolating sandbox", said
    the same way before a run starts and at each call.
    """
    where = f" ({hint})" if hint else ""
    return (
        f"this run is unattended (autonomous: no human can approve) and '{tool_names}' is "
        f"destructive, so it may only run in a sandbox that isolates; sandbox.backend is "
        f"'{backend}', which does not{where} (rule: destructive tools in unattended runs "
        "need an isolating sandbox)"
    )
