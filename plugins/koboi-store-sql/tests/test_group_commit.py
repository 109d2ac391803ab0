"""Group commits on SQLite: concurrent writes share one transaction and one commit.

Each test checks that batching really happened (more operations than batches,
or a batch of a known size), so none of them passes by running one write per
transaction.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection

from koboi.errors import FencedOut, StoreError
from koboi.store import NewEvent, Store
from koboi_store_sql import SQLStore
from koboi_store_sql.group_commit import GroupCommitter


def _committer(store: Store) -> GroupCommitter:
    assert isinstance(store, SQLStore)
    database = store._database
    assert database is not None and database.committer is not None
    return database.committer


def _seqs(path: Path) -> dict[str, list[int]]:
    """Each session's journal sequence numbers, read with a connection of our own."""
    with closing(sqlite3.connect(path)) as connection, connection:
        rows = connection.execute("SELECT session_id, seq FROM events ORDER BY session_id, seq")
        found: dict[str, list[int]] = {}
        for session_id, seq in rows:
            found.setdefault(session_id, []).append(seq)
    return found


class WriterHold:
    """A write that keeps the leader busy until released, so that the writes
    queued meanwhile form the next batch, whatever the machine's speed."""

    def __init__(self, store: Store) -> None:
        self.committer = _committer(store)
        self.started = anyio.Event()
        self.release = threading.Event()

    async def run(self) -> None:
        # The writes run on the database's own writer thread, not an anyio worker:
        # the way back to this event loop is given explicitly.
        token = anyio.lowlevel.current_token()

        def hold(connection: Connection) -> None:
            anyio.from_thread.run_sync(self.started.set, token=token)
            self.release.wait(10)

        await self.committer.write(hold, "power_loss", 5.0)

    async def until_queued(self, count: int) -> None:
        """Wait until ``count`` writes wait behind the held one."""
        for _ in range(1000):
            if len(self.committer._queue().waiting) >= count:
                return
            await anyio.sleep(0.005)
        raise AssertionError(f"{count} writes never queued")


@pytest.mark.anyio
async def test_concurrent_writers_of_several_threads_make_one_consistent_journal(
    db_path: Path,
) -> None:
    url = f"sqlite:///{db_path}"
    sessions_per_loop, appends, loops = 6, 15, 3

    async def writers(tag: str) -> None:
        async with SQLStore(url) as store:
            ids = [f"{tag}-{i}" for i in range(sessions_per_loop)]

            async def one(sid: str) -> None:
                await store.create_session(sid)
                lease = await store.acquire_lease(sid, tag, 30)
                for n in range(appends):
                    stored = await store.append(sid, [NewEvent("e", {"n": n})], fence=lease.fence)
                    assert [e.seq for e in stored] == [n + 1]
                await store.release_lease(lease)

            async with anyio.create_task_group() as group:
                for sid in ids:
                    group.start_soon(one, sid)

    # Two more event loops in threads of their own share this process's writer.
    errors: list[BaseException] = []

    def in_thread(tag: str) -> None:
        try:
            anyio.run(writers, tag)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    async with SQLStore(url) as store:
        committer = _committer(store)
        before = (committer.batches, committer.operations)
        threads = [threading.Thread(target=in_thread, args=(f"t{i}",)) for i in range(loops - 1)]
        for thread in threads:
            thread.start()
        await writers("main")

        def join() -> None:
            for thread in threads:
                thread.join(30)

        await anyio.to_thread.run_sync(join)
        batches = committer.batches - before[0]
        operations = committer.operations - before[1]
    assert errors == []
    found = _seqs(db_path)
    assert len(found) == sessions_per_loop * loops
    for sid, seqs in found.items():
        assert seqs == list(range(1, appends + 1)), sid
    # Positive control: the writes were grouped (in this event loop at least).
    assert operations == loops * sessions_per_loop * (appends + 3)
    assert batches < operations


