"""Runs of this replica: started by requests, executed in tasks of their own.

A run never belongs to the HTTP request that started it: it executes in the
server's task group, so a client that disconnects (or a JSON chat that stops
waiting) leaves it running to its end. Its events are in the journal, where
any stream on any replica reads them.

Stopping the server (SIGTERM) drains: new runs are refused, a run parks at its
next journal boundary (just after a ``model_call_started`` commit, or while it
waits for an approval), and after ``server.drain_seconds`` every run still
here is *suspended*: the server takes the session's lease from the run (so the
run can write nothing more — fencing) and then cancels it. The journal is left
exactly as a crash would leave it, interrupted and resumable, instead of
recording ``cancelled``. Interrupted server sessions are resumed by whichever
replica finds them first (:meth:`RunRegistry.recover`): the one restarted, or
another sharing the store.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from koboi import journal as J
from koboi.errors import FencedOut, KoboiError, LeaseHeld, SessionNotFound, describe_error
from koboi.events import (
    AgentEvent,
    ChildEvent,
    FinalEvent,
    PluginEvent,
    RunResult,
    TextDeltaEvent,
)
from koboi.interceptors import Interceptor, RunInfo
from koboi.logs import get_logger
from koboi.store import JournalEvent, SessionInfo, holder_is_dead
from koboi_server.approvals import ApprovalBook
from koboi_server.errors import ApiError
from koboi_server.hub import Hub
from koboi_server.outages import LoopErrors, StoreOutage, is_store_failure
from koboi_server.sse import live_event

if TYPE_CHECKING:
    from koboi.agent import KoboiAgent
    from koboi.tracing import TraceContext
    from koboi_server.settings import ServerSettings

log = get_logger("koboi.server")

#: Marks the sessions this server created (``SessionInfo.metadata["origin"]``).
ORIGIN = "koboi-server"
#: How long a new run of a session waits for the previous run, whose final event is
#: already out, to close its stream and give the session back.
_CLOSING_SECONDS = 10.0


@dataclass(eq=False)
class ActiveRun:
    """A run this process executes."""

    session_id: str
    owner: str | None
    resuming: bool
    started: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    #: Set whenever the run's state changes (started, waits for approval, ends, parks).
    changed: anyio.Event = field(default_factory=anyio.Event)
    result: RunResult | None = None
    #: Seq of the journal's ``run_finished`` of this run.
    final_seq: int | None = None
    #: Its ``run_finished`` is journaled (streams may have sent the final event): the
    #: run is only closing and giving the session's lease back.
    closing: bool = False
    #: Why the run could not start (or ended without a result), for the requester.
    error: ApiError | None = None
    suspended: bool = False
    parked: bool = False
    awaiting: set[str] = field(default_factory=set)
    #: Sessions of the run's child runs (sub-agents, a runner's nodes) seen so far.
    children: set[str] = field(default_factory=set)
    scope: anyio.CancelScope | None = None

    def signal(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    @property
    def idle(self) -> bool:
        """At a journal boundary: safe to suspend without losing any work."""
        return self.parked or bool(self.awaiting)


@dataclass(eq=False)
class Slot:
    """A place among the runs of this process, reserved for a run about to start
    (:meth:`RunRegistry.reserve`): counted against the limits from the moment it is
    reserved, so concurrent requests cannot all pass the check and then be refused
    after creating something."""

    owner: str | None
    #: Handed to a run, or given back: either way no longer the reserver's.
    spent: bool = False


def forward(hub: Hub, session_id: str, event: AgentEvent) -> None:
    """Hand the streams of ``session_id`` what a local run yields beside its journal: the
    text the model streams and the live events (a plugin's progress, child runs' events).

    A journaled plugin event (it has an ``event_id``) is not forwarded: streams read it
    from the journal, like every journal event.
    """
    if isinstance(event, TextDeltaEvent):
        hub.text(session_id, event.step, event.text)
    elif isinstance(event, ChildEvent) or (
        isinstance(event, PluginEvent) and event.event_id is None
    ):
        hub.live(session_id, *live_event(event))


async def announce_child_event(
    hub: Hub, book: ApprovalBook, event: JournalEvent, run: RunInfo
) -> None:
    """Announce a child run's approvals on the streams of its root run's session: that is
    where the requester listens (a child's session has no stream of its own). The
    approval's record is written first, so it can be decided by id as soon as it is seen."""
    root = run.root.session_id
    child = run.session_id
    if event.type == J.APPROVAL_REQUESTED:
        approval_id = J.APPROVAL_REQUESTED.of(event)["approval_id"]
        record = await book.ensure_from_journal(child, approval_id, near_seq=event.seq)
        if record is not None:
            announced = {k: v for k, v in record.items() if k != "owner"}
            announced["child_session_id"] = child
            hub.live(root, "pending_approval", announced)
    elif event.type == J.APPROVAL_DECIDED:
        decided = J.APPROVAL_DECIDED.of(event)
        hub.live(
            root,
            "approval_decided",
            {
                "session_id": child,
                "child_session_id": child,
                "step": decided["step"],
                "call_id": decided["call_id"],
                "approval_id": decided["approval_id"],
                "approved": decided["approved"],
                "decided_by": decided["decided_by"],
            },
        )


class RunRegistry:
    """Starts, tracks, drains and recovers the runs of this process."""

    def __init__(
        self,
        hub: Hub,
        settings: ServerSettings,
        book: ApprovalBook,
        *,
        outage: StoreOutage | None = None,
    ) -> None:
        self._agent: KoboiAgent | None = None
        self.hub = hub
        self.book = book
        self.settings = settings
        self.runs: dict[str, ActiveRun] = {}
        self.draining = False
        #: Set by a signal handler (nothing else is safe there); the app starts draining.
        self.drain_requested = False
        self._drain_started: float | None = None
        #: Runs and reserved slots of each principal.
        self._per_principal: Counter[str | None] = Counter()
        #: Slots reserved and not yet handed to a run.
        self._reserved = 0
        self._recovery_errors = LoopErrors(
            "looking for interrupted sessions", outage or StoreOutage()
        )
        self._changed = anyio.Event()
        self._tg: TaskGroup | None = None
        #: Sessions recovery must not try again (they cannot be resumed).
        self._unrecoverable: set[str] = set()
        #: The session of the run of this process each child run belongs to.
        self._roots: dict[str, str] = {}

    def bind(self, agent: KoboiAgent) -> None:
        """The agent whose runs this registry executes (made after the registry: the
        agent's interceptors include :meth:`observer`)."""
        self._agent = agent

    @property
    def agent(self) -> KoboiAgent:
        if self._agent is None:
            raise RuntimeError("RunRegistry.bind(agent) was not called")
        return self._agent

    def attach(self, task_group: TaskGroup) -> None:
        self._tg = task_group

    def _signal(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # -- starting -------------------------------------------------------------------------

    def admit(self, owner: str | None) -> None:
        """Refuse a new run when the server is draining or at its limits (a check only:
        :meth:`reserve` is the check that holds the place)."""
        if self.draining or self._tg is None:
            raise ApiError(
                503,
                "shutting_down",
                "this server is shutting down; send the request to another replica or retry",
                headers={"Retry-After": "2"},
            )
        running = len(self.runs) + self._reserved
        if running >= self.settings.max_concurrent_runs:
            raise ApiError(
                429,
                "too_many_runs",
                f"this server already executes {running} runs "
                "(server.max_concurrent_runs); retry later",
                headers={"Retry-After": "1"},
            )
        if self._per_principal[owner] >= self.settings.max_runs_per_principal:
            raise ApiError(
                429,
                "too_many_runs",
                f"you already have {self._per_principal[owner]} runs in progress on this server "
                "(server.max_runs_per_principal); retry when one has ended",
                headers={"Retry-After": "1"},
            )

    def reserve(self, owner: str | None) -> Slot:
        """Check the limits and hold a place for one run of ``owner``, in one step.

        Nothing is awaited between the check and the count, so of concurrent requests
        only as many as the limits allow get a slot; the others are refused (429, or
        503 when draining) before they create anything. Hand the slot to
        :meth:`start`, or give it back with :meth:`release` (a no-op once spent).
        """
        self.admit(owner)
        self._reserved += 1
        self._per_principal[owner] += 1
        return Slot(owner)

    def release(self, slot: Slot) -> None:
        """Give back a slot no run took. Safe to call on a spent slot."""
        if slot.spent:
            return
        slot.spent = True
        self._reserved -= 1
        self._uncount(slot.owner)

    def _uncount(self, owner: str | None) -> None:
        self._per_principal[owner] -= 1
        if self._per_principal[owner] <= 0:
            del self._per_principal[owner]

    async def start(
        self,
        session_id: str,
        owner: str | None,
        message: str | None,
        *,
        trace: TraceContext | None = None,
        slot: Slot | None = None,
    ) -> ActiveRun:
        """Start a run (``message``) or a resume (None) and wait until it has started.

        A session whose last run is suspended is continued, ``message`` being the reply
        (the kernel's rule). ``trace`` is the requester's trace context (a resume keeps
        the trace of the run it finishes). ``slot`` is a place :meth:`reserve` held for
        this run (the limits were checked then, and a drain that began since lets it
        start: the drain parks it like any run); without one the limits are checked
        now. Raises an :class:`ApiError` when it cannot start (busy, interrupted,
        limits); the slot is then still the caller's to release.
        """
        previous = self.runs.get(session_id)
        if previous is not None and previous.closing:
            # Its final event is out, so its client may already send the next message
            # (as the busy error below tells it to); the run is only closing its stream
            # and giving the session's lease back: wait for that rather than refuse.
            with anyio.move_on_after(_CLOSING_SECONDS):
                await previous.done.wait()
        if session_id in self.runs:
            raise ApiError(
                409,
                "session_busy",
                f"session {session_id} is running; wait for its final event, then send the "
                "next message",
            )
        if slot is None or slot.spent:
            slot = self.reserve(owner)
        assert self._tg is not None
        # The reserved place becomes the run's (the principal's count stays as it is).
        slot.spent = True
        self._reserved -= 1
        active = ActiveRun(session_id, owner, resuming=message is None)
        self.runs[session_id] = active
        self.hub.run_started(session_id)
        self._tg.start_soon(self._execute, active, message, trace)
        with anyio.CancelScope(shield=True):
            # The run goes on whatever happens to the requester; wait only for its start.
            while not (active.started.is_set() or active.done.is_set()):
                await active.changed.wait()
        if active.error is not None and not active.started.is_set():
            raise active.error
        return active

    async def _execute(
        self, active: ActiveRun, message: str | None, trace: TraceContext | None
    ) -> None:
        sid = active.session_id
        try:
            with anyio.CancelScope() as scope:
                active.scope = scope
                events = (
                    self.agent.stream(message, session_id=sid, trace=trace)
                    if message is not None
                    else self.agent.resume(sid)
                )
                async with contextlib.aclosing(events) as stream:
                    async for event in stream:
                        if not active.started.is_set():
                            active.started.set()
                            active.signal()
                        forward(self.hub, sid, event)
                        if isinstance(event, FinalEvent):
                            active.result = event.result
                            active.final_seq = event.event_id
        except FencedOut:
            active.suspended = True
            log.info("run of session %s suspended (its lease was taken over)", sid)
        except LeaseHeld as exc:
            active.error = ApiError(
                409, "session_busy", f"session {sid} is being run elsewhere: {exc}"
            )
        except SessionNotFound as exc:
            active.error = ApiError(404, "not_found", str(exc))
        except KoboiError as exc:
            text = describe_error(exc)
            active.error = await self._refusal(active, text)
            log.info("run of session %s did not complete: %s", sid, text)
        except Exception as exc:  # a bug: the requester gets a 500, the log its traceback
            log.exception("run of session %s failed", sid)
            active.error = ApiError(
                500, "internal_error", f"the run failed inside the server: {type(exc).__name__}"
            )
        finally:
            self.runs.pop(sid, None)
            for child in active.children:
                self._roots.pop(child, None)
            self._uncount(active.owner)
            self.hub.run_ended(sid)
            active.done.set()
            active.signal()
            self._signal()

    async def _refusal(self, active: ActiveRun, text: str) -> ApiError:
        """What to tell the requester of a run the kernel refused or stopped."""
        sid = active.session_id
        if active.started.is_set():
            return ApiError(409, "run_refused", text)
        try:
            interrupted = J.fold_state(await self.agent.store.read(sid)).interrupted
        except Exception:  # only a better answer is at stake: the plain refusal will do
            return ApiError(409, "run_refused", text)
        if interrupted and not active.resuming:
            if self._tg is not None and not self.draining:
                self._tg.start_soon(self.resume_if_idle, sid)
            return ApiError(
                409,
                "session_interrupted",
                f"session {sid}'s previous run was interrupted and is being resumed; follow "
                f"GET /v1/sessions/{sid}/events and send the message after its final event",
            )
        if not interrupted and active.resuming:
            self._unrecoverable.add(sid)
            return ApiError(409, "nothing_to_resume", text)
        return ApiError(409, "run_refused", text)

    # -- what the loop reports -----------------------------------------------------------

    def observer(self) -> Interceptor:
        return _RunObserver(self)

    def waiting_for_approval(self, session_id: str, approval_id: str, waiting: bool) -> None:
        # A child run's approval is its root run's: that run waits, and its requester is
        # the one to ask.
        active = self.runs.get(self._roots.get(session_id, session_id))
        if active is None:
            return
        if waiting:
            # A resumed run may wait for an approval before it commits anything: it has
            # started all the same.
            active.started.set()
            active.awaiting.add(approval_id)
        else:
            active.awaiting.discard(approval_id)
        active.signal()
        self._signal()

    async def child_event(self, event: JournalEvent, run: RunInfo) -> None:
        """An event of a child run (a sub-agent, a runner's node) of a run of this process:
        the run remembers its child (a JSON chat's 202 lists the child's approvals too),
        and the child's approvals are announced on the root run's streams."""
        root = run.root.session_id
        child = run.session_id
        active = self.runs.get(root)
        if active is not None and child not in active.children:
            active.children.add(child)
            self._roots[child] = root
        await announce_child_event(self.hub, self.book, event, run)

    async def _park(self, active: ActiveRun) -> None:
        active.parked = True
        active.signal()
        self._signal()
        await anyio.sleep_forever()

    # -- stopping --------------------------------------------------------------------------

    def begin_drain(self) -> None:
        """Refuse new runs, park the others at their next boundary. Safe to call twice."""
        if not self.draining:
            log.info("draining: %d run(s) in progress", len(self.runs))
            self._drain_started = time.monotonic()
        self.draining = True
        self.hub.wake_all()
        self._signal()

    def drain_time_left(self) -> float:
        """What is left of ``server.drain_seconds`` since draining began."""
        if self._drain_started is None:
            return self.settings.drain_seconds
        return max(0.0, self.settings.drain_seconds - (time.monotonic() - self._drain_started))

    async def drain(self, seconds: float) -> None:
        """Let runs finish or park for at most ``seconds``, then suspend what is left."""
        self.begin_drain()
        with anyio.move_on_after(seconds):
            while self.runs and not all(r.idle for r in self.runs.values()):
                changed = self._changed
                await changed.wait()
        runs = list(self.runs.values())
        for active in runs:
            await self.suspend(active)
        with anyio.move_on_after(5):
            for active in runs:
                await active.done.wait()

    async def suspend(self, active: ActiveRun) -> None:
        """Stop a run leaving its session interrupted and resumable (see the module doc)."""
        store = self.agent.store
        sid = active.session_id
        lease = None
        with anyio.CancelScope(shield=True):
            try:
                lease = await store.acquire_lease(
                    sid,
                    f"{self.agent.holder}:drain",
                    self.agent.config.agent.lease_seconds,
                    take_over_from=self.agent.holder,
                )
            except Exception as exc:  # stopping the run matters more: it is cancelled anyway
                log.warning("could not fence session %s before stopping it: %s", sid, exc)
            if active.scope is not None:
                active.scope.cancel()
            with anyio.move_on_after(5):
                await active.done.wait()
            if lease is not None:
                with contextlib.suppress(Exception):  # it expires anyway
                    await store.release_lease(lease)

    # -- recovery -------------------------------------------------------------------------

    async def recover(self) -> int:
        """Resume interrupted server sessions nobody runs; return how many were started."""
        if self.draining or not self.settings.resume_interrupted:
            return 0
        started = 0
        for info in await self.agent.store.list_sessions(status="running", limit=10_000):
            if self.draining:
                break
            if await self._resume(info):
                started += 1
        return started

    async def resume_if_idle(self, session_id: str) -> bool:
        """Resume one interrupted server session now, if nobody runs it."""
        if self.draining or not self.settings.resume_interrupted or session_id in self.runs:
            return False
        try:
            info = await self.agent.store.get_session(session_id)
        except SessionNotFound:
            return False
        return await self._resume(info)

    async def _resume(self, info: SessionInfo) -> bool:
        sid = info.id
        if (
            info.status != "running"
            or info.metadata.get("origin") != ORIGIN
            or sid in self.runs
            or sid in self._unrecoverable
        ):
            return False
        lease = await self.agent.store.get_lease(sid)
        if (
            lease is not None
            and lease.expires_at > time.time()
            and not holder_is_dead(lease.holder)
        ):
            return False  # someone alive runs it (or just stopped: its lease will tell)
        try:
            await self.start(sid, info.owner, None)
        except ApiError as exc:
            log.info("session %s not resumed now: %s", sid, exc.message)
            return False
        log.info("resumed interrupted session %s", sid)
        return True

    async def recover_forever(self, interval: float) -> None:
        """:meth:`recover` every ``interval`` seconds. A store that fails is said once for
        the whole outage; another error with its traceback, once while it repeats."""
        errors = self._recovery_errors
        while True:
            try:
                await self.recover()
            except Exception as exc:  # recovery must outlive any pass that fails: logged, retried
                errors.failed(exc)
            else:
                errors.ok()
            await anyio.sleep(interval)


class _RunObserver(Interceptor):
    """Wakes the streams of a session at each commit; parks runs at a boundary when draining."""

    name = "server"
    priority = 10_000

    def __init__(self, registry: RunRegistry) -> None:
        self.registry = registry

    async def on_event(self, event: JournalEvent, run: RunInfo) -> None:
        registry = self.registry
        active = registry.runs.get(run.session_id)
        if active is None:
            if run.parent is not None:
                try:
                    await registry.child_event(event, run)
                except Exception as exc:  # an observer never stops the run; it is logged
                    log.warning(
                        "announcing event %s of child session %s: %s",
                        event.type,
                        run.session_id,
                        describe_error(exc),
                    )
            return  # a run this server did not start (or a child: announced above)
        is_model_call = event.type == J.MODEL_CALL_STARTED
        step = J.MODEL_CALL_STARTED.of(event)["step"] if is_model_call else None
        if event.type == J.RUN_FINISHED:
            active.closing = True  # before any stream can send the final event
        registry.hub.committed(run.session_id, event.seq, model_call_step=step)
        if not active.started.is_set() and event.type in (J.RUN_STARTED, J.RUN_RESUMED):
            active.started.set()
            active.signal()
        if event.type == J.APPROVAL_REQUESTED:
            # Recorded before anyone can learn the approval's id from the journal's stream
            # (whatever the approver): so it can be looked up and answered by id at once.
            approval_id = J.APPROVAL_REQUESTED.of(event)["approval_id"]
            try:
                await registry.book.ensure_from_journal(
                    run.session_id, approval_id, near_seq=event.seq
                )
            except Exception as exc:  # an observer never stops the run; its failure is logged
                if is_store_failure(exc):
                    log.warning("recording approval %s: the store failed: %s", approval_id, exc)
                else:
                    log.exception("recording approval %s", approval_id)
        if is_model_call and registry.draining:
            # Nothing is uncommitted right after this commit and the model has not been
            # asked yet: the run can stop here and resume by asking again.
            await registry._park(active)
