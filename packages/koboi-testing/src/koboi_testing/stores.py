"""A store that is only a journal, as a third-party store may be.

:class:`JournalOnlyStore` implements :class:`koboi.Store` (sessions, their journals, the
audit trail, leases with fencing) and none of the optional capabilities (keyed records,
job queue, response cache), by handing every call to a store behind it. Use it to show
that a feature works on such a store (``koboi run``, resume), or that it says, in one
line, what it lacks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from koboi.store import (
    AuditEntry,
    InMemoryStore,
    JournalEvent,
    Lease,
    NewEvent,
    SessionInfo,
    SessionStatus,
    Store,
)


class JournalOnlyStore(Store):
    """The journal contract and nothing else, served by ``inner`` (a new in-memory store
    by default; pass one to share it between agents or commands)."""

    name = "journal-only"

    def __init__(self, inner: Store | None = None) -> None:
        self.inner: Store = inner if inner is not None else InMemoryStore()

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def create_session(
        self,
        session_id: str | None = None,
        *,
        config_name: str = "",
        config_hash: str = "",
        owner: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        return await self.inner.create_session(
            session_id,
            config_name=config_name,
            config_hash=config_hash,
            owner=owner,
            metadata=metadata,
        )

    async def get_session(self, session_id: str) -> SessionInfo:
        return await self.inner.get_session(session_id)

    async def list_sessions(
        self, *, limit: int = 50, status: SessionStatus | None = None, owner: str | None = None
    ) -> list[SessionInfo]:
        return await self.inner.list_sessions(limit=limit, status=status, owner=owner)

    async def match_sessions(self, prefix: str, *, limit: int = 10) -> list[str]:
        return await self.inner.match_sessions(prefix, limit=limit)

    async def set_status(
        self, session_id: str, status: SessionStatus, *, fence: int | None = None
    ) -> SessionInfo:
        return await self.inner.set_status(session_id, status, fence=fence)

    async def append(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        *,
        fence: int | None = None,
        audit: Sequence[Mapping[str, Any]] = (),
        status: SessionStatus | None = None,
    ) -> list[JournalEvent]:
        return await self.inner.append(session_id, events, fence=fence, audit=audit, status=status)

    async def read(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        return await self.inner.read(session_id, after=after, limit=limit)

    async def read_audit(
        self, session_id: str | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[AuditEntry]:
        return await self.inner.read_audit(session_id, after=after, limit=limit)

    async def acquire_lease(
        self, session_id: str, holder: str, ttl: float, *, take_over_from: str | None = None
    ) -> Lease:
        return await self.inner.acquire_lease(
            session_id, holder, ttl, take_over_from=take_over_from
        )

    async def get_lease(self, session_id: str) -> Lease | None:
        return await self.inner.get_lease(session_id)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        return await self.inner.renew_lease(lease, ttl)

    async def release_lease(self, lease: Lease) -> None:
        await self.inner.release_lease(lease)


__all__ = ["JournalOnlyStore"]