@pytest.mark.anyio
async def test_a_failing_write_fails_alone_and_the_rest_of_its_batch_commits(
    db_path: Path,
) -> None:
    async with SQLStore(f"sqlite:///{db_path}") as store:
        for sid in ("a", "b", "taken"):
            await store.create_session(sid)
        lease = await store.acquire_lease("taken", "me", 30)
        committer = _committer(store)
        results: dict[str, Any] = {}

        async def run(name: str, call: Callable[[], Any]) -> None:
            try:
                results[name] = await call()
            except Exception as exc:
                results[name] = exc

        def half_then_fail(connection: Connection) -> None:
            # Writes a row, then fails: the row must not survive.
            connection.execute(
                text("INSERT INTO records (kind, key, data, updated_at) VALUES ('t', 'x', '{}', 0)")
            )
            raise ValueError("this operation fails after writing")

        hold = WriterHold(store)
        before = committer.batches
        calls: list[tuple[str, Callable[[], Any]]] = [
            ("a", lambda: store.append("a", [NewEvent("one")])),
            ("dup", lambda: store.create_session("b")),
            ("half", lambda: committer.write(half_then_fail, "power_loss", 5)),
            ("fenced", lambda: store.append("taken", [NewEvent("x")], fence=lease.fence + 1)),
            ("b", lambda: store.append("b", [NewEvent("two")])),
            ("c", lambda: store.create_session("c")),
        ]
        async with anyio.create_task_group() as group:
            group.start_soon(hold.run)
            await hold.started.wait()
            for queued, (name, call) in enumerate(calls, start=1):
                group.start_soon(run, name, call)
                await hold.until_queued(queued)  # in this order
            hold.release.set()
        # The held write, then ONE batch with the six queued writes.
        assert committer.batches - before == 2

        assert [e.seq for e in results["a"]] == [1]
        assert [e.seq for e in results["b"]] == [1]
        assert results["c"].id == "c"
        assert isinstance(results["dup"], StoreError) and "already exists" in str(results["dup"])
        assert isinstance(results["half"], ValueError)
        assert isinstance(results["fenced"], FencedOut)
        assert await store.record_get("t", "x") is None
        assert [e.type for e in await store.read("taken")] == []
        assert (await store.get_session("c")).id == "c"
    assert _seqs(db_path) == {"a": [1], "b": [1]}


@pytest.mark.anyio
async def test_a_write_that_ends_the_transaction_fails_its_whole_batch(db_path: Path) -> None:
    async with SQLStore(f"sqlite:///{db_path}") as store:
        await store.create_session("s")
        committer = _committer(store)
        results: dict[str, Any] = {}

        def end_transaction(connection: Connection) -> None:
            # What SQLite does itself on an I/O error or a full disk.
            raw = connection.connection.driver_connection
            assert raw is not None
            raw.execute("ROLLBACK")
            raise sqlite3.OperationalError("disk I/O error")

        async def run(name: str, call: Callable[[], Any]) -> None:
            try:
                results[name] = await call()
            except Exception as exc:
                results[name] = exc

        hold = WriterHold(store)
        async with anyio.create_task_group() as group:
            group.start_soon(hold.run)
            await hold.started.wait()
            group.start_soon(run, "before", lambda: store.append("s", [NewEvent("lost")]))
            await hold.until_queued(1)
            group.start_soon(
                run, "broken", lambda: committer.write(end_transaction, "power_loss", 5)
            )
            await hold.until_queued(2)
            hold.release.set()
        assert isinstance(results["before"], StoreError)
        assert "I/O error" in str(results["before"])
        assert isinstance(results["broken"], StoreError)
        # Nothing of that batch was written, and the store still works.
        assert await store.read("s") == []
        assert [e.seq for e in await store.append("s", [NewEvent("kept")])] == [1]


