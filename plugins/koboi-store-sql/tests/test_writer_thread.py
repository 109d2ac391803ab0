"""The SQLite writer's own thread and its checkpoints, off the write path.

Every write of a SQLite database runs on one thread of the process
(``WriterThread``), whatever event loop asked for it; the WAL is copied back into
the database by a thread of its own (``Checkpointer``) instead of inside the
commit that crosses SQLite's threshold.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import anyio
import pytest
from sqlalchemy.engine import Connection

from koboi.store import NewEvent
from koboi_store_sql import SQLStore
from koboi_store_sql.database import Database, WriterThread


def _database(store: SQLStore) -> Database:
    database = store._database
    assert database is not None and database.writer_thread is not None
    return database


@pytest.mark.anyio
async def test_every_write_runs_on_the_one_writer_thread_and_errors_reach_the_caller(
    db_path: Path,
) -> None:
    async with SQLStore(f"sqlite:///{db_path}") as store:
        database = _database(store)
        assert database.committer is not None
        seen: set[str] = set()

        def where(connection: Connection) -> str:
            seen.add(threading.current_thread().name)
            return "ok"

        def boom(connection: Connection) -> None:
            raise ValueError("refused by the operation")

        async with anyio.create_task_group() as group:
            for _ in range(20):
                group.start_soon(database.committer.write, where, "process", 5.0)
        assert seen == {database.writer_thread.name}
        assert threading.current_thread().name not in seen
        with pytest.raises(ValueError, match="refused by the operation"):
            await database.committer.write(boom, "process", 5.0)
        # The thread goes on serving after a failed write.
        await store.create_session("after")
        assert [e.seq for e in await store.append("after", [NewEvent("e", {})])] == [1]


def test_writes_from_several_event_loops_share_the_writer_thread(db_path: Path) -> None:
    url = f"sqlite:///{db_path}"
    names: list[set[str]] = []

    async def one_loop(tag: str) -> None:
        async with SQLStore(url) as store:
            database = _database(store)
            assert database.committer is not None
            seen: set[str] = set()

            def where(connection: Connection) -> None:
                seen.add(threading.current_thread().name)

            await store.create_session(tag)
            for n in range(10):
                await database.committer.write(where, "process", 5.0)
                await store.append(tag, [NewEvent("e", {"n": n})])
            names.append(seen)

    async def main() -> None:
        async with SQLStore(url):  # keeps the database attached across the loops
            threads = [
                threading.Thread(target=anyio.run, args=(one_loop, f"t{i}")) for i in range(3)
            ]
            for thread in threads:
                thread.start()
            await anyio.to_thread.run_sync(lambda: [t.join(30) for t in threads])

    anyio.run(main)
    assert len(names) == 3
    assert len(set().union(*names)) == 1  # one thread served all three loops
    with closing(sqlite3.connect(db_path)) as connection:
        rows = connection.execute(
            "SELECT session_id, count(*), max(seq) FROM events GROUP BY session_id"
        ).fetchall()
    assert sorted(rows) == [("t0", 10, 10), ("t1", 10, 10), ("t2", 10, 10)]


@pytest.mark.anyio
async def test_a_stopped_writer_thread_runs_what_was_submitted_and_a_new_one_starts() -> None:
    writer = WriterThread("test-writer")
    assert await writer.run(lambda: 41 + 1) == 42
    writer.stop()
    writer.stop()  # twice: harmless
    assert await writer.run(lambda: "again") == "again"  # started anew on demand
    writer.stop()


@pytest.mark.anyio
async def test_closing_the_store_ends_its_threads(db_path: Path) -> None:
    async with SQLStore(f"sqlite:///{db_path}") as store:
        await store.create_session("s")
        await store.append("s", [NewEvent("e", {})])
        name = _database(store).writer_thread.name  # type: ignore[union-attr]
        assert any(t.name == name for t in threading.enumerate())
    assert not any(t.name == name for t in threading.enumerate())


def _wal_restarts(db_path: Path) -> int:
    """The WAL header's checkpoint sequence number: SQLite adds one each time it
    restarts the WAL from its beginning (after a complete checkpoint)."""
    with Path(f"{db_path}-wal").open("rb") as wal:
        header = wal.read(16)
    return int.from_bytes(header[12:16], "big")


def _autocheckpoint(connection: Connection) -> int:
    raw = connection.connection.driver_connection
    assert raw is not None
    return int(raw.execute("PRAGMA wal_autocheckpoint").fetchone()[0])


@pytest.mark.anyio
async def test_checkpoints_run_off_the_write_path_and_keep_the_wal_bounded(
    db_path: Path,
) -> None:
    async with SQLStore(f"sqlite:///{db_path}?durability=process") as store:
        database = _database(store)
        checkpointer = database.checkpointer
        assert checkpointer is not None
        with database.writer_connection() as connection:
            # The writer never checkpoints inside a commit.
            assert _autocheckpoint(connection) == 0
        await store.create_session("s")
        event = NewEvent("tool_call_finished", {"result": "x" * 2000})
        restarts = _wal_restarts(db_path)
        batches = checkpointer.every * 6
        for _ in range(batches):
            await store.append("s", [event])
        assert checkpointer.checkpoints >= 3
        assert checkpointer.completions >= 2
        # The checkpoints completed: SQLite restarted the WAL from its beginning
        # again and again, instead of appending every page written to it.
        assert _wal_restarts(db_path) - restarts >= 2
        assert [e.seq for e in await store.read("s")][-1] == batches
    with closing(sqlite3.connect(db_path)) as connection:
        assert connection.execute("SELECT count(*) FROM events").fetchone()[0] == batches


@pytest.mark.anyio
async def test_a_checkpoint_held_back_by_a_reader_does_not_hold_back_the_writes(
    db_path: Path,
) -> None:
    """A checkpoint that cannot finish is the checkpointer's own business: the writes
    go on, the WAL holds them, and a later checkpoint copies them back."""
    async with SQLStore(f"sqlite:///{db_path}?durability=process") as store:
        database = _database(store)
        checkpointer = database.checkpointer
        assert checkpointer is not None
        await store.create_session("s")
        await store.append("s", [NewEvent("e", {"n": -1})])
        # A reader holding a snapshot keeps the checkpoints from completing.
        with closing(sqlite3.connect(db_path, isolation_level=None)) as reader:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM sessions").fetchone()
            restarts = _wal_restarts(db_path)
            for n in range(checkpointer.every * 2):
                await store.append("s", [NewEvent("e", {"n": n})])
            assert checkpointer.checkpoints >= 1  # they ran, and could not complete
            assert _wal_restarts(db_path) == restarts
            reader.execute("ROLLBACK")
        assert len(await store.read("s")) == checkpointer.every * 2 + 1
        # Once the reader is gone, checkpoints complete and the WAL is reused again.
        for n in range(checkpointer.every * 4):
            await store.append("s", [NewEvent("e", {"n": n})])
        assert _wal_restarts(db_path) > restarts
    with closing(sqlite3.connect(db_path)) as connection:
        count = connection.execute("SELECT count(*) FROM events").fetchone()[0]
    assert count == checkpointer.every * 6 + 1
