"""Background jobs: submitted once, run by whichever process claims them, resumed by another
when that one dies.

A job is a row in the store (:meth:`koboi.store.Store.create_job`) and a session of
its own. A :class:`JobRunner` (one per ``koboi serve`` process, or any process
sharing the store) claims the oldest job with a fenced lease, renews the lease
while the run goes on, and records how it ended. When a process dies mid-job its
lease runs out; the next claimer resumes the session from its journal with the
durable-journal guarantees (no finished step runs again, no non-idempotent call
is replayed), or, when the run had already finished and only the job's status
was lost, takes the result from the journal without running anything.

Jobs run autonomously: nobody sits at a terminal, so the unattended-destruction rule applies
(destructive tools only in an isolating sandbox), and a call that needs approval
waits for the approver the runner was given (the server's HTTP approver) with the
job ``awaiting_approval`` meanwhile.

A run that *suspends* (a tool called ``ctx.suspend(...)``: it waits for input)
leaves its job ``waiting_input``, with the suspension in its result; such a job is
never claimed. :func:`provide_input` stores the reply (once per suspension, in a
keyed record) and queues the job again; the runner that claims it then continues
the run with that reply (``agent.resume(..., reply=...)``). The reply is in the
store, so a runner that dies meanwhile leaves the job to the next, like any job.

Every run of a job belongs to the W3C trace the job was submitted in (kept in its
request), or to the trace of the request that gave its input.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import socket
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import anyio

from koboi import journal as J
from koboi.agent import KoboiAgent
from koboi.approval import Approver
from koboi.config import AgentConfig
from koboi.errors import FencedOut, KoboiError, LeaseHeld, SessionNotFound, StoreError
from koboi.events import AgentEvent, FinalEvent
from koboi.interceptors import Interceptor, RunInfo
from koboi.logs import get_logger
from koboi.store import (
    Job,
    JobQueue,
    JobStatus,
    JournalEvent,
    KeyedRecords,
    RecordWrite,
    Store,
    jobs_of,
    new_session_id,
    records_of,
)
from koboi.tracing import TraceContext
from koboi_server.outages import LoopErrors, StoreOutage, is_store_failure, mark_store_failure

log = get_logger("koboi.server")

#: The ``request`` of a job: what to run.
JobRequest = Mapping[str, Any]

JobCallback = Callable[[Job], Awaitable[None]]

#: Given a job as it is about to be finished (or to wait for input), the records to
#: store in the same transaction as that status (its webhook deliveries).
JobOutbox = Callable[[Job], Awaitable[Sequence[RecordWrite]]]

#: Keyed records holding the reply given to a job waiting for input (one per suspension).
INPUT_KIND = "server.job_input"

_RECORDS_FEATURE = "background jobs (their input and outbox)"

#: Seconds within which a second store failure of the same job leaves it to its lease
#: instead of releasing it again.
STORE_RETRY_WINDOW = 60.0
_JOBS_FEATURE = "background jobs"


class RunWatcher(Protocol):
    """Told what a job's run does as it happens (the server feeds its streams with it)."""

    def run_started(self, session_id: str) -> None: ...

    def run_event(self, session_id: str, event: AgentEvent) -> None: ...

    def run_ended(self, session_id: str) -> None: ...


class JobNotWaiting(KoboiError):
    """Input was given to a job that does not wait for any (``job`` is as it is now)."""

    def __init__(self, job: Job) -> None:
        super().__init__(
            f"job {job.id} is {job.status}; only a job waiting for input (waiting_input) takes one"
        )
        self.job = job


class InputAlreadyGiven(KoboiError):
    """Another reply was given first to this suspension of the job."""


