"""Group commits: the SQLite writes of many concurrent callers in one transaction.

SQLite has one writer, and each write transaction pays a fixed cost (``BEGIN
IMMEDIATE``, a pool checkout, a thread hop, and at ``synchronous=FULL`` an
fsync of the WAL at commit). A server running many sessions at once issues many
small writes (a journal append, a status change, a lease) that would otherwise
queue behind each other, one transaction each.

Here the callers of one event loop queue their write operations; one of them,
the *leader*, takes every queued operation (up to :data:`MAX_BATCH`, oldest
first) to a worker thread and runs them in ONE transaction, each inside its own
SAVEPOINT, then commits once. While that batch runs, new operations queue up
and form the next batch, so batches grow with the load and a lone caller is not
delayed at all. Then the leader wakes every caller of the batch and hands the
leadership to the oldest operation still queued.

Guarantees (each tested in tests/test_group_commit.py):

- **Durability is unchanged**: a caller returns only after the COMMIT of the
  transaction holding its operation, at the ``synchronous`` level of the
  strongest durability in the batch (never weaker than its own).
- **Isolation of failures**: an operation that raises is rolled back to its
  savepoint and its exception (translated to :class:`StoreError` for driver
  errors) goes to its caller only; the others of the batch commit. When the
  transaction itself cannot go on (its commit fails, or SQLite rolled the whole
  transaction back after an I/O error or a full disk), every caller of the batch
  gets that error and nothing of the batch is written.
- **Order**: operations run one after another on one connection, in the order
  they were queued, so a later operation sees the effects of the earlier ones
  (two appends to one session get consecutive sequence numbers).
- **Cancellation**: a caller cancelled while its operation is still queued
  takes it out of the queue: it never runs. Once its batch has started, the
  caller waits (shielded) for the batch to end, as a cancelled thread hop did
  before; its operation may then be committed although the caller sees the
  cancellation. The kernel's writes are safe under that rule: the journal is
  the truth, and a run that was cancelled re-reads it.

Batches are per event loop: callers in different event loops (or threads
without one) never share a transaction; they take turns on the database's
write lock as before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from koboi_store_sql.database import Database

T = TypeVar("T")

#: Most operations in one transaction: bounds the latency a batch adds to its
#: last caller and the work lost to a batch-wide failure.
MAX_BATCH = 64


@dataclass(eq=False)
class PendingWrite(Generic[T]):
    """One caller's write operation, and what became of it."""

    operation: Callable[[Connection], T]
    durability: str
    busy_timeout: float
    #: Set once: when this write becomes the leader, or when its batch ended.
    wake: anyio.Event = field(default_factory=anyio.Event)
    lead: bool = False
    taken: bool = False
    finished: bool = False
    result: T | None = None
    error: BaseException | None = None

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


@dataclass(eq=False)
class _Queue:
    """The writes of one event loop waiting for a batch, and who leads now."""

    waiting: deque[PendingWrite[Any]] = field(default_factory=deque)
    leader: PendingWrite[Any] | None = None


class GroupCommitter:
    """Batches the writes of each event loop into shared transactions on ``database``."""

    def __init__(self, database: Database, max_batch: int = MAX_BATCH) -> None:
        self.database = database
        self.max_batch = max_batch
        # Per event loop: anyio's Event, and so the queue, belong to one loop.
        self._queues: anyio.lowlevel.RunVar[_Queue] = anyio.lowlevel.RunVar(
            f"koboi_store_sql.group_commit.{id(self):x}"
        )
        #: How many batches and operations were committed (tests, benchmarks).
        self.batches = 0
        self.operations = 0

    def _queue(self) -> _Queue:
        queue = self._queues.get(None)
        if queue is None:
            queue = _Queue()
            self._queues.set(queue)
        return queue

    async def write(
        self, operation: Callable[[Connection], T], durability: str, busy_timeout: float
    ) -> T:
        """Run ``operation(connection)`` in a committed write transaction; return its result."""
        queue = self._queue()
        pending: PendingWrite[T] = PendingWrite(operation, durability, busy_timeout)
        queue.waiting.append(pending)
        if queue.leader is None:
            pending.lead = True
            queue.leader = pending
        else:
            try:
                await pending.wake.wait()
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    await self._abandon(queue, pending)
                raise
        if not pending.finished:
            await self._lead(queue, pending)
        return pending.outcome()

    async def _abandon(self, queue: _Queue, pending: PendingWrite[Any]) -> None:
        """A waiting caller was cancelled: drop its write, or see its batch through."""
        if not pending.taken:
            # Still queued: it never runs. A leader-to-be passes the role on.
            queue.waiting.remove(pending)
            if pending.lead:
                self._hand_off(queue)
            return
        if not pending.finished:
            await pending.wake.wait()

    async def _lead(self, queue: _Queue, pending: PendingWrite[Any]) -> None:
        # The leader is the oldest queued write, so its batch holds it.
        batch: list[PendingWrite[Any]] = []
        while queue.waiting and len(batch) < self.max_batch:
            taken = queue.waiting.popleft()
            taken.taken = True
            batch.append(taken)
        assert batch[0] is pending
        # Shielded: the batch holds other callers' writes, which must be seen
        # through (and their callers woken) even if this caller is cancelled.
        with anyio.CancelScope(shield=True):
            try:
                writer = self.database.writer_thread
                if writer is not None:
                    await writer.run(self.database.commit_batch, batch)
                else:  # pragma: no cover - a committer always has its thread
                    await anyio.to_thread.run_sync(self.database.commit_batch, batch)
                self.batches += 1
                self.operations += len(batch)
            except BaseException as exc:  # pragma: no cover - commit_batch records its errors
                for item in batch:
                    if item.error is None:
                        item.error, item.result = exc, None
                raise
            finally:
                for item in batch:
                    item.finished = True
                    if item is not pending:
                        item.wake.set()
                self._hand_off(queue)

    @staticmethod
    def _hand_off(queue: _Queue) -> None:
        if queue.waiting:
            successor = queue.waiting[0]
            successor.lead = True
            queue.leader = successor
            successor.wake.set()
        else:
            queue.leader = None
