"""The ``Store`` contract: the per-session journal of events and the sessions list.

The journal is the truth of a run (see docs/architecture.md): an append-only,
ordered log per session. Each event gets the next sequence number of its
session, starting at 1, with no gaps. The in-memory store here is for tests
and throwaway runs; durable stores come from plugins.
"""

from __future__ import annotations

import json
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from koboi.errors import SessionNotFound, StoreError

SessionStatus = Literal["created", "running", "completed", "failed", "interrupted", "cancelled"]


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


def _json_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = json.loads(json.dumps(data, allow_nan=False))
    return copied


def new_session_id() -> str:
    """A random, URL-safe session id."""
    return uuid.uuid4().hex


class Store(ABC):
    """Persistence of sessions and their journals.

    Must be usable as an async context manager (``open`` / ``close``), must keep
    events of one session in append order with contiguous ``seq`` from 1, and
    must make an appended event visible to every later ``read``.
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
    async def set_status(self, session_id: str, status: SessionStatus) -> SessionInfo:
        """Change a session's status (and its ``updated_at``)."""

    @abstractmethod
    async def append(self, session_id: str, events: Sequence[NewEvent]) -> list[JournalEvent]:
        """Append events atomically, in order; return them with their sequence numbers."""

    @abstractmethod
    async def read(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        """Events with ``seq > after``, in order, at most ``limit`` of them."""


class InMemoryStore(Store):
    """A store that keeps everything in this process. Lost when the process ends."""

    name = "memory"

    def __init__(self) -> None:
        self._sessions: dict[str, SessionInfo] = {}
        self._events: dict[str, list[JournalEvent]] = {}

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

    async def set_status(self, session_id: str, status: SessionStatus) -> SessionInfo:
        info = await self.get_session(session_id)
        updated = SessionInfo(
            id=info.id,
            status=status,
            created_at=info.created_at,
            updated_at=time.time(),
            config_name=info.config_name,
            config_hash=info.config_hash,
            owner=info.owner,
            metadata=info.metadata,
        )
        self._sessions[session_id] = updated
        return updated

    async def append(self, session_id: str, events: Sequence[NewEvent]) -> list[JournalEvent]:
        log = self._events.get(session_id)
        if log is None:
            raise SessionNotFound(f"no session {session_id!r} in this store")
        now = time.time()
        start = len(log)
        # Store a copy in JSON form, as a durable store would: later changes to the
        # caller's dicts must not rewrite the journal, and non-JSON data is refused.
        try:
            stored = [
                JournalEvent(session_id, start + i + 1, e.type, _json_copy(e.data), now)
                for i, e in enumerate(events)
            ]
        except (TypeError, ValueError) as exc:
            raise StoreError(f"journal event data must be JSON: {exc}") from None
        log.extend(stored)
        return stored

    async def read(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        log = self._events.get(session_id)
        if log is None:
            raise SessionNotFound(f"no session {session_id!r} in this store")
        end = len(log) if limit is None else min(len(log), after + limit)
        return log[max(after, 0) : end]
