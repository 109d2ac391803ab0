"""SQLite specifics: files, WAL and durability, refusals, locks, a full disk, migrations."""

from __future__ import annotations

import shutil
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from koboi.errors import StoreError
from koboi.store import NewEvent
from koboi_store_sql import SQLStore
from koboi_store_sql.migrate import MIGRATIONS, SchemaTooNew, revisions
from koboi_store_sql.schema import VERSION_TABLE

HEAD = revisions().head


def _snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _wreck(path: Path) -> None:
    """Keep the SQLite magic header, overwrite everything after it."""
    data = bytearray(path.read_bytes())
    data[16:] = b"\xff" * (len(data) - 16)
    path.write_bytes(bytes(data))


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.touch()


# -- files ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_relative_path_and_parent_directories_are_created_on_open(tmp_path: Path) -> None:
    store = SQLStore("sqlite:///deep/er/koboi.db", tmp_path)
    assert not (tmp_path / "deep").exists()
    async with store:
        await store.create_session("s1")
    assert (tmp_path / "deep" / "er" / "koboi.db").is_file()


@pytest.mark.anyio
async def test_data_survives_close_and_reopen(db_path: Path) -> None:
    async with SQLStore(f"sqlite:///{db_path}") as store:
        await store.create_session("kept", owner="me", metadata={"k": [1, 2]})
        await store.append("kept", [NewEvent("a", {"x": 1}), NewEvent("b")])
    async with SQLStore(f"sqlite:///{db_path}") as store:
        info = await store.get_session("kept")
        assert (info.owner, dict(info.metadata), info.last_seq) == ("me", {"k": [1, 2]}, 2)
        assert [(e.seq, e.type, dict(e.data)) for e in await store.read("kept")] == [
            (1, "a", {"x": 1}),
            (2, "b", {}),
        ]
        assert [e.seq for e in await store.append("kept", [NewEvent("c")])] == [3]


def _pragmas(store: SQLStore) -> tuple[str, int, int]:
    database = store._database
    assert database is not None
    with database.write(store.target.durability, store.target.busy_timeout) as connection:
        journal = connection.exec_driver_sql("PRAGMA journal_mode").scalar_one()
        synchronous = connection.exec_driver_sql("PRAGMA synchronous").scalar_one()
        timeout = connection.exec_driver_sql("PRAGMA busy_timeout").scalar_one()
    return str(journal), int(synchronous), int(timeout)


@pytest.mark.anyio
async def test_wal_and_synchronous_follow_the_durability_option(db_path: Path) -> None:
    async with SQLStore(f"sqlite:///{db_path}") as full:
        assert _pragmas(full) == ("wal", 2, 5000)  # synchronous=FULL
        # A second store with other options shares the one writer connection,
        # and each write runs with its own store's settings.
        async with SQLStore(f"sqlite:///{db_path}?durability=process&busy_timeout=1") as normal:
            assert normal._database is full._database
            assert _pragmas(normal) == ("wal", 1, 1000)  # synchronous=NORMAL
            assert _pragmas(full) == ("wal", 2, 5000)
            await normal.create_session("n")
            await full.append("n", [NewEvent("x")])
            assert [e.type for e in await normal.read("n")] == ["x"]