@pytest.mark.anyio
async def test_a_cancelled_caller_never_runs_a_queued_write_but_sees_a_started_one_through(
    db_path: Path,
) -> None:
    async with SQLStore(f"sqlite:///{db_path}") as store:
        for sid in ("queued", "running"):
            await store.create_session(sid)
        hold = WriterHold(store)
        async with anyio.create_task_group() as group:
            group.start_soon(hold.run)
            await hold.started.wait()
            with anyio.move_on_after(0.05) as scope:
                await store.append("queued", [NewEvent("never")])
            assert scope.cancelled_caught
            assert len(hold.committer._queue().waiting) == 0  # taken out of the queue
            hold.release.set()
        assert await store.read("queued") == []

        # Cancelled while its own batch runs: it waits for the commit, which stands
        # (the caller then sees its cancellation, or the result if none came after).
        finished: list[float] = []

        def slow_append(connection: Connection) -> None:
            time.sleep(0.2)
            connection.execute(
                text(
                    "INSERT INTO events (session_id, seq, type, data, at) "
                    "VALUES ('running', 1, 'done', '{}', 0)"
                )
            )
            finished.append(time.monotonic())

        returned: list[float] = []
        with anyio.move_on_after(0.05) as scope:
            await _committer(store).write(slow_append, "power_loss", 5)
            returned.append(time.monotonic())
        assert scope.cancel_called
        assert finished and finished[0] <= (returned or [time.monotonic()])[0]
        assert [e.type for e in await store.read("running")] == ["done"]
        # The queue is free again.
        assert [e.seq for e in await store.append("queued", [NewEvent("now")])] == [1]


@pytest.mark.anyio
async def test_a_returned_write_is_visible_to_another_process(db_path: Path) -> None:
    reader = "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])"
    async with SQLStore(f"sqlite:///{db_path}") as store:
        await store.create_session("s")
        committer = _committer(store)
        before = committer.batches

        async def append(n: int) -> None:
            await store.append("s", [NewEvent("e", {"n": n})])

        async with anyio.create_task_group() as group:
            for n in range(20):
                group.start_soon(append, n)
        assert committer.batches - before < 20  # grouped
        done = await anyio.run_process(
            [sys.executable, "-c", reader, str(db_path), "SELECT count(*) FROM events"]
        )
        assert done.stdout.decode().strip() == "20"


CRASHER = textwrap.dedent(
    """
    import json, sys
    import anyio
    from koboi.store import NewEvent
    from koboi_store_sql import SQLStore

    async def main(url):
        async with SQLStore(url) as store:
            sessions = [f"s{i}" for i in range(8)]
            for sid in sessions:
                await store.create_session(sid)
            print("ready", flush=True)

            async def writer(sid):
                n = 0
                while True:
                    n += 1
                    stored = await store.append(sid, [NewEvent("e", {"n": n})])
                    # Acknowledged only once append returned, i.e. committed.
                    print(json.dumps([sid, stored[0].seq]), flush=True)

            async with anyio.create_task_group() as group:
                for sid in sessions:
                    group.start_soon(writer, sid)

    anyio.run(main, sys.argv[1])
    """
)


@pytest.mark.slow
def test_sigkill_right_after_a_returned_write_never_loses_it(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True, exist_ok=True)
    acknowledged: list[tuple[str, int]] = []
    with subprocess.Popen(
        [sys.executable, "-c", CRASHER, f"sqlite:///{db_path}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None
            first = child.stdout.readline()
            assert first.strip() == "ready", first + child.stdout.read()
            while len(acknowledged) < 300:
                line = child.stdout.readline()
                assert line.startswith("["), line + child.stdout.read()
                sid, seq = json.loads(line)
                acknowledged.append((sid, seq))
            # Killed while its writers keep committing: some writes are in flight.
            os.kill(child.pid, signal.SIGKILL)
            rest = child.stdout.read()
        finally:
            child.kill()
    # Lines the child wrote in full before it died (the last one may be cut).
    for line in rest.split("\n")[:-1]:
        sid, seq = json.loads(line)
        acknowledged.append((sid, seq))
    found = _seqs(db_path)
    for sid, seq in acknowledged:
        assert seq in found.get(sid, []), (sid, seq)
    for sid, seqs in found.items():
        assert seqs == list(range(1, len(seqs) + 1)), sid  # no hole, no duplicate
    # Positive control: the journal holds no more than the writes that were made
    # (acknowledged, or committed while their acknowledgement was cut off).
    assert sum(len(s) for s in found.values()) >= len(acknowledged) >= 300