async def submit_job(
    store: Store,
    *,
    owner: str | None,
    input: str,
    metadata: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
    request_hash: str | None = None,
    webhook: Mapping[str, str] | None = None,
    trace: TraceContext | None = None,
) -> tuple[Job, bool]:
    """Queue a run of ``input`` in a new session; return the job and whether it is new.

    The session is created by the process that first runs the job, so a replayed
    idempotent submission leaves nothing behind. ``webhook`` (``url``, ``secret``) is
    the job's own receiver of ``job.finished``; it is kept in the job's request, and so
    is ``trace`` (the submitter's trace context), which every run of the job joins.
    """
    if not input.strip():
        raise KoboiError("a job needs a non-empty input")
    request: dict[str, Any] = {"input": input, "metadata": dict(metadata or {})}
    if webhook is not None:
        request["webhook"] = {"url": webhook["url"], "secret": webhook["secret"]}
    if trace is not None:
        request["trace"] = dict(trace.to_data())
    return await jobs_of(store, _JOBS_FEATURE).create_job(
        session_id=new_session_id(),
        owner=owner,
        request=request,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
    )


async def ensure_job_session(store: Store, job: Job, config: AgentConfig) -> None:
    """Create the job's session (owned by the job's owner) unless it exists.

    Whoever needs it first makes it: the runner that claims the job, or a client
    that follows a job still queued. Of two racing creators one wins; the other
    finds the session made.
    """
    try:
        await store.get_session(job.session_id)
    except SessionNotFound:
        with contextlib.suppress(StoreError):
            await store.create_session(
                job.session_id,
                owner=job.owner,
                config_name=config.agent.name,
                config_hash=config.config_hash,
                metadata={"job": job.id},
            )


def job_trace(job: Job) -> TraceContext | None:
    """The trace context the job was submitted in, if any."""
    return TraceContext.from_data(job.request.get("trace"))


def input_key(job: Job) -> str:
    """The key of the input record of the suspension ``job`` waits at."""
    result = job.result or {}
    return f"{job.id}:{int(result.get('suspended_event_id') or 0)}"


def _same_reply(a: Any, b: Any) -> bool:
    def canonical(value: Any) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)

    return canonical(a) == canonical(b)


async def provide_input(
    store: Store,
    job_id: str,
    reply: Any,
    *,
    trace: TraceContext | None = None,
    given_by: str | None = None,
) -> Job:
    """Give the reply a job ``waiting_input`` waits for, and queue it again.

    The reply is kept in a keyed record (kind :data:`INPUT_KIND`, one per suspension)
    written in the same transaction that queues the job again
    (:meth:`~koboi.store.JobQueue.requeue_job`, fenced by the job as it was read): of
    concurrent replies to one suspension exactly one is kept and queues the job;
    another one raises :class:`InputAlreadyGiven`, and the same one again is accepted
    (it answers the job as it is now). The runner that claims the job continues the
    run with the reply (``trace``, when given, is the trace that continuation joins).
    Raises :class:`JobNotWaiting` for a job in another status, and
    :class:`~koboi.errors.JobNotFound`.
    """
    queue = jobs_of(store, _JOBS_FEATURE)
    records = records_of(store, _RECORDS_FEATURE)
    job = await queue.get_job(job_id)
    if job.status != "waiting_input" or job.cancel_requested:
        raise JobNotWaiting(job)
    key = input_key(job)
    given: dict[str, Any] = {
        "job_id": job.id,
        "reply": reply,
        "given_at": time.time(),
        "given_by": given_by,
    }
    if trace is not None:
        given["trace"] = dict(trace.to_data())
    kept = await records.record_get(INPUT_KIND, key)
    if kept is not None:
        # Stored, but the job is still waiting: a reply given by a version of the server
        # that stored it before queueing the job, whose process died in between.
        _check_same_reply(job, kept, reply)
        writes: Sequence[RecordWrite] = ()
    else:
        writes = [(INPUT_KIND, key, given)]
    try:
        return await queue.requeue_job(job, records=writes)
    except FencedOut:
        current = await queue.get_job(job_id)
        first = await records.record_get(INPUT_KIND, key)
        if first is None:
            # Nobody replied to this suspension: the job moved on otherwise (cancelled).
            raise JobNotWaiting(current) from None
        _check_same_reply(current, first, reply)
        return current  # a twin request queued it first


def _check_same_reply(job: Job, kept: Mapping[str, Any], reply: Any) -> None:
    if not _same_reply(kept.get("reply"), reply):
        raise InputAlreadyGiven(
            f"job {job.id} already received another reply for what it waits for; it "
            "continues with that one"
        )


