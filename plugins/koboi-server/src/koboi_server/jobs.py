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

Jobs run autonomously: nobody sits at a terminal, so the C3 rule applies
(destructive tools only in an isolating sandbox), and a call that needs approval
waits for the approver the runner was given (the server's HTTP approver) with the
job ``awaiting_approval`` meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import anyio

from koboi.agent import KoboiAgent
from koboi.approval import Approver
from koboi.config import AgentConfig
from koboi.errors import FencedOut, KoboiError, LeaseHeld, SessionNotFound, StoreError
from koboi.interceptors import Interceptor, RunInfo
from koboi.journal import MODEL_CALL_STARTED, RUN_FINISHED, fold_state
from koboi.store import Job, JobStatus, JournalEvent, RecordWrite, Store, new_session_id

#: The ``request`` of a job: what to run.
JobRequest = Mapping[str, Any]

JobCallback = Callable[[Job], Awaitable[None]]

#: Given a job as it is about to be finished, the records to store in the same
#: transaction as its final status (the job.finished webhook deliveries).
JobOutbox = Callable[[Job], Awaitable[Sequence[RecordWrite]]]


async def submit_job(
    store: Store,
    *,
    owner: str | None,
    input: str,
    metadata: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
    request_hash: str | None = None,
    webhook: Mapping[str, str] | None = None,
) -> tuple[Job, bool]:
    """Queue a run of ``input`` in a new session; return the job and whether it is new.

    The session is created by the process that first runs the job, so a replayed
    idempotent submission leaves nothing behind. ``webhook`` (``url``, ``secret``) is
    the job's own receiver of ``job.finished``; it is kept in the job's request.
    """
    if not input.strip():
        raise KoboiError("a job needs a non-empty input")
    request: dict[str, Any] = {"input": input, "metadata": dict(metadata or {})}
    if webhook is not None:
        request["webhook"] = {"url": webhook["url"], "secret": webhook["secret"]}
    return await store.create_job(
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


class _StatusObserver(Interceptor):
    """Marks the job ``awaiting_approval`` while its run waits for a decision."""

    name = "jobs"
    priority = 1000

    def __init__(self, runner: JobRunner) -> None:
        self.runner = runner

    async def on_event(self, event: JournalEvent, run: RunInfo) -> None:
        running = self.runner._running.get(run.session_id)
        if running is None or running.lost:
            return
        if event.type == MODEL_CALL_STARTED and self.runner.draining:
            # Nothing is uncommitted right after this commit: the run can stop here and
            # be resumed (by this process restarted, or another) by asking the model again.
            running.parked = True
            self.runner._changed()
            await anyio.sleep_forever()
        status: JobStatus
        if event.type == "approval_requested":
            status = "awaiting_approval"
        elif event.type == "approval_decided":
            status = "running"
        else:
            return
        store = self.runner.agent.store
        with contextlib.suppress(FencedOut, StoreError):
            running.job = await store.update_job(running.job, status=status)
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
        and result set); the records it returns are written in the same transaction
        as that status, so a crash never leaves a finished job without them (its
        webhook deliveries) nor them without it. Its failures are ignored.
    :param on_finished: awaited with each job that reached a final status, after
        that status was written; its failures are ignored.
    :param store: an already open store to share (the server's): the runner's agent
        uses it but never opens or closes it — its owner does.
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
        **agent_options: Any,
    ) -> None:
        if lease_seconds <= 0 or poll_seconds <= 0:
            raise KoboiError("lease_seconds and poll_seconds must be positive")
        self.holder = holder or default_holder()
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.on_finished = on_finished
        self.outbox = outbox
        self._running: dict[str, _Running] = {}
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
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.agent.close()

    def _changed(self) -> None:
        self._change.set()
        self._change = anyio.Event()

    @property
    def running_jobs(self) -> int:
        """Jobs this runner works on now."""
        return len(self._running)

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
                with contextlib.suppress(Exception):
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
                    with contextlib.suppress(Exception):
                        await store.release_lease(lease)
                # Give the job up now rather than let its lease run out, so another
                # replica (or this one restarted) resumes it at once.
                with contextlib.suppress(Exception):
                    await store.release_job(running.job)

    async def serve(self, stop: anyio.Event | None = None) -> None:
        """Run jobs until ``stop`` is set (or forever), waiting ``poll_seconds`` when idle."""
        while (stop is None or not stop.is_set()) and not self.draining:
            if await self.run_one() is None:
                with anyio.move_on_after(self.poll_seconds):
                    if stop is not None:
                        await stop.wait()
                    else:
                        await anyio.sleep(self.poll_seconds)

    async def run_one(self) -> Job | None:
        """Claim one job and run it to a final status; None when there was nothing to run.

        Also None when the job was taken over by another process meanwhile (this
        runner then stopped working on it and wrote nothing more).
        """
        store = self.agent.store
        if self.draining:
            return None
        job = await store.claim_job(self.holder, self.lease_seconds)
        if job is None:
            return None
        running = _Running(job=job, cancel_scope=anyio.CancelScope())
        self._running[job.session_id] = running
        try:
            finished = await self._run(running)
        finally:
            self._running.pop(job.session_id, None)
            self._changed()
        if finished is not None and self.on_finished is not None:
            with contextlib.suppress(Exception):
                await self.on_finished(finished)
        return finished

    async def _run(self, running: _Running) -> Job | None:
        store = self.agent.store
        outcome: dict[str, Any] | None = None
        async with anyio.create_task_group() as heartbeat:
            heartbeat.start_soon(self._keep_lease, running)
            try:
                with running.cancel_scope:
                    outcome = await self._execute(running.job)
            except Exception as exc:
                outcome = {"outcome": "failed", "error": f"{type(exc).__name__}: {exc}"}
            finally:
                heartbeat.cancel_scope.cancel()
        if running.lost or running.suspended:
            return None
        status: JobStatus
        if running.cancelled or outcome is None:
            status = "cancelled"
            result = {"outcome": "cancelled", "error": "the job was cancelled"}
        else:
            status = "completed" if outcome.get("outcome") == "completed" else "failed"
            result = outcome
        records: Sequence[RecordWrite] = ()
        if self.outbox is not None:
            with contextlib.suppress(Exception):
                records = await self.outbox(replace(running.job, status=status, result=result))
        try:
            return await store.update_job(
                running.job, status=status, result=result, records=records
            )
        except FencedOut:
            return None

    async def _keep_lease(self, running: _Running) -> None:
        store = self.agent.store
        while True:
            await anyio.sleep(self.lease_seconds / 3)
            try:
                running.job = await store.renew_job(running.job, self.lease_seconds)
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
        store = self.agent.store
        events = await store.read(job.session_id)
        state = fold_state(events)
        if state.interrupted:
            result = await self.agent.resume_run(job.session_id)
            return _summary(result.outcome, result.output, result.error, result.steps)
        finished = [e for e in events if e.type == RUN_FINISHED]
        if finished:
            # The run ended before the job's status was written (the process died in
            # between): its result is in the journal, nothing runs again.
            data = finished[-1].data
            return _summary(
                str(data.get("outcome")),
                str(data.get("output", "")),
                data.get("error"),
                int(data.get("steps", 0)),
            )
        result = await self.agent.run(str(job.request.get("input", "")), session_id=job.session_id)
        return _summary(result.outcome, result.output, result.error, result.steps)


def _summary(outcome: str, output: str, error: Any, steps: int) -> dict[str, Any]:
    return {"outcome": outcome, "output": output, "error": error, "steps": steps}


class _SharedStore(Store):
    """An open store lent to the runner's agent: every call goes to the owner's store,
    except :meth:`open` and :meth:`close`, which are the owner's to make (once)."""

    def __init__(self, inner: Store) -> None:
        object.__setattr__(self, "_inner", inner)

    def __getattribute__(self, name: str) -> Any:
        if name in ("open", "close", "_inner", "__class__", "__dict__"):
            return object.__getattribute__(self, name)
        return getattr(object.__getattribute__(self, "_inner"), name)

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None


# Every abstract method is served by the wrapped store (__getattribute__).
_SharedStore.__abstractmethods__ = frozenset()
