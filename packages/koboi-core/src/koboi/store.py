"""The store contracts: the per-session journal, and what a store may add to it.

The journal is the truth of a run (see docs/architecture.md): an append-only,
ordered log per session. Each event gets the next sequence number of its
session, starting at 1, with no gaps. :class:`Store` is the one contract every
store implements: sessions, their journals, the audit trail written with them,
and the leases (with fencing) that let one process at a time run a session.
That is all ``koboi run`` needs.

A store may offer more, each an optional capability with a contract (and a
suite in koboi-testing) of its own:

- :class:`KeyedRecords`: small JSON documents by kind and key, with an optional
  expiry, and atomic expiring counters: state that must outlive a process (trust
  rules, rate limits, API keys, idempotency keys, stored workflows...);
- :class:`JobQueue`: runs queued for any process sharing the store to claim with a
  fenced, expiring lease, created together with their idempotency key;
- :class:`ResponseCache`: model answers kept by request hash.

A feature that needs a capability asks for it with :func:`capability` when it is
assembled, so a store without it is refused in one line that names the feature,
the store and the missing capability, before anything runs. The in-memory store
here (tests, throwaway runs) has every capability; durable stores come from plugins.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, Literal

from koboi.errors import (
    FencedOut,
    IdempotencyConflict,
    JobNotFound,
    LeaseHeld,
    MissingCapability,
    SessionNotFound,
    StoreError,
)

SessionStatus = Literal[
    "created", "running", "completed", "failed", "interrupted", "cancelled", "suspended"
]


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append: its type and JSON-able data."""

    type: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JournalEvent:
    """An event as stored: with its session, sequence number and commit time (epoch seconds)."""

    session_id: str
    seq: int
    type: str
    data: Mapping[str, Any]
    at: float


