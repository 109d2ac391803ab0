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
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from koboi import journal as J
from koboi.errors import FencedOut, KoboiError, LeaseHeld, SessionNotFound, describe_error
from koboi.events import FinalEvent, RunResult, TextDeltaEvent
from koboi.interceptors import Interceptor, RunInfo
from koboi.store import JournalEvent, SessionInfo, holder_is_dead
from koboi_server.approvals import ApprovalBook
from koboi_server.errors import ApiError
from koboi_server.hub import Hub

if TYPE_CHECKING:
    from koboi.agent import KoboiAgent
    from koboi_server.settings import ServerSettings

log = logging.getLogger("koboi.server")

#: Marks the sessions this server created (``SessionInfo.metadata["origin"]``).
ORIGIN = "koboi-server"


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
    #: Why the run could not start (or ended without a result), for the requester.
    error: ApiError | None = None
    suspended: bool = False
    parked: bool = False
    awaiting: set[str] = field(default_factory=set)
    scope: anyio.CancelScope | None = None

    def signal(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    @property
    def idle(self) -> bool:
        """At a journal boundary: safe to suspend without losing any work."""
        return self.parked or bool(self.awaiting)


class RunRegistry:
    """Starts, tracks, drains and recovers the runs of this process."""

    def __init__(self, hub: Hub, settings: ServerSettings, book: ApprovalBook) -> None:
        self._agent: KoboiAgent | None = None
        self.hub = hub
        self.book = book
        self.settings = settings
        self.runs: dict[str, ActiveRun] = {}
        self.draining = False
        #: Set by a signal handler (nothing else is safe there); the app starts draining.
        self.drain_requested = False
        self._drain_started: float | None = None
        self._per_principal: Counter[str | None] = Counter()
        self._changed = anyio.Event()
        self._tg: TaskGroup | None = None
        #: Sessions recovery must not try again (they cannot be resumed).
        self._unrecoverable: set[str] = set()

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
        """Refuse a new run when the server is draining or at its limits."""
        if self.draining or self._tg is None:
            raise ApiError(
                503,
                "shutting_down",
                "this server is shutting down; send the request to another replica or retry",
                headers={"Retry-After": "2"},
            )
        if len(self.runs) >= self.settings.max_concurrent_runs:
            raise ApiError(
                429,
                "too_many_runs",
                f"this server already executes {len(self.runs)} runs "
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

    async def start(self, session_id: str, owner: str | None, message: str | None) -> ActiveRun:
        """Start a run (``message``) or a resume (None) and wait until it has started.

        Raises an :class:`ApiError` when it cannot start (busy, interrupted, limits).
        """
        if session_id in self.runs:
            raise ApiError(
                409,
                "session_busy",
                f"session {session_id} is running; wait for its final event, then send the "
                "next message",
            )
        self.admit(owner)
        assert self._tg is not None
        active = ActiveRun(session_id, owner, resuming=message is None)
        self.runs[session_id] = active
        self._per_principal[owner] += 1
        self.hub.run_started(session_id)
        self._tg.start_soon(self._execute, active, message)
        with anyio.CancelScope(shield=True):
            # The run goes on whatever happens to the requester; wait only for its start.
            while not (active.started.is_set() or active.done.is_set()):
                await active.changed.wait()
        if active.error is not None and not active.started.is_set():
            raise active.error
        return active

    async def _execute(self, active: ActiveRun, message: str | None) -> None:
        sid = active.session_id
        try:
            with anyio.CancelScope() as scope:
                active.scope = scope
                events = (
                    self.agent.stream(message, session_id=sid)
                    if message is not None
                    else self.agent.resume(sid)
                )
                async with contextlib.aclosing(events) as stream:
                    async for event in stream:
                        if not active.started.is_set():
                            active.started.set()
                            active.signal()
                        if isinstance(event, TextDeltaEvent):
                            self.hub.text(sid, event.step, event.text)
                        elif isinstance(event, FinalEvent):
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
        except Exception as exc:
            log.exception("run of session %s failed", sid)
            active.error = ApiError(
                500, "internal_error", f"the run failed inside the server: {type(exc).__name__}"
            )
        finally:
            self.runs.pop(sid, None)
            self._per_principal[active.owner] -= 1
            if self._per_principal[active.owner] <= 0:
                del self._per_principal[active.owner]
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
        except Exception:
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
        active = self.runs.get(session_id)
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
            except Exception as exc:
                log.warning("could not fence session %s before stopping it: %s", sid, exc)
            if active.scope is not None:
                active.scope.cancel()
            with anyio.move_on_after(5):
                await active.done.wait()
            if lease is not None:
                with contextlib.suppress(Exception):
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
        while True:
            try:
                await self.recover()
            except Exception:
                log.exception("looking for interrupted sessions failed")
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
            return  # a sub-agent's session, or a run this server did not start
        is_model_call = event.type == J.MODEL_CALL_STARTED
        step = int(event.data.get("step", 0)) if is_model_call else None
        registry.hub.committed(run.session_id, event.seq, model_call_step=step)
        if not active.started.is_set() and event.type in (J.RUN_STARTED, J.RUN_RESUMED):
            active.started.set()
            active.signal()
        if event.type == J.APPROVAL_REQUESTED:
            # Recorded before anyone can learn the approval's id from the journal's stream
            # (whatever the approver): so it can be looked up and answered by id at once.
            try:
                await registry.book.ensure_from_journal(
                    run.session_id, str(event.data.get("approval_id")), near_seq=event.seq
                )
            except Exception:
                log.exception("recording approval %s", event.data.get("approval_id"))
        if is_model_call and registry.draining:
            # Nothing is uncommitted right after this commit and the model has not been
            # asked yet: the run can stop here and resume by asking again.
            await registry._park(active)