@pytest.mark.anyio
async def test_one_writer_per_file_even_through_two_spellings(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    async with (
        SQLStore(f"sqlite:///{tmp_path}/real/k.db") as one,
        SQLStore("sqlite:///link/k.db", tmp_path) as two,
    ):
        assert one._database is two._database
        assert one._database is not None
        assert one._database.writer.pool.size() == 1


@pytest.mark.anyio
async def test_store_must_be_opened(db_path: Path) -> None:
    with pytest.raises(StoreError, match="not open"):
        await SQLStore(f"sqlite:///{db_path}").get_session("x")


@pytest.mark.anyio
async def test_non_json_event_data_writes_nothing(db_path: Path) -> None:
    async with SQLStore(f"sqlite:///{db_path}") as store:
        await store.create_session("s")
        with pytest.raises(StoreError, match="JSON"):
            await store.append("s", [NewEvent("ok"), NewEvent("bad", {"x": object()})])
        with pytest.raises(StoreError, match="JSON"):
            await store.append("s", [NewEvent("nan", {"x": float("nan")})])
        assert await store.read("s") == []


# -- refusals: the file is never modified ------------------------------------------


@pytest.mark.anyio
async def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("my precious notes, not a database\n" * 20)
    before = _snapshot(path)
    with pytest.raises(StoreError, match=r"not a SQLite database") as caught:
        async with SQLStore(f"sqlite:///{path}"):
            pass
    assert str(path) in str(caught.value)
    assert _snapshot(path) == before
    assert _names(tmp_path) == ["notes.db"]


@pytest.mark.anyio
async def test_a_corrupt_sqlite_file_is_refused_untouched(db_path: Path) -> None:
    async with SQLStore(f"sqlite:///{db_path}") as store:
        await store.create_session("s")
    _wreck(db_path)
    before = _snapshot(db_path)
    with pytest.raises(StoreError, match=r"not a SQLite database or is corrupt") as caught:
        async with SQLStore(f"sqlite:///{db_path}"):
            pass
    assert str(db_path) in str(caught.value)
    assert _snapshot(db_path) == before


@pytest.mark.anyio
async def test_a_database_of_another_application_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    connection.close()
    before = _snapshot(path)
    with pytest.raises(StoreError, match="another application"):
        async with SQLStore(f"sqlite:///{path}"):
            pass
    assert _snapshot(path) == before


@pytest.mark.anyio
async def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not a file"):
        async with SQLStore(f"sqlite:///{tmp_path}"):
            pass


def _stamp(path: Path, revision: str) -> None:
    connection = sqlite3.connect(path)
    with connection:
        connection.execute(f"UPDATE {VERSION_TABLE} SET version_num = ?", (revision,))
    connection.close()


@pytest.mark.anyio
async def test_a_database_from_a_newer_koboi_is_refused_untouched(db_path: Path) -> None:
    async with SQLStore(f"sqlite:///{db_path}") as store:
        await store.create_session("s")
    _stamp(db_path, "9999_future")
    before = _snapshot(db_path)
    with pytest.raises(SchemaTooNew) as caught:
        async with SQLStore(f"sqlite:///{db_path}"):
            pass
    message = str(caught.value)
    assert "written by a newer koboi (schema revision 9999_future" in message
    assert "upgrade koboi" in message
    assert str(db_path) in message
    assert _snapshot(db_path) == before


# -- migrations ------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_new_database_is_migrated_to_the_latest_revision(db_path: Path) -> None:
    async with SQLStore(f"sqlite:///{db_path}") as store:
        assert await store.schema_revision() == HEAD
    connection = sqlite3.connect(db_path)
    tables = {r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    connection.close()
    assert {"sessions", "events", "leases", VERSION_TABLE} <= tables


@pytest.mark.anyio
async def test_an_empty_file_becomes_a_store(db_path: Path) -> None:
    _touch(db_path)
    async with SQLStore(f"sqlite:///{db_path}") as store:
        assert await store.schema_revision() == HEAD


NEXT_REVISION = '''
"""A later revision, for testing the upgrade path only."""
import sqlalchemy as sa
from alembic import op

revision = "9000_test"
down_revision = "{head}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("test_note", sa.Text(), nullable=True))
    op.execute("UPDATE sessions SET test_note = 'migrated ' || id")


def downgrade() -> None:
    op.drop_column("sessions", "test_note")
'''


@pytest.fixture
def newer_migrations(tmp_path: Path) -> Path:
    """The shipped migrations plus one more revision, as a future koboi would ship them."""
    location = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS, location, ignore=shutil.ignore_patterns("__pycache__"))
    (location / "versions" / "9000_test.py").write_text(NEXT_REVISION.format(head=HEAD))
    return location


@pytest.mark.anyio
async def test_an_older_database_is_upgraded_on_open(db_path: Path, newer_migrations: Path) -> None:
    url = f"sqlite:///{db_path}"
    async with SQLStore(url) as old:
        await old.create_session("kept")
        await old.append("kept", [NewEvent("a")])
    async with SQLStore(url, migrations=newer_migrations) as new:
        assert await new.schema_revision() == "9000_test"
        assert [e.type for e in await new.read("kept")] == ["a"]
        assert [e.seq for e in await new.append("kept", [NewEvent("b")])] == [2]
    connection = sqlite3.connect(db_path)
    assert connection.execute("SELECT test_note FROM sessions").fetchall() == [("migrated kept",)]
    connection.close()
    # ... and this (older) koboi now refuses the upgraded database, leaving it alone.
    before = _snapshot(db_path)
    with pytest.raises(SchemaTooNew, match="9000_test"):
        async with SQLStore(url):
            pass
    assert _snapshot(db_path) == before


@pytest.mark.anyio
async def test_a_failing_migration_leaves_the_database_as_it_was(
    db_path: Path, newer_migrations: Path
) -> None:
    script = newer_migrations / "versions" / "9000_test.py"
    script.write_text(
        script.read_text().replace(
            "op.execute(\"UPDATE sessions SET test_note = 'migrated ' || id\")",
            'op.execute("UPDATE no_such_table SET x = 1")',
        )
    )
    url = f"sqlite:///{db_path}"
    async with SQLStore(url) as store:
        await store.create_session("kept")
    with pytest.raises(StoreError):
        async with SQLStore(url, migrations=newer_migrations):
            pass
    async with SQLStore(url) as store:
        assert await store.schema_revision() == HEAD
        assert (await store.get_session("kept")).id == "kept"
    connection = sqlite3.connect(db_path)
    columns = [row[1] for row in connection.execute("PRAGMA table_info(sessions)")]
    connection.close()
    assert "test_note" not in columns, "the half-done migration was rolled back"


# -- locks and full disks ------------------------------------------------------------


@pytest.mark.anyio
async def test_a_locked_database_waits_for_the_busy_timeout_then_fails_clearly(
    db_path: Path,
) -> None:
    async with SQLStore(f"sqlite:///{db_path}?busy_timeout=0.3") as store:
        await store.create_session("s")
        other = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        try:
            started = time.monotonic()
            with pytest.raises(StoreError, match=r"is locked.*0\.3 s") as caught:
                await store.append("s", [NewEvent("blocked")])
            waited = time.monotonic() - started
            assert 0.25 <= waited < 3.0
            assert str(db_path) in str(caught.value)
            assert await store.read("s") == [], "reads are not blocked by a writer (WAL)"
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert [e.seq for e in await store.append("s", [NewEvent("after")])] == [1]


@pytest.mark.anyio
async def test_a_lock_released_within_the_timeout_is_waited_for(db_path: Path) -> None:
    async with SQLStore(f"sqlite:///{db_path}?busy_timeout=3") as store:
        await store.create_session("s")
        other = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")

        async def release_soon() -> None:
            await anyio.sleep(0.3)
            other.execute("ROLLBACK")

        async with anyio.create_task_group() as tg:
            tg.start_soon(release_soon)
            assert [e.seq for e in await store.append("s", [NewEvent("late")])] == [1]
        other.close()


def _limit_pages(store: SQLStore, extra_pages: int) -> None:
    database = store._database
    assert database is not None
    with database.writer_connection() as connection:
        raw = connection.connection.driver_connection
        assert raw is not None
        pages = raw.execute("PRAGMA page_count").fetchone()[0]
        raw.execute(f"PRAGMA max_page_count = {pages + extra_pages}")


@pytest.mark.anyio
async def test_a_full_disk_is_a_clear_error_and_the_journal_stays_readable(
    db_path: Path,
) -> None:
    async with SQLStore(f"sqlite:///{db_path}") as store:
        await store.create_session("s")
        await store.append("s", [NewEvent("before", {"n": 1})])
        _limit_pages(store, 0)  # the database may not grow by a single page
        big = [NewEvent("big", {"blob": "x" * 100_000}) for _ in range(3)]
        with pytest.raises(StoreError, match="full") as caught:
            await store.append("s", big)
        assert "nothing was written" in str(caught.value)
        assert [e.type for e in await store.read("s")] == ["before"]
        assert (await store.get_session("s")).last_seq == 1
        _limit_pages(store, 1_000_000)
        assert [e.seq for e in await store.append("s", big)] == [2, 3, 4]
    async with SQLStore(f"sqlite:///{db_path}") as store:
        assert [e.seq for e in await store.read("s")] == [1, 2, 3, 4]


def test_latest_revision_constant_is_alembics_head() -> None:
    from koboi_store_sql import migrate

    assert migrate.revisions().head == migrate.LATEST_REVISION


def test_reopening_an_up_to_date_database_does_not_import_alembic(tmp_path: Path) -> None:
    import subprocess
    import sys

    db = tmp_path / "k.db"
    code = (
        "import anyio, sys\n"
        "from pathlib import Path\n"
        "from koboi_store_sql import SQLStore\n"
        "async def main():\n"
        f"    async with SQLStore('sqlite:///{db}', Path('.')) as s:\n"
        "        await s.list_sessions()\n"
        "anyio.run(main)\n"
        "print('alembic' in sys.modules)\n"
    )
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert first.stdout.strip() == "True"  # a new database is migrated
    assert again.stdout.strip() == "False"  # an up-to-date one is not


@pytest.mark.anyio
async def test_a_run_that_fills_the_disk_stops_clearly_and_resumes(db_path: Path) -> None:
    from koboi import KoboiAgent, tool
    from koboi_scripted import ScriptedProvider

    url = f"sqlite:///{db_path}"
    first_store = SQLStore(url)
    calls: list[int] = []

    @tool(risk="safe")
    def produce(n: int) -> str:
        """Produce a large result; the disk fills up while the second call runs."""
        calls.append(n)
        if n == 2 and len(calls) == 2:
            _limit_pages(first_store, 0)
        return "x" * 50_000

    turns = [{"name": "produce", "arguments": {"n": i}} for i in (1, 2, 3)] + ["done"]
    config = {"llm": {"provider": "scripted"}, "agent": {"stream": False}}

    def agent(store: SQLStore) -> KoboiAgent:
        # The agent opens and closes the store it is given.
        return KoboiAgent.from_dict(
            config,
            provider=ScriptedProvider.from_turns(turns),
            store=store,
            extra_tools=[produce],
        )

    async with agent(first_store) as first:
        with pytest.raises(StoreError, match="full"):
            await first.run("go")
    # Space is freed (the limit lived on the closed connection); what was committed
    # is intact and readable, and the run resumes.
    async with agent(SQLStore(url)) as second:
        (session,) = await second.store.list_sessions()
        types = [e.type for e in await second.store.read(session.id)]
        assert types[-1] == "tool_call_started"
        result = await second.resume_run(session.id)
    assert (result.outcome, result.output) == ("completed", "done")
    # The call that was running when the disk filled is in doubt: not run again.
    assert calls == [1, 2, 3]


# -- the audit trail ---------------------------------------------------------------


@pytest.mark.anyio
async def test_the_database_refuses_to_change_or_delete_audit_records(db_path: Path) -> None:
    async with SQLStore(f"sqlite:///{db_path}") as store:
        await store.create_session("s")
        await store.append("s", [NewEvent("a")], audit=[{"phase": "before"}])
    connection = sqlite3.connect(db_path)
    try:
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            connection.execute("UPDATE audit SET data = '{}'")
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            connection.execute("DELETE FROM audit")
        # Control: the same connection may add records, and other tables stay writable.
        connection.execute("INSERT INTO audit (session_id, at, data) VALUES ('s', 0, '{}')")
        connection.execute("UPDATE sessions SET status = 'failed'")
        connection.commit()
        assert connection.execute("SELECT count(*) FROM audit").fetchone() == (2,)
    finally:
        connection.close()
