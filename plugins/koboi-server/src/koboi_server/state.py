"""What the routes of one app share: the agent, its store, the runs, keys and approvals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from koboi.store import JobQueue, KeyedRecords, Store, jobs_of, records_of
from koboi_server.approvals import ApprovalBook
from koboi_server.hub import Hub
from koboi_server.keys import KeyRing
from koboi_server.outages import StoreOutage
from koboi_server.runs import RunRegistry

if TYPE_CHECKING:
    from koboi.agent import KoboiAgent
    from koboi.config import AgentConfig
    from koboi_server.jobs import JobOutbox, JobRunner
    from koboi_server.principals import PrincipalGate
    from koboi_server.settings import ServerSettings
    from koboi_server.webhooks.dispatcher import WebhookDispatcher


#: What the server keeps in the store's keyed records, for the one line that refuses a
#: store without them.
RECORDS_FEATURE = "koboi serve (API keys, idempotency keys, approvals, the webhook outbox)"
JOBS_FEATURE = "koboi serve (background jobs: POST /v1/jobs)"


def store_capabilities(store: Store) -> tuple[KeyedRecords, JobQueue]:
    """The store's keyed records and job queue, or one :class:`~koboi.errors.MissingCapability`
    line saying which the server lacks (checked before anything is served)."""
    return records_of(store, RECORDS_FEATURE), jobs_of(store, JOBS_FEATURE)


@dataclass
class ServerState:
    """One per app; ``app.state.koboi``."""

    config: AgentConfig
    settings: ServerSettings
    agent: KoboiAgent
    #: The journal (sessions, events, leases).
    store: Store
    #: The store's keyed records: keys, idempotency keys, approvals, webhook outbox.
    records: KeyedRecords
    #: The store's job queue.
    jobs: JobQueue
    hub: Hub
    registry: RunRegistry
    book: ApprovalBook
    keys: KeyRing
    #: False when the application brought its own approver: then approvals are not
    #: decided over HTTP (the routes say so).
    approvals_over_http: bool
    approver_name: str
    #: Sends job.finished (and whatever else is enqueued) to webhook receivers.
    webhooks: WebhookDispatcher
    #: Runs queued jobs in this process (None when ``server.run_jobs`` is off).
    runner: JobRunner | None = None
    #: Why this server refuses jobs (the runner's agent could not open: the unattended-destruction rule).
    jobs_refused: str | None = None
    #: Who may use the server (set when it starts; see koboi_server.principals).
    gate: PrincipalGate | None = None
    #: The webhook deliveries a job's status change sends (job.finished...), written
    #: in the same transaction as that status.
    job_outbox: JobOutbox | None = None
    #: Whether the store fails, as the background loops see it (logged once per outage).
    outage: StoreOutage = field(default_factory=StoreOutage)
    #: Set when a job was queued here, so an idle job worker looks at once.
    _job_queued: anyio.Event | None = field(default=None, repr=False)

    def wake_runner(self) -> None:
        if self._job_queued is not None:
            self._job_queued.set()
            self._job_queued = None

    async def wait_for_job(self, seconds: float) -> None:
        """Wait until a job is queued here, or ``seconds`` (jobs of other replicas)."""
        if self._job_queued is None:
            self._job_queued = anyio.Event()
        event = self._job_queued
        with anyio.move_on_after(seconds):
            await event.wait()
