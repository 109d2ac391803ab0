"""A store that dies like a killed process, for in-process resume tests.

:class:`DyingStore` is the kernel's in-memory store until ``dies_at(session_id,
event)`` picks an event it is asked to commit: then that commit fails (an
``OSError``, as a lost disk would), and every later write fails too, so the
journal stays exactly as a SIGKILL at that point would leave it. ``restart()``
is the next process: writes work again and the dead process's leases have run
out, so ``agent.resume(...)`` can take the session over at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from koboi.store import InMemoryStore, JournalEvent, NewEvent

DiesAt = Callable[[str, NewEvent], bool]


class Died(OSError):
    """What every write of a dead :class:`DyingStore` raises."""


class DyingStore(InMemoryStore):
    """An in-memory store that dies when asked to commit the event ``dies_at`` picks."""

    def __init__(self, dies_at: DiesAt | None = None) -> None:
        super().__init__()
        self.dies_at = dies_at
        self.dead = False

    async def append(
        self, session_id: str, events: Sequence[NewEvent], **kw: Any
    ) -> list[JournalEvent]:
        if self.dead or (self.dies_at and any(self.dies_at(session_id, e) for e in events)):
            self.dead = True
            raise Died("the process died")
        return await super().append(session_id, events, **kw)

    async def set_status(self, session_id: str, status: Any, **kw: Any) -> Any:
        if self.dead:
            raise Died("the process died")
        return await super().set_status(session_id, status, **kw)

    async def release_lease(self, lease: Any) -> None:
        if self.dead:
            raise Died("the process died")  # a killed process releases nothing
        await super().release_lease(lease)

    def restart(self) -> None:
        """Another process starts: writes work, the dead one's leases have run out."""
        self.dead, self.dies_at = False, None
        for sid, lease in list(self._leases.items()):
            self._leases[sid] = type(lease)(lease.session_id, lease.holder, lease.fence, 0.0)