async def cancel_waiting(store: Store, job: Job, *, outbox: JobOutbox | None = None) -> Job:
    """Finish ``job``, which waits for input and has nobody running it, as ``cancelled``.

    What a runner does for a running job that is cancelled; the job.finished
    deliveries of ``outbox`` are written with the status. A job that moved on meanwhile
    (input arrived first) is returned as it is: its runner sees the cancellation.
    """
    queue = jobs_of(store, _JOBS_FEATURE)
    result = {
        "outcome": "cancelled",
        "output": "",
        "error": "the job was cancelled while it waited for input",
        "steps": int((job.result or {}).get("steps") or 0),
    }
    records: Sequence[RecordWrite] = ()
    if outbox is not None:
        with contextlib.suppress(Exception):  # an outbox failure must not keep the cancel
            records = await outbox(replace(job, status="cancelled", result=result))
    try:
        return await queue.update_job(job, status="cancelled", result=result, records=records)
    except FencedOut:
        return await queue.get_job(job.id)


def default_holder() -> str:
    """Who claims jobs: host, process and a random part (as session leases name holders)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class _Running:
    job: Job
    cancel_scope: anyio.CancelScope
    cancelled: bool = False
    lost: bool = False
    #: Stopped by :meth:`JobRunner.suspend_all`: the job is left resumable.
    suspended: bool = False
    #: Parked at a journal boundary while the runner drains.
    parked: bool = False
    #: The store failure that left the job resumable instead of finished.
    store_failure: BaseException | None = None


class _StatusObserver(Interceptor):
    """Marks the job ``awaiting_approval`` while its run waits for a decision."""

    name = "jobs"
    priority = 1000

    def __init__(self, runner: JobRunner) -> None:
        self.runner = runner

    async def on_event(self, event: JournalEvent, run: RunInfo) -> None:
        # A child run's (a sub-agent's, a runner's node's) approvals are its job's.
        running = self.runner._running.get(run.root.session_id)
        if running is None or running.lost:
            return
        if event.type == J.MODEL_CALL_STARTED and self.runner.draining and run.parent is None:
            # Nothing is uncommitted right after this commit: the run can stop here and
            # be resumed (by this process restarted, or another) by asking the model again.
            running.parked = True
            self.runner._changed()
            await anyio.sleep_forever()
        status: JobStatus
        if event.type == J.APPROVAL_REQUESTED:
            status = "awaiting_approval"
        elif event.type == J.APPROVAL_DECIDED:
            status = "running"
        else:
            return
        with contextlib.suppress(FencedOut, StoreError):
            running.job = await self.runner.queue.update_job(running.job, status=status)
        self.runner._changed()


class JobRunner:
    """Claims jobs from the agent's store and runs them, one at a time per call of :meth:`run_one`.

    :param config: the agent's config; each job runs as this agent.
    :param approver: who decides on calls that need approval (the server's HTTP
        approver); without one such calls are denied, as everywhere.
    :param holder: the name this runner claims jobs under.
    :param lease_seconds: how long a claim lasts without renewal; renewed every
        third of it. A runner that dies loses its jobs to others after this long.
    :param outbox: awaited with the job as it is about to be finished (final status
        and result set) or to wait for input (``waiting_input``); the records it
        returns are written in the same transaction as that status, so a crash never
        leaves a finished job without them (its webhook deliveries) nor them without
        it. Its failures are ignored.
    :param on_finished: awaited with each job that reached a final status or waits
        for input, after that status was written; its failures are ignored.
    :param store: an already open store to share (the server's): the runner's agent
        uses it but never opens or closes it — its owner does. The store needs a job
        queue and keyed records (checked when the runner opens).
    :param watcher: told when a job's run starts and ends and of every event it
        yields (text deltas, live events...), to feed streams; its failures are ignored.
    :param outage: where :meth:`serve` reports store failures (the server shares one
        between its background loops, so an outage is logged once).

    A failure of the store during a job (a connection cut, the database restarted: see
    :func:`koboi_server.outages.is_store_failure`) does not fail the job: it is left
    resumable, as a crash leaves it, and the next claim resumes its run from the
    journal (the in-doubt rule applies to a call that was in flight). The job is
    released at once the first time; a store failure of the same job again within
    :data:`STORE_RETRY_WINDOW` seconds leaves it to its lease, so a store that keeps
    failing is not hammered.
    """

    def __init__(
        self,
        config: AgentConfig,
        *,
        approver: Approver | None = None,
        holder: str | None = None,
        lease_seconds: float = 30.0,
        poll_seconds: float = 0.5,
        on_finished: JobCallback | None = None,
        outbox: JobOutbox | None = None,
        store: Store | None = None,
        watcher: RunWatcher | None = None,
        outage: StoreOutage | None = None,
        **agent_options: Any,
    ) -> None:
        if lease_seconds <= 0 or poll_seconds <= 0:
            raise KoboiError("lease_seconds and poll_seconds must be positive")
        self.holder = holder or default_holder()
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.on_finished = on_finished
        self.outbox = outbox
        self.watcher = watcher
        self.outage = outage or StoreOutage()
        self._queue: JobQueue | None = None
        self._records: KeyedRecords | None = None
        self._running: dict[str, _Running] = {}
        #: Jobs whose run met a store failure here lately (job id -> time.monotonic()).
        self._store_failures: dict[str, float] = {}
        #: Set by :meth:`begin_drain`: claim nothing more, park runs at a boundary.
        self.draining = False
        self._change = anyio.Event()
        extra: Sequence[Interceptor] = agent_options.pop("interceptors", ())
        self.agent = KoboiAgent(
            config,
            approver=approver,
            autonomous=True,
            interceptors=[*extra, _StatusObserver(self)],
            store=_SharedStore(store) if store is not None else None,  # type: ignore[abstract]
            **agent_options,
        )

    async def __aenter__(self) -> JobRunner:
        await self.agent.open()
        try:
            self._queue = jobs_of(self.agent.store, _JOBS_FEATURE)
            self._records = records_of(self.agent.store, _RECORDS_FEATURE)
        except BaseException:  # close what was opened, whatever stopped the opening
            await self.agent.close()
            raise
        return self

    @property
    def queue(self) -> JobQueue:
        """The job queue of the runner's store (once the runner is open)."""
        if self._queue is None:
            raise KoboiError("the job runner is not open: use 'async with JobRunner(...)'")
        return self._queue

    @property
    def records(self) -> KeyedRecords:
        """The keyed records of the runner's store (once the runner is open)."""
        if self._records is None:
            raise KoboiError("the job runner is not open: use 'async with JobRunner(...)'")
        return self._records

    async def __aexit__(self, *exc: object) -> None:
        await self.agent.close()

    def _changed(self) -> None:
        self._change.set()
        self._change = anyio.Event()

    @property
    def running_jobs(self) -> int:
        """Jobs this runner works on now."""
        return len(self._running)

    def runs_session(self, session_id: str) -> bool:
        """Whether this runner is running the job whose session is ``session_id``."""
        return session_id in self._running

    def begin_drain(self) -> None:
        """Claim nothing more; park running jobs at their next journal boundary."""
        self.draining = True
        self._changed()

    async def drain(self, seconds: float) -> None:
        """Let running jobs finish or park for at most ``seconds``, then suspend the rest.

        A suspended job is left as a crash would leave it, its session interrupted and
        resumable and the job ``running``, except that its lease is given up at once:
        any runner sharing the store (another replica, or this one restarted) claims
        and resumes it without waiting for the lease to run out. It is never recorded
        ``cancelled``.
        """
        self.begin_drain()
        with anyio.move_on_after(seconds):
            while self._running and not all(
                r.parked or r.job.status == "awaiting_approval" for r in self._running.values()
            ):
                change = self._change
                await change.wait()
        await self.suspend_all()

    async def suspend_all(self) -> None:
        """Stop every running job, leaving it resumable (see :meth:`drain`)."""
        store = self.agent.store
        with anyio.CancelScope(shield=True):
            for running in list(self._running.values()):
                running.suspended = True
                sid = running.job.session_id
                lease = None
                # Fence the run first: once the session's lease is not its own, the
                # run can write nothing more (no "cancelled" in the journal).
                with contextlib.suppress(Exception):  # not fenced: it stops all the same
                    lease = await store.acquire_lease(
                        sid,
                        f"{self.agent.holder}:drain",
                        self.agent.config.agent.lease_seconds,
                        take_over_from=self.agent.holder,
                    )
                running.cancel_scope.cancel()
                with anyio.move_on_after(5):
                    while sid in self._running:
                        change = self._change
                        await change.wait()
                if lease is not None:
                    with contextlib.suppress(Exception):  # it expires anyway
                        await store.release_lease(lease)
                # Give the job up now rather than let its lease run out, so another
                # replica (or this one restarted) resumes it at once.
                with contextlib.suppress(Exception):  # else its lease runs out
                    await self.queue.release_job(running.job)

    async def serve(self, stop: anyio.Event | None = None) -> None:
        """Run jobs until ``stop`` is set (or forever), waiting ``poll_seconds`` when idle.

        A store that fails is retried every ``poll_seconds`` (said once in the log); any
        other error stops it.
        """
        errors = LoopErrors("job runner", self.outage)
        while (stop is None or not stop.is_set()) and not self.draining:
            try:
                job = await self.run_one(errors=errors)
            except Exception as exc:  # a store failure is retried; anything else stops it
                if not is_store_failure(exc):
                    raise
                errors.failed(exc)
                job = None
            if job is None:
                with anyio.move_on_after(self.poll_seconds):
                    if stop is not None:
                        await stop.wait()
                    else:
                        await anyio.sleep(self.poll_seconds)

    async def run_one(self, *, errors: LoopErrors | None = None) -> Job | None:
        """Claim one job and run it to a final status; None when there was nothing to run.

        Also None when the job was taken over by another process meanwhile (this
        runner then stopped working on it and wrote nothing more), and when the store
        failed under it (the job is left resumable). ``errors``, the loop calling it, is
        told when the store answered all the way (a claim found nothing, or a job
        reached its status); a store failure is said by the job's own line.
        """
        if self.draining:
            return None
        job = await self.queue.claim_job(self.holder, self.lease_seconds)
        if job is None:
            if errors is not None:
                errors.ok()
            return None
        running = _Running(job=job, cancel_scope=anyio.CancelScope())
        self._running[job.session_id] = running
        try:
            finished = await self._run(running)
        finally:
            self._running.pop(job.session_id, None)
            self._changed()
        if errors is not None and running.store_failure is None:
            errors.ok()
        if finished is not None and self.on_finished is not None:
            with contextlib.suppress(Exception):  # documented: its failures are ignored
                await self.on_finished(finished)
        return finished

    async def _run(self, running: _Running) -> Job | None:
        outcome: dict[str, Any] | None = None
        store_failure: BaseException | None = None
        async with anyio.create_task_group() as heartbeat:
            heartbeat.start_soon(self._keep_lease, running)
            try:
                with running.cancel_scope:
                    outcome = await self._execute(running.job)
            except FencedOut:
                # The session was taken over (by whoever holds the job now, or a drain):
                # the run wrote nothing more, and neither does the runner.
                running.lost = True
            except Exception as exc:  # whatever ends a run ends its job: failed, unless...
                if is_store_failure(exc):
                    store_failure = exc  # ...the store failed: the job is resumable
                else:
                    outcome = {"outcome": "failed", "error": f"{type(exc).__name__}: {exc}"}
            finally:
                heartbeat.cancel_scope.cancel()
        if running.suspended:
            return None
        if running.lost:
            await self._taken_over(running)
            return None
        if store_failure is not None:
            await self._leave_resumable(running, store_failure)
            return None
        status: JobStatus
        if running.cancelled or outcome is None:
            status = "cancelled"
            result = {"outcome": "cancelled", "error": "the job was cancelled"}
        elif outcome.get("outcome") == "suspended":
            # Waits for input: not claimed again until provide_input() queues it.
            status = "waiting_input"
            result = outcome
        else:
            status = "completed" if outcome.get("outcome") == "completed" else "failed"
            result = outcome
        records: Sequence[RecordWrite] = ()
        if self.outbox is not None:
            with contextlib.suppress(Exception):  # documented: the outbox's failures are ignored
                records = await self.outbox(replace(running.job, status=status, result=result))
        try:
            updated = await self.queue.update_job(
                running.job, status=status, result=result, records=records
            )
        except FencedOut:
            await self._taken_over(running)
            return None
        except Exception as exc:  # a store failure leaves the job resumable; others propagate
            if not is_store_failure(exc):
                raise
            # The run ended and its end is in the journal; the next claim reads it there.
            await self._leave_resumable(running, exc, recording=True)
            return None
        self._store_failures.pop(running.job.id, None)
        return updated

    async def _taken_over(self, running: _Running) -> None:
        """Say (one line) that another process took the job over; this one wrote nothing more."""
        job = running.job
        current: Job | None = None
        with anyio.move_on_after(5, shield=True):
            with contextlib.suppress(StoreError):
                current = await self.queue.get_job(job.id)
        if current is not None and current.fence == job.fence and current.holder == job.holder:
            # Only the session was taken (the job is still this runner's): give the job up
            # so that the next claim resumes it.
            with anyio.move_on_after(5, shield=True), contextlib.suppress(StoreError):
                await self.queue.release_job(current)
            log.info(
                "job %s: its session was taken over while this process held the job; "
                "stopped running it, and released the job for the next claim",
                job.id,
            )
            return
        if current is None:
            who = "another process (the store did not say which)"
        elif current.done:
            who = f"another process, which finished it ({current.status})"
        elif current.holder:
            who = f"{current.holder} (claim {current.attempts})"
        else:
            who = f"another process (the job is {current.status} now)"
        log.info(
            "job %s: suspended here, its lease was taken over by %s; this process stopped "
            "running it and wrote nothing more",
            job.id,
            who,
        )

    async def _leave_resumable(
        self, running: _Running, exc: BaseException, *, recording: bool = False
    ) -> None:
        """Leave a job whose store failed as a crash would: resumable by the next claim."""
        running.store_failure = exc
        job = running.job
        now = time.monotonic()
        for job_id, at in list(self._store_failures.items()):
            if now - at > STORE_RETRY_WINDOW:
                del self._store_failures[job_id]
        again = job.id in self._store_failures
        self._store_failures[job.id] = now
        released = False
        if not again:
            with anyio.move_on_after(5, shield=True), contextlib.suppress(StoreError):
                await self.queue.release_job(job)
                released = True
        if released:
            how = "released, so the next claim resumes it now"
        else:
            how = f"the next claim resumes it once its lease runs out ({self.lease_seconds:g} s)"
        log.warning(
            "job %s: the store failed %s (%s); the job is left resumable: %s",
            job.id,
            "as its end was recorded" if recording else "during its run",
            " ".join(str(exc).split()) or type(exc).__name__,
            how,
        )

    async def _keep_lease(self, running: _Running) -> None:
        while True:
            await anyio.sleep(self.lease_seconds / 3)
            try:
                running.job = await self.queue.renew_job(running.job, self.lease_seconds)
            except FencedOut:
                # Another process owns the job now: stop at once, write nothing more.
                running.lost = True
                running.cancel_scope.cancel()
                return
            except StoreError:
                continue  # a passing store failure: the next renewal may succeed
            if running.job.cancel_requested and not running.cancelled:
                running.cancelled = True
                running.cancel_scope.cancel()

    async def _execute(self, job: Job) -> dict[str, Any]:
        """Run the job's session: start it, resume it, or read how it already ended."""
        await ensure_job_session(self.agent.store, job, self.agent.config)
        while True:
            try:
                return await self._continue(job)
            except LeaseHeld as held:
                # The process that ran this session before died (that is why the job
                # was claimed again); its hold on the session runs out by itself.
                await anyio.sleep(min(max(0.05, held.expires_at - time.time()), 5.0))

    async def _continue(self, job: Job) -> dict[str, Any]:
        sid = job.session_id
        events = await self.agent.store.read(sid)
        state = J.fold_state(events)
        if state.interrupted:
            # Taken over (or stopped) mid-run: finish it, in the trace it was in.
            return await self._drive(sid, self.agent.resume(sid))
        ended = next((e for e in reversed(events) if e.type == J.RUN_FINISHED), None)
        if state.suspended is not None and ended is not None:
            given = await self.records.record_get(INPUT_KIND, f"{job.id}:{ended.seq}")
            if given is None:
                # The run suspended before the job's status was written (the process
                # died in between): it still waits, nothing runs.
                return _summary_of(J.RUN_FINISHED.of(ended), ended.seq)
            trace = TraceContext.from_data(given.get("trace")) or job_trace(job)
            reply = given.get("reply")
            return await self._drive(sid, self.agent.resume(sid, reply=reply, trace=trace))
        if ended is not None:
            # The run ended before the job's status was written (the process died in
            # between): its result is in the journal, nothing runs again.
            return _summary_of(J.RUN_FINISHED.of(ended), ended.seq)
        text = str(job.request.get("input", ""))
        return await self._drive(sid, self.agent.stream(text, session_id=sid, trace=job_trace(job)))

    async def _drive(
        self, session_id: str, events: AsyncGenerator[AgentEvent, None]
    ) -> dict[str, Any]:
        """Run ``events`` to its end, telling the watcher; the summary of its final event."""
        watcher = self.watcher
        final: FinalEvent | None = None
        if watcher is not None:
            _tell(watcher.run_started, session_id)
        try:
            async with contextlib.aclosing(events) as stream:
                async for event in stream:
                    if watcher is not None:
                        _tell(watcher.run_event, session_id, event)
                    if isinstance(event, FinalEvent):
                        final = event
        finally:
            if watcher is not None:
                _tell(watcher.run_ended, session_id)
        if final is None:  # pragma: no cover - a run always ends with a FinalEvent
            raise KoboiError("the job's run ended without a final event")
        result = final.result
        summary = _summary(result.outcome, result.output, result.error, result.steps)
        if result.suspension is not None:
            summary["suspension"] = dict(result.suspension)
            summary["suspended_event_id"] = final.event_id
        if result.refused_by is not None:
            summary["refused_by"] = result.refused_by
        return summary


def _tell(callback: Callable[..., None], *args: Any) -> None:
    with contextlib.suppress(Exception):  # documented: the watcher's failures are ignored
        callback(*args)


def _summary(outcome: str, output: str, error: Any, steps: int) -> dict[str, Any]:
    return {"outcome": outcome, "output": output, "error": error, "steps": steps}


def _summary_of(data: J.RunFinishedData, seq: int) -> dict[str, Any]:
    """The job result of a run that ended (``run_finished`` ``seq``), from the journal."""
    summary = _summary(data["outcome"], data.get("output", ""), data.get("error"), data["steps"])
    suspension = data.get("suspension")
    if data["outcome"] == "suspended" and suspension is not None:
        summary["suspension"] = dict(suspension)
        summary["suspended_event_id"] = seq
    if "refused_by" in data:
        summary["refused_by"] = data["refused_by"]
    return summary


class _SharedStore(Store):
    """An open store lent to the runner's agent: every call goes to the owner's store,
    except :meth:`open` and :meth:`close`, which are the owner's to make (once).

    An exception other than a :class:`~koboi.errors.KoboiError` that comes out of a store
    call is marked as a store failure (:func:`~koboi_server.outages.mark_store_failure`):
    the kernel re-raises it as it is when its journal write fails, and the runner must
    tell it from a failure of the run.
    """

    def __init__(self, inner: Store) -> None:
        object.__setattr__(self, "_inner", inner)

    def __getattribute__(self, name: str) -> Any:
        if name in ("open", "close", "_inner", "__class__", "__dict__"):
            return object.__getattribute__(self, name)
        if name == "wrapped":
            # What koboi.store.capability() looks through: the lent store's capabilities.
            return object.__getattribute__(self, "_inner")
        attribute = getattr(object.__getattribute__(self, "_inner"), name)
        if inspect.iscoroutinefunction(attribute):
            return _marking_failures(attribute)
        return attribute

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None


# Every abstract method is served by the wrapped store (__getattribute__).
_SharedStore.__abstractmethods__ = frozenset()


def _marking_failures(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except KoboiError:
            raise  # the store's own errors say what they are
        except Exception as exc:  # broad on purpose: anything else out of a store is its failure
            mark_store_failure(exc)
            raise

    return call