@dataclass(frozen=True, slots=True)
class SessionTotals:
    """What a session's runs used, summed from its journal as it is written.

    ``runs`` counts ``run_started`` events, ``model_calls`` the model calls that
    answered (``model_call_finished``); the tokens and ``cost_usd`` add the usage
    of those calls and of the side calls (``side_call_finished``), each call once.
    :func:`koboi.journal.totals_of` computes them from events; a store that keeps
    them adds the totals of every batch it appends, so listing sessions with their
    cost reads no journal.
    """

    runs: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def __add__(self, other: SessionTotals) -> SessionTotals:
        return SessionTotals(
            self.runs + other.runs,
            self.model_calls + other.model_calls,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost_usd + other.cost_usd,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class SessionInfo:
    """Metadata of one session."""

    id: str
    status: SessionStatus
    created_at: float
    updated_at: float
    config_name: str = ""
    config_hash: str = ""
    owner: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: Sequence number of the session's last event (0 when it has none).
    last_seq: int = 0
    #: What the session's runs used (:class:`SessionTotals`), when the store keeps it;
    #: None when it does not (a store without the summary, or a session written before
    #: the store kept it): then :func:`koboi.journal.totals_of` over its journal says.
    totals: SessionTotals | None = None


@dataclass(frozen=True)
class Lease:
    """The right to run a session, held by one process at a time.

    ``fence`` grows every time the session changes hands; a write that carries
    a fence older than the session's current one is refused, so a paused
    "zombie" process can never record anything after another took over.
    """

    session_id: str
    holder: str
    fence: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One record of the audit trail, as stored.

    ``id`` increases across the whole store (not per session), so a reader can
    follow the trail with ``after``.
    """

    id: int
    session_id: str
    at: float
    data: Mapping[str, Any]


JobStatus = Literal[
    "queued", "running", "awaiting_approval", "waiting_input", "completed", "failed", "cancelled"
]

#: A record to put with another write: ``(kind, key, data)`` (see :meth:`Store.update_job`).
RecordWrite = tuple[str, str, Mapping[str, Any]]

#: A job in one of these states is done: it is never claimed again.
TERMINAL_JOB_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class Job:
    """A run queued for whichever process claims it (a background job).

    While a process works on it, the job holds a lease (``holder``, ``fence``,
    ``lease_expires_at``) that it must renew; once the lease has expired any
    process may claim the job again, with a higher ``fence``, and every write of
    the old holder is refused (:class:`~koboi.errors.FencedOut`).
    """

    id: str
    session_id: str
    owner: str | None
    status: JobStatus
    request: Mapping[str, Any]
    created_at: float
    updated_at: float
    attempts: int = 0
    holder: str | None = None
    fence: int = 0
    lease_expires_at: float | None = None
    cancel_requested: bool = False
    result: Mapping[str, Any] | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL_JOB_STATUSES


def new_job_id() -> str:
    """A random, URL-safe job id."""
    return f"job_{uuid.uuid4().hex}"


# Built once: json.dumps with options builds an encoder per call, which cost as much
# as encoding a small event.
_ENCODER = json.JSONEncoder(allow_nan=False)


def _json_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = json.loads(_ENCODER.encode(data))
    return copied


def holder_is_dead(holder: str) -> bool:
    """True only when ``holder`` ("host:pid:tag") names a process of this host that is gone.

    Anything else — another host, an unparsable holder, a live pid (or one
    reused by another process) — counts as alive: then the lease must expire.
    """
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):
        return False
    return False


async def take_lease(store: Store, session_id: str, holder: str, ttl: float) -> Lease:
    """``store.acquire_lease``, taking over at once a lease a dead process of this host
    held (it cannot release it; no need to wait for it to run out)."""
    try:
        return await store.acquire_lease(session_id, holder, ttl)
    except LeaseHeld as held:
        if not holder_is_dead(held.holder):
            raise
        return await store.acquire_lease(session_id, holder, ttl, take_over_from=held.holder)


def _expired(expires_at: float | None, now: float) -> bool:
    return expires_at is not None and expires_at <= now


def _claimable(job: Job, now: float) -> bool:
    """Queued, or held by a process whose lease has run out."""
    if job.status == "queued":
        return True
    if job.status in ("running", "awaiting_approval"):
        return job.lease_expires_at is None or job.lease_expires_at <= now
    return False


def new_session_id() -> str:
    """A random, URL-safe session id."""
    return uuid.uuid4().hex


class Store(ABC):
    """The journal store: sessions, their journals, the audit trail and leases.

    Must be usable as an async context manager (``open`` / ``close``), must keep
    events of one session in append order with contiguous ``seq`` from 1, and
    must make an appended event visible to every later ``read``. This is the one
    contract every store implements; see :class:`KeyedRecords`, :class:`JobQueue`
    and :class:`ResponseCache` for what a store may add.
    """

    name: str = "store"

    async def open(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Connect / migrate. Called once before use."""

    async def close(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Release connections. Called once after use."""

    async def __aenter__(self) -> Store:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @abstractmethod
    async def create_session(
        self,
        session_id: str | None = None,
        *,
        config_name: str = "",
        config_hash: str = "",
        owner: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        """Create a session (random id when ``session_id`` is None). An existing id is an error."""

    @abstractmethod
    async def get_session(self, session_id: str) -> SessionInfo:
        """Return the session, or raise :class:`SessionNotFound`."""

    @abstractmethod
    async def list_sessions(
        self, *, limit: int = 50, status: SessionStatus | None = None, owner: str | None = None
    ) -> list[SessionInfo]:
        """Sessions, most recently updated first, filtered by status and owner."""

    @abstractmethod
    async def set_status(
        self, session_id: str, status: SessionStatus, *, fence: int | None = None
    ) -> SessionInfo:
        """Change a session's status (and its ``updated_at``); ``fence`` as for :meth:`append`."""

    @abstractmethod
    async def append(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        *,
        fence: int | None = None,
        audit: Sequence[Mapping[str, Any]] = (),
        status: SessionStatus | None = None,
    ) -> list[JournalEvent]:
        """Append events atomically (one transaction), in order; return them with their seq.

        With ``fence``, the session's current lease fence must equal it, checked in
        the same transaction; otherwise raise :class:`FencedOut` and write nothing.
        ``audit`` records (JSON objects) are appended to the audit trail in that same
        transaction: both are written, or neither. With ``status``, the session's
        status is set in that same transaction too (as :meth:`set_status` does): the
        loop commits ``running`` with a run's first events and its outcome with
        ``run_finished``, so the status and the journal never disagree and a run
        costs two commits fewer.
        """

    @abstractmethod
    async def acquire_lease(
        self, session_id: str, holder: str, ttl: float, *, take_over_from: str | None = None
    ) -> Lease:
        """Take the session for ``holder`` for ``ttl`` seconds.

        Succeeds when the session has no lease, an expired one, or one held by
        ``holder`` (which is then extended, same fence). Taking it from anyone
        else (after expiry) or taking a free session increments the fence.
        Raises :class:`LeaseHeld` naming the current holder otherwise.

        ``take_over_from`` names a holder the caller knows to be dead (its process
        is gone): a lease held by exactly that holder counts as expired. The check
        is part of the same compare-and-set, so a lease renewed or taken by anyone
        else in between is still respected.
        """

    @abstractmethod
    async def get_lease(self, session_id: str) -> Lease | None:
        """The session's current lease (possibly expired), or None if it never had one."""

    @abstractmethod
    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend a lease still held; :class:`FencedOut` if another process took over."""

    @abstractmethod
    async def release_lease(self, lease: Lease) -> None:
        """Give the session up (a no-op when the lease was already taken over)."""

    @abstractmethod
    async def match_sessions(self, prefix: str, *, limit: int = 10) -> list[str]:
        """Ids of sessions that start with ``prefix`` (at most ``limit``)."""

    async def resolve_session(self, ref: str) -> SessionInfo:
        """A session by full id, unique id prefix, or ``last`` (the most recently updated
        one that is not a sub-agent's: a child run is its parent's business).

        A prefix that matches nothing or several sessions is an error that says
        so; it never creates a session.
        """
        if ref == "last":
            limit = 8
            while True:
                latest = await self.list_sessions(limit=limit)
                for info in latest:
                    if not info.metadata.get("parent_session"):
                        return info
                if len(latest) < limit:
                    raise SessionNotFound("there are no sessions in this store yet")
                limit *= 8
        if not ref:
            raise SessionNotFound("empty session id")
        try:
            return await self.get_session(ref)
        except SessionNotFound:
            pass
        found = await self.match_sessions(ref, limit=6)
        if not found:
            raise SessionNotFound(f"no session id starts with {ref!r}")
        if len(found) > 1:
            shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
            raise SessionNotFound(
                f"session prefix {ref!r} is ambiguous: it matches {shown}; give more characters"
            )
        return await self.get_session(found[0])

    @abstractmethod
    async def read(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        """Events with ``seq > after``, in order, at most ``limit`` of them."""

    # -- the audit trail -------------------------------------------------------

    @abstractmethod
    async def read_audit(
        self, session_id: str | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[AuditEntry]:
        """Audit records with ``id > after`` in the order written; one session's, or all."""


class KeyedRecords(ABC):
    """Capability: keyed JSON records with expiry, and atomic expiring counters.

    For state that must outlive a process and be shared by every process using
    the store: trust rules, rate-limit counters, API keys, idempotency keys.
    ``koboi_testing.contracts.KeyedRecordsContract`` is its suite.
    """

    @abstractmethod
    async def record_put(
        self,
        kind: str,
        key: str,
        data: Mapping[str, Any],
        *,
        expires_at: float | None = None,
    ) -> None:
        """Store ``data`` (JSON) under ``(kind, key)``, replacing what was there."""

    @abstractmethod
    async def record_get(self, kind: str, key: str) -> dict[str, Any] | None:
        """The record under ``(kind, key)``, or None (also once it has expired)."""

    @abstractmethod
    async def record_list(self, kind: str, *, prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
        """Unexpired records of ``kind`` whose key starts with ``prefix``, sorted by key."""

    @abstractmethod
    async def record_delete(self, kind: str, key: str) -> bool:
        """Delete a record; True when there was one (expired or not)."""

    @abstractmethod
    async def record_create(
        self,
        kind: str,
        key: str,
        data: Mapping[str, Any],
        *,
        expires_at: float | None = None,
    ) -> bool:
        """Store a record only if none (or only an expired one) is there; True if stored.

        Atomic: of several processes creating the same key at once, exactly one
        gets True (an idempotency key "in progress", a claim).
        """

    @abstractmethod
    async def counter_add(self, key: str, amount: int = 1, *, expires_at: float | None) -> int:
        """Add ``amount`` to a counter atomically and return its new value.

        A counter that does not exist, or whose expiry has passed, starts again
        from zero and takes ``expires_at``; otherwise its expiry is kept. Two
        processes adding at once both count.
        """

    async def purge_expired(self) -> int:
        """Delete expired records and counters; return how many.

        Expired rows are ignored as soon as they expire, but a store may keep them
        until this is called (a long-running process calls it now and then). The default, for
        stores that drop expired rows as they go, deletes nothing.
        """
        return 0


class JobQueue(ABC):
    """Capability: durable jobs, claimed by any process sharing the store with a fenced lease.

    A store with a job queue has :class:`KeyedRecords` too (``update_job(records=)``
    writes records in the job's own transaction).
    ``koboi_testing.contracts.JobQueueContract`` is its suite.
    """

    @abstractmethod
    async def create_job(
        self,
        *,
        session_id: str,
        owner: str | None,
        request: Mapping[str, Any],
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> tuple[Job, bool]:
        """Queue a job; return it and whether it was created now.

        With ``idempotency_key`` (unique per owner), the key is stored in the same
        transaction as the job: a second call with the same key and the same
        ``request_hash`` returns the first job and False, even when both race;
        with another ``request_hash`` it raises :class:`IdempotencyConflict`.
        """

    @abstractmethod
    async def get_job(self, job_id: str) -> Job:
        """The job, or :class:`JobNotFound`."""

    @abstractmethod
    async def find_job(self, *, owner: str | None, idempotency_key: str) -> Job | None:
        """The owner's job created with ``idempotency_key``, or None.

        A read, for answering a repeated request before anything else is checked
        (a retry whose job exists must get it back even when the queue is full).
        """

    @abstractmethod
    async def list_jobs(
        self, *, owner: str | None = None, status: JobStatus | None = None, limit: int = 50
    ) -> list[Job]:
        """Jobs, newest first, filtered by owner and status."""

    @abstractmethod
    async def claim_job(self, holder: str, ttl: float) -> Job | None:
        """Take the oldest job that is queued, or whose holder's lease has expired.

        The claimed job is ``running`` (a job ``awaiting_approval`` keeps that
        status) with ``holder``, a higher ``fence``, one more attempt and a lease
        of ``ttl`` seconds. A queued job whose cancellation was requested is
        cancelled instead of claimed. A job ``waiting_input`` is never claimed: it
        waits for :meth:`requeue_job`. Concurrent claimers never get the same job.
        None when there is nothing to do.
        """

    @abstractmethod
    async def renew_job(self, job: Job, ttl: float) -> Job:
        """Extend the lease of a job still held with ``job.fence``, else :class:`FencedOut`.

        The returned job shows whether cancellation was requested since.
        """

    @abstractmethod
    async def update_job(
        self,
        job: Job,
        *,
        status: JobStatus,
        result: Mapping[str, Any] | None = None,
        records: Sequence[RecordWrite] = (),
    ) -> Job:
        """Set the status (and result) of a job held with ``job.fence``, else :class:`FencedOut`.

        A terminal status releases the lease. ``records`` (kind, key, data) are put
        (as :meth:`record_put`, without expiry) in the same transaction: an outbox,
        so what must follow a final status (a notification) is stored with it or not at all.
        """

    @abstractmethod
    async def requeue_job(self, job: Job, *, records: Sequence[RecordWrite] = ()) -> Job:
        """Put a job that waits for input (``waiting_input``) back in the queue.

        ``job`` is the job as the caller read it: if its ``fence`` or ``holder`` changed
        since, or it is no longer ``waiting_input``, raise :class:`FencedOut` and write
        nothing (two replies racing: one wins). The job becomes ``queued`` without a
        holder or lease, so the next :meth:`claim_job` of any process takes it;
        ``records`` are put in the same transaction (the reply, an outbox).
        """

    @abstractmethod
    async def release_job(self, job: Job) -> Job:
        """Give up a job held with ``job.fence`` without finishing it, else :class:`FencedOut`.

        Its status is kept and its lease ends now, so the next :meth:`claim_job`
        (of any process) takes it at once instead of after the lease would have run
        out: what a process that stops on purpose does with jobs it leaves resumable.
        """

    @abstractmethod
    async def cancel_job(self, job_id: str) -> Job:
        """Cancel: a queued job at once; a running one is marked ``cancel_requested``
        for its holder to act on; a finished one is left as it is."""


class ResponseCache(ABC):
    """Capability: model answers kept by request hash (``cache.mode`` other than ``live``).

    ``koboi_testing.contracts.ResponseCacheContract`` is its suite.
    """

    @abstractmethod
    async def cache_get(self, key: str) -> dict[str, Any] | None:
        """The cached entry stored under ``key`` (a request hash), or None."""

    @abstractmethod
    async def cache_put(self, key: str, entry: Mapping[str, Any]) -> None:
        """Store ``entry`` (JSON-safe) under ``key``, replacing what was there."""

    @abstractmethod
    async def cache_keys(self) -> list[str]:
        """Every key of the response cache, sorted (for export)."""


#: Capabilities by the name errors and ``koboi plugins inspect`` use.
CAPABILITIES: dict[str, type[Any]] = {
    "keyed records": KeyedRecords,
    "job queue": JobQueue,
    "response cache": ResponseCache,
}


def capabilities_of(store: Store) -> list[str]:
    """The names of the optional capabilities ``store`` has."""
    inner = unwrap(store)
    return [name for name, kind in CAPABILITIES.items() if isinstance(inner, kind)]


def unwrap(store: Store) -> Store:
    """The store a wrapper lends (``store.wrapped``), else ``store`` itself."""
    seen = 0
    while seen < 8 and isinstance(getattr(store, "wrapped", None), Store):
        store = store.wrapped  # type: ignore[attr-defined]
        seen += 1
    return store


def capability(store: Store, kind: type[Any], feature: str) -> Any:
    """``store`` as a ``kind`` store, or a one-line :class:`MissingCapability` naming
    ``feature`` (what needs it), the store and what it lacks.

    Call it where the feature is assembled (an agent opening, a server starting),
    so a store without the capability is refused before anything runs.
    """
    if isinstance(store, kind):
        return store
    inner = unwrap(store)
    if isinstance(inner, kind):
        return inner
    name = next((n for n, k in CAPABILITIES.items() if k is kind), kind.__name__)
    has = ", ".join(capabilities_of(store)) or "only the journal"
    raise MissingCapability(
        f"{feature} needs a store with {name}, and the store {store.name!r} has {has}; "
        "use a store backend that provides it (the built-in memory store has every one)"
    )


def records_of(store: Store, feature: str) -> KeyedRecords:
    """``store`` as a :class:`KeyedRecords` store, or :class:`MissingCapability` naming ``feature``."""
    found: KeyedRecords = capability(store, KeyedRecords, feature)
    return found


def jobs_of(store: Store, feature: str) -> JobQueue:
    """``store`` as a :class:`JobQueue` store, or :class:`MissingCapability` naming ``feature``."""
    found: JobQueue = capability(store, JobQueue, feature)
    return found


def cache_of(store: Store, feature: str) -> ResponseCache:
    """``store`` as a :class:`ResponseCache` store, or :class:`MissingCapability`."""
    found: ResponseCache = capability(store, ResponseCache, feature)
    return found


class InMemoryStore(Store, KeyedRecords, JobQueue, ResponseCache):
    """A store that keeps everything in this process, with every capability. Lost when
    the process ends."""

    name = "memory"

    def __init__(self) -> None:
        self._sessions: dict[str, SessionInfo] = {}
        self._events: dict[str, list[JournalEvent]] = {}
        self._leases: dict[str, Lease] = {}
        self._fences: dict[str, int] = {}
        self._cache: dict[str, dict[str, Any]] = {}
        self._audit: list[AuditEntry] = []
        self._records: dict[tuple[str, str], tuple[dict[str, Any], float | None]] = {}
        self._counters: dict[str, tuple[int, float | None]] = {}
        self._jobs: dict[str, Job] = {}

    async def create_session(
        self,
        session_id: str | None = None,
        *,
        config_name: str = "",
        config_hash: str = "",
        owner: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        sid = session_id or new_session_id()
        if sid in self._sessions:
            raise StoreError(f"session {sid!r} already exists")
        now = time.time()
        info = SessionInfo(
            id=sid,
            status="created",
            created_at=now,
            updated_at=now,
            config_name=config_name,
            config_hash=config_hash,
            owner=owner,
            metadata=dict(metadata or {}),
            totals=SessionTotals(),
        )
        self._sessions[sid] = info
        self._events[sid] = []
        return info

    async def get_session(self, session_id: str) -> SessionInfo:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise SessionNotFound(f"no session {session_id!r} in this store") from None

    async def list_sessions(
        self, *, limit: int = 50, status: SessionStatus | None = None, owner: str | None = None
    ) -> list[SessionInfo]:
        found = [
            s
            for s in self._sessions.values()
            if (status is None or s.status == status) and (owner is None or s.owner == owner)
        ]
        found.sort(key=lambda s: (s.updated_at, s.created_at), reverse=True)
        return found[:limit]

    async def set_status(
        self, session_id: str, status: SessionStatus, *, fence: int | None = None
    ) -> SessionInfo:
        info = await self.get_session(session_id)
        if fence is not None:
            self._check_fence(session_id, fence)
        updated = replace(info, status=status, updated_at=time.time())
        self._sessions[session_id] = updated
        return updated

    async def append(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        *,
        fence: int | None = None,
        audit: Sequence[Mapping[str, Any]] = (),
        status: SessionStatus | None = None,
    ) -> list[JournalEvent]:
        log = self._events.get(session_id)
        if log is None:
            raise SessionNotFound(f"no session {session_id!r} in this store")
        if fence is not None:
            self._check_fence(session_id, fence)
        now = time.time()
        start = len(log)
        # Store a copy in JSON form, as a durable store would: later changes to the
        # caller's dicts must not rewrite the journal, and non-JSON data is refused.
        try:
            stored = [
                JournalEvent(session_id, start + i + 1, e.type, _json_copy(e.data), now)
                for i, e in enumerate(events)
            ]
            audited = [
                AuditEntry(len(self._audit) + i + 1, session_id, now, _json_copy(record))
                for i, record in enumerate(audit)
            ]
        except (TypeError, ValueError) as exc:
            raise StoreError(f"journal event data must be JSON: {exc}") from None
        log.extend(stored)
        self._audit.extend(audited)
        if stored:
            from koboi.journal import totals_of

            info = self._sessions[session_id]
            totals = info.totals + totals_of(stored) if info.totals is not None else None
            self._sessions[session_id] = replace(
                info, updated_at=now, last_seq=stored[-1].seq, totals=totals
            )
        if status is not None:
            self._sessions[session_id] = replace(
                self._sessions[session_id], status=status, updated_at=now
            )
        return stored

    def _check_fence(self, session_id: str, fence: int) -> None:
        current = self._leases.get(session_id)
        if current is None or current.fence != fence:
            holder = current.holder if current else "nobody"
            raise FencedOut(
                f"session {session_id!r} was taken over (now held by {holder}); "
                "this process must stop writing to it"
            )

    async def acquire_lease(
        self, session_id: str, holder: str, ttl: float, *, take_over_from: str | None = None
    ) -> Lease:
        await self.get_session(session_id)
        now = time.time()
        current = self._leases.get(session_id)
        if (
            current is not None
            and current.holder not in (holder, take_over_from)
            and current.expires_at > now
        ):
            raise LeaseHeld(current.holder, current.expires_at, session_id)
        if current is not None and current.holder == holder:
            fence = current.fence
        else:
            fence = self._fences.get(session_id, 0) + 1
            self._fences[session_id] = fence
        lease = Lease(session_id, holder, fence, now + ttl)
        self._leases[session_id] = lease
        return lease

    async def get_lease(self, session_id: str) -> Lease | None:
        await self.get_session(session_id)
        return self._leases.get(session_id)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        self._check_fence(lease.session_id, lease.fence)
        renewed = replace(lease, expires_at=time.time() + ttl)
        self._leases[lease.session_id] = renewed
        return renewed

    async def release_lease(self, lease: Lease) -> None:
        current = self._leases.get(lease.session_id)
        if current is not None and current.fence == lease.fence:
            self._leases[lease.session_id] = replace(current, expires_at=0.0)

    async def match_sessions(self, prefix: str, *, limit: int = 10) -> list[str]:
        return sorted(sid for sid in self._sessions if sid.startswith(prefix))[:limit]

    async def read(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        log = self._events.get(session_id)
        if log is None:
            raise SessionNotFound(f"no session {session_id!r} in this store")
        end = len(log) if limit is None else min(len(log), after + limit)
        return log[max(after, 0) : end]

    async def read_audit(
        self, session_id: str | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[AuditEntry]:
        found = [
            e
            for e in self._audit[max(after, 0) :]
            if session_id is None or e.session_id == session_id
        ]
        return found if limit is None else found[: max(limit, 0)]

    async def record_put(
        self,
        kind: str,
        key: str,
        data: Mapping[str, Any],
        *,
        expires_at: float | None = None,
    ) -> None:
        try:
            self._records[kind, key] = (_json_copy(data), expires_at)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"record data must be JSON: {exc}") from None

    async def record_get(self, kind: str, key: str) -> dict[str, Any] | None:
        found = self._records.get((kind, key))
        if found is None or _expired(found[1], time.time()):
            return None
        return _json_copy(found[0])

    async def record_list(self, kind: str, *, prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
        now = time.time()
        return sorted(
            (key, _json_copy(data))
            for (k, key), (data, expires_at) in self._records.items()
            if k == kind and key.startswith(prefix) and not _expired(expires_at, now)
        )

    async def record_delete(self, kind: str, key: str) -> bool:
        return self._records.pop((kind, key), None) is not None

    async def record_create(
        self,
        kind: str,
        key: str,
        data: Mapping[str, Any],
        *,
        expires_at: float | None = None,
    ) -> bool:
        found = self._records.get((kind, key))
        if found is not None and not _expired(found[1], time.time()):
            return False
        await self.record_put(kind, key, data, expires_at=expires_at)
        return True

    async def create_job(
        self,
        *,
        session_id: str,
        owner: str | None,
        request: Mapping[str, Any],
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> tuple[Job, bool]:
        if idempotency_key is not None:
            for job in self._jobs.values():
                if job.owner == owner and job.idempotency_key == idempotency_key:
                    if job.request_hash != request_hash:
                        raise IdempotencyConflict(
                            f"idempotency key {idempotency_key!r} was used for another request"
                        )
                    return job, False
        now = time.time()
        try:
            copied = _json_copy(request)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"job request must be JSON: {exc}") from None
        job = Job(
            id=new_job_id(),
            session_id=session_id,
            owner=owner,
            status="queued",
            request=copied,
            created_at=now,
            updated_at=now,
            idempotency_key=idempotency_key,
            request_hash=request_hash,
        )
        self._jobs[job.id] = job
        return job, True

    async def get_job(self, job_id: str) -> Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise JobNotFound(f"no job {job_id!r} in this store") from None

    async def list_jobs(
        self, *, owner: str | None = None, status: JobStatus | None = None, limit: int = 50
    ) -> list[Job]:
        found = [
            j
            for j in self._jobs.values()
            if (owner is None or j.owner == owner) and (status is None or j.status == status)
        ]
        found.sort(key=lambda j: j.created_at, reverse=True)
        return found[: max(limit, 0)]

    async def find_job(self, *, owner: str | None, idempotency_key: str) -> Job | None:
        for job in self._jobs.values():
            if job.owner == owner and job.idempotency_key == idempotency_key:
                return job
        return None

    async def claim_job(self, holder: str, ttl: float) -> Job | None:
        now = time.time()
        for job in sorted(self._jobs.values(), key=lambda j: j.created_at):
            if job.status == "queued" and job.cancel_requested:
                self._jobs[job.id] = replace(job, status="cancelled", updated_at=now)
                continue
            if _claimable(job, now):
                claimed = replace(
                    job,
                    status="awaiting_approval" if job.status == "awaiting_approval" else "running",
                    holder=holder,
                    fence=job.fence + 1,
                    attempts=job.attempts + 1,
                    lease_expires_at=now + ttl,
                    updated_at=now,
                )
                self._jobs[job.id] = claimed
                return claimed
        return None

    def _held(self, job: Job) -> Job:
        current = self._jobs.get(job.id)
        if current is None:
            raise JobNotFound(f"no job {job.id!r} in this store")
        if current.fence != job.fence or current.holder != job.holder or current.done:
            raise FencedOut(
                f"job {job.id!r} is no longer held by {job.holder} (fence {job.fence}); "
                "this process must stop working on it"
            )
        return current

    async def renew_job(self, job: Job, ttl: float) -> Job:
        current = self._held(job)
        renewed = replace(current, lease_expires_at=time.time() + ttl)
        self._jobs[job.id] = renewed
        return renewed

    async def update_job(
        self,
        job: Job,
        *,
        status: JobStatus,
        result: Mapping[str, Any] | None = None,
        records: Sequence[RecordWrite] = (),
    ) -> Job:
        current = self._held(job)
        try:
            copies = [(kind, key, _json_copy(data)) for kind, key, data in records]
        except (TypeError, ValueError) as exc:
            raise StoreError(f"record data must be JSON: {exc}") from None
        for kind, key, data in copies:
            self._records[kind, key] = (data, None)
        done = status in TERMINAL_JOB_STATUSES
        updated = replace(
            current,
            status=status,
            result=_json_copy(result) if result is not None else current.result,
            updated_at=time.time(),
            lease_expires_at=None if done else current.lease_expires_at,
            holder=None if done else current.holder,
        )
        self._jobs[job.id] = updated
        return updated

    async def requeue_job(self, job: Job, *, records: Sequence[RecordWrite] = ()) -> Job:
        current = self._jobs.get(job.id)
        if current is None:
            raise JobNotFound(f"no job {job.id!r} in this store")
        if (
            current.fence != job.fence
            or current.holder != job.holder
            or current.status != "waiting_input"
        ):
            raise FencedOut(
                f"job {job.id!r} changed since it was read (now {current.status}); read it again"
            )
        try:
            copies = [(kind, key, _json_copy(data)) for kind, key, data in records]
        except (TypeError, ValueError) as exc:
            raise StoreError(f"record data must be JSON: {exc}") from None
        for kind, key, data in copies:
            self._records[kind, key] = (data, None)
        queued = replace(
            current, status="queued", holder=None, lease_expires_at=None, updated_at=time.time()
        )
        self._jobs[job.id] = queued
        return queued

    async def release_job(self, job: Job) -> Job:
        current = self._held(job)
        released = replace(current, lease_expires_at=time.time(), updated_at=time.time())
        self._jobs[job.id] = released
        return released

    async def cancel_job(self, job_id: str) -> Job:
        job = await self.get_job(job_id)
        if job.done:
            return job
        if job.status == "queued":
            job = replace(job, status="cancelled", cancel_requested=True, updated_at=time.time())
        else:
            job = replace(job, cancel_requested=True, updated_at=time.time())
        self._jobs[job_id] = job
        return job

    async def counter_add(self, key: str, amount: int = 1, *, expires_at: float | None) -> int:
        value, expiry = self._counters.get(key, (0, expires_at))
        if _expired(expiry, time.time()):
            value, expiry = 0, expires_at
        self._counters[key] = (value + amount, expiry)
        return value + amount

    async def purge_expired(self) -> int:
        now = time.time()
        records = [k for k, (_, expiry) in self._records.items() if _expired(expiry, now)]
        counters = [k for k, (_, expiry) in self._counters.items() if _expired(expiry, now)]
        for record in records:
            del self._records[record]
        for counter in counters:
            del self._counters[counter]
        return len(records) + len(counters)

    async def cache_get(self, key: str) -> dict[str, Any] | None:
        entry = self._cache.get(key)
        return _json_copy(entry) if entry is not None else None

    async def cache_put(self, key: str, entry: Mapping[str, Any]) -> None:
        self._cache[key] = _json_copy(entry)

    async def cache_keys(self) -> list[str]:
        return sorted(self._cache)
