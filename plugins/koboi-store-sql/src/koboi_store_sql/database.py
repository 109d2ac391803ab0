"""Connections to one database, shared by every store of this process that opens it.

SQLite rules (why each one):

- WAL journal: readers never block the writer and the writer never blocks readers.
- ONE writer connection per database file per process, used under a lock: SQLite
  allows one writer at a time anyway; queueing in-process writers on a lock is
  cheaper and fairer than having them spin on SQLITE_BUSY.
- Writes run in ``BEGIN IMMEDIATE``: the write lock is taken when the
  transaction starts, so a read-then-write transaction (``append`` reads
  ``last_seq``) can never fail half-way with a lock upgrade error, and waits for
  another process's writer up to the busy timeout.
- ``synchronous=FULL`` (durability ``power_loss``) or ``NORMAL`` (``process``),
  set per write from the store's options, because stores with different options
  may share the writer connection.
- Concurrent writes share transactions (:meth:`Database.commit_batch`, driven by
  :mod:`koboi_store_sql.group_commit`): per-transaction overhead, not the disk,
  was what limited a busy server.

PostgreSQL: a pooled engine; writes lock the session row ``FOR UPDATE``, which
serialises appends, status changes and lease changes of one session.
"""

from __future__ import annotations

import asyncio
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from koboi.errors import StoreError
from koboi.logs import get_logger
from koboi_store_sql import migrate
from koboi_store_sql.files import make_private
from koboi_store_sql.group_commit import GroupCommitter
from koboi_store_sql.schema import TABLES, VERSION_TABLE
from koboi_store_sql.url import StoreURL

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

    from koboi_store_sql.group_commit import PendingWrite

T = TypeVar("T")

log = get_logger(__name__)

SQLITE_HEADER = b"SQLite format 3\x00"
# Serialises schema migrations of koboi's tables across PostgreSQL clients.
_PG_MIGRATION_LOCK = 0x6B6F626F69  # "koboi"

_SYNCHRONOUS = {"power_loss": "FULL", "process": "NORMAL"}


# -- errors ----------------------------------------------------------------------


def translate(exc: BaseException, target: StoreURL) -> StoreError | None:
    """A clear :class:`StoreError` for a driver error, or None when ``exc`` is not one."""
    from sqlalchemy import exc as sa_exc

    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, sa_exc.TimeoutError):
        return StoreError(
            f"no free connection to {target.label} (pool of {target.pool_size} busy); "
            "raise ?pool_size= in the store URL"
        )
    orig = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
    if isinstance(orig, sqlite3.Error):
        return _sqlite_error(orig, target)
    try:
        import psycopg
    except ImportError:  # pragma: no cover - a declared dependency
        return None
    if isinstance(orig, psycopg.Error):
        return _postgres_error(orig, target)
    return None


def _sqlite_error(exc: sqlite3.Error, target: StoreURL) -> StoreError:
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    where = target.label
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        return StoreError(
            f"the database {where} is locked: another writer kept it busy for more than "
            f"{target.busy_timeout:g} s; nothing was written (retry, or raise "
            "?busy_timeout= in the store URL)"
        )
    if name == "SQLITE_FULL" or "full" in text:
        return StoreError(
            f"cannot write to {where}: the disk (or the database size limit) is full; "
            "nothing was written and the journal is intact; free some space and retry"
        )
    if name.startswith("SQLITE_IOERR") or "I/O error" in text:
        return StoreError(
            f"I/O error on {where} ({name or text}); the transaction was rolled back; "
            "check the disk"
        )
    if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or "not a database" in text:
        return StoreError(
            f"{where} is not a SQLite database or is corrupt ({text}); koboi left it as it "
            "is: move it away or point the store URL at another file"
        )
    if name.startswith("SQLITE_READONLY") or "readonly" in text:
        return StoreError(f"cannot write to {where}: it is read-only ({text}); check permissions")
    if name.startswith("SQLITE_CANTOPEN") or "unable to open" in text:
        return StoreError(f"cannot open the database {where} ({text}); check the path")
    return StoreError(f"SQLite error on {where}: {text}")


def _postgres_error(exc: Any, target: StoreURL) -> StoreError:
    import psycopg

    state = getattr(exc, "sqlstate", None) or ""
    text = " ".join(str(exc).split()) or type(exc).__name__
    where = target.label
    if state == "53100":
        return StoreError(f"PostgreSQL at {where} is out of disk space; nothing was written")
    if state in ("55P03", "40P01", "57014"):
        return StoreError(
            f"PostgreSQL at {where}: waited more than {target.busy_timeout:g} s for a lock "
            f"({text}); nothing was written"
        )
    if not state and isinstance(exc, psycopg.OperationalError):
        return StoreError(f"cannot connect to PostgreSQL at {where}: {text}")
    return StoreError(f"PostgreSQL error on {where}: {text}")


@contextmanager
def translated(target: StoreURL) -> Iterator[None]:
    try:
        yield
    except StoreError:
        raise
    except Exception as exc:  # a driver's error, as a StoreError when we know its meaning
        clear = translate(exc, target)
        if clear is None:
            raise
        raise clear from exc


# -- SQLite files ------------------------------------------------------------------


def inspect_sqlite_file(target: StoreURL) -> str | None:
    """The schema revision of an existing SQLite file (None: new or empty), read-only.

    Refuses, without writing a byte, a path that is not a file, a file that is
    not a SQLite database (header check), a corrupt one, and a SQLite database
    that holds tables of some other application.
    """
    path = target.path
    assert path is not None
    if not path.exists():
        return None
    if not path.is_file():
        raise StoreError(f"the store path {path} exists but is not a file")
    with path.open("rb") as handle:
        header = handle.read(len(SQLITE_HEADER))
    if header == b"":
        return None  # an empty file is an empty database to SQLite
    if header != SQLITE_HEADER:
        raise StoreError(
            f"{path} is not a SQLite database (its first bytes are not the SQLite header); "
            "koboi left it untouched: move it away or point the store URL at another file"
        )
    uri = f"file:{_uri_path(path)}?mode=ro"
    try:
        connection = sqlite3.connect(uri, uri=True, timeout=target.busy_timeout)
    except sqlite3.Error as exc:
        raise _sqlite_error(exc, target) from None
    try:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        tables = {t for t in tables if not t.startswith("sqlite_")}
        if VERSION_TABLE in tables:
            row = connection.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()
            return str(row[0]) if row else None
        if tables - TABLES:
            shown = ", ".join(sorted(tables - TABLES)[:5])
            raise StoreError(
                f"{path} is a SQLite database of another application (tables: {shown}); "
                "koboi left it untouched: point the store URL at another file"
            )
        return None
    except sqlite3.Error as exc:
        raise _sqlite_error(exc, target) from None
    finally:
        connection.close()


def _uri_path(path: Path) -> str:
    from urllib.parse import quote

    return quote(str(path))


# -- the shared database -----------------------------------------------------------


class Database:
    """Engines for one database; one instance per database per process (see :func:`attach`)."""

    def __init__(self, target: StoreURL) -> None:
        self.target = target
        self.users = 0
        self.write_lock = threading.Lock()
        self.writer: Engine
        self.reader: Engine
        #: SQLite only: batches concurrent writes into shared transactions.
        self.committer: GroupCommitter | None = None
        #: SQLite only: the thread the batches run on, and its one writer connection,
        #: kept checked out (the writer pool holds exactly one).
        self.writer_thread: WriterThread | None = None
        self.checkpointer: Checkpointer | None = None
        self._writer_connection: Connection | None = None
        if target.dialect == "sqlite":
            self.writer = self._sqlite_engine(writer=True)
            self.reader = self._sqlite_engine(writer=False)
            self.committer = GroupCommitter(self)
            self.checkpointer = Checkpointer(target, self._finish_checkpoint)
            self.writer_thread = WriterThread(
                f"koboi-sqlite-writer:{target.label}", after_each=self.checkpointer.committed
            )
        else:
            self.writer = self.reader = self._postgres_engine()

    # engines

    def _sqlite_engine(self, *, writer: bool) -> Engine:
        from sqlalchemy import create_engine, event
        from sqlalchemy.pool import QueuePool

        target = self.target
        engine = create_engine(
            target.driver_url,
            poolclass=QueuePool,
            # The single writer connection; readers get a small pool (WAL: they
            # run concurrently with the writer and with each other).
            pool_size=1 if writer else 4,
            max_overflow=0 if writer else 8,
            pool_timeout=max(target.busy_timeout, 1.0) * 4,
            connect_args={"check_same_thread": False, "timeout": target.busy_timeout},
        )
        begin = "BEGIN IMMEDIATE" if writer else "BEGIN"

        @event.listens_for(engine, "connect")
        def _configure(dbapi_connection: Any, record: Any) -> None:
            # Take transaction control away from the sqlite3 module (it would
            # emit a deferred BEGIN by itself); "begin" below emits ours.
            dbapi_connection.isolation_level = None
            dbapi_connection.execute(f"PRAGMA busy_timeout = {int(target.busy_timeout * 1000)}")
            if writer:
                mode = dbapi_connection.execute("PRAGMA journal_mode = WAL").fetchone()
                if not mode or str(mode[0]).lower() != "wal":
                    raise StoreError(f"cannot switch {target.label} to WAL mode (got {mode})")
                # Checkpoints run on a thread of their own (Checkpointer), not inside
                # the commit that happens to cross SQLite's threshold.
                dbapi_connection.execute("PRAGMA wal_autocheckpoint = 0")
            dbapi_connection.execute(f"PRAGMA synchronous = {_SYNCHRONOUS[target.durability]}")
            dbapi_connection.execute("PRAGMA foreign_keys = ON")
            record.info["koboi.settings"] = (target.durability, target.busy_timeout)

        @event.listens_for(engine, "begin")
        def _begin(connection: Connection) -> None:
            # On the driver's connection: through SQLAlchemy this one statement
            # cost about a quarter of a small write transaction.
            raw = connection.connection.driver_connection
            assert raw is not None
            raw.execute(begin)

        return engine

    def _postgres_engine(self) -> Engine:
        from sqlalchemy import create_engine, event

        target = self.target
        engine = create_engine(
            target.driver_url,
            pool_size=target.pool_size,
            max_overflow=target.pool_size,
            pool_pre_ping=True,
            pool_timeout=30,
        )
        settings = [f"SET lock_timeout = {int(target.busy_timeout * 1000)}"]
        settings.append(
            "SET synchronous_commit = " + ("off" if target.durability == "process" else "on")
        )

        @event.listens_for(engine, "connect")
        def _configure(dbapi_connection: Any, record: Any) -> None:
            with dbapi_connection.cursor() as cursor:
                for statement in settings:
                    cursor.execute(statement)
            dbapi_connection.commit()

        return engine

    # transactions

    @contextmanager
    def write(self, durability: str, busy_timeout: float) -> Iterator[Connection]:
        """A write transaction (committed on success, rolled back on any error)."""
        if self.target.dialect != "sqlite":
            with translated(self.target), self.writer.begin() as connection:
                yield connection
            return
        if not self.write_lock.acquire(timeout=busy_timeout):
            raise StoreError(
                f"the database {self.target.label} is locked: another writer in this process "
                f"kept it busy for more than {busy_timeout:g} s; nothing was written"
            )
        try:
            with translated(self.target):
                connection = self._held_writer()
                self._apply_settings(connection, durability, busy_timeout)
                try:
                    with connection.begin():
                        yield connection
                finally:
                    if connection.invalidated or connection.closed:
                        self._drop_writer()
        finally:
            self.write_lock.release()

    def _held_writer(self) -> Connection:
        """The writer connection, checked out once and kept (under ``write_lock``).

        A checkout per transaction (the pool's queue, a new ``Connection`` object,
        its return and reset) cost about a quarter of a small SQLite write.
        """
        connection = self._writer_connection
        if connection is None or connection.closed or connection.invalidated:
            self._drop_writer()
            connection = self._writer_connection = self.writer.connect()
        return connection

    def _finish_checkpoint(self) -> bool:
        """The completing part of a checkpoint (see :class:`Checkpointer`), on the
        writer thread between two batches; False when another thread is writing."""
        if not self.write_lock.acquire(blocking=False):
            return False
        try:
            raw = self._held_writer().connection.driver_connection
            assert raw is not None
            raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except Exception:  # as in the background part: the next round tries again
            pass
        finally:
            self.write_lock.release()
        return True

    @contextmanager
    def writer_connection(self) -> Iterator[Connection]:
        """SQLite: the writer connection outside any transaction, under the write lock
        (maintenance and tests: pragmas such as ``max_page_count``)."""
        with self.write_lock:
            yield self._held_writer()

    def _drop_writer(self) -> None:
        connection, self._writer_connection = self._writer_connection, None
        if connection is not None:
            with suppress(Exception):  # closing a broken connection
                connection.close()

    def commit_batch(self, batch: Sequence[PendingWrite[Any]]) -> None:
        """Run a batch of writes in one SQLite transaction, each in its own savepoint.

        Records each write's result or error on it (never raises): see
        :mod:`koboi_store_sql.group_commit` for the guarantees.
        """
        # The strongest durability asked for applies to the whole commit.
        durability = "power_loss" if any(w.durability == "power_loss" for w in batch) else "process"
        busy_timeout = max(w.busy_timeout for w in batch)
        try:
            with self.write(durability, busy_timeout) as connection:
                if len(batch) == 1:
                    # Alone: the transaction is its savepoint (an error rolls it back).
                    batch[0].result = batch[0].operation(connection)
                else:
                    for pending in batch:
                        self._run_in_savepoint(connection, pending)
        except BaseException as exc:
            # Rolled back (or never begun): nothing of the batch was written.
            for pending in batch:
                if pending.error is None:
                    pending.error, pending.result = exc, None

    def _run_in_savepoint(self, connection: Connection, pending: PendingWrite[Any]) -> None:
        # Plain SQL on the driver's connection: SQLAlchemy's nested transactions
        # cost several times SQLite's own work here. Operations that open their
        # own (named) savepoints nest inside this one.
        raw = connection.connection.driver_connection
        assert raw is not None
        raw.execute("SAVEPOINT koboi_write")
        try:
            pending.result = pending.operation(connection)
        except Exception as exc:  # one write of the batch failed: roll it back alone
            if not raw.in_transaction:
                # SQLite ended the whole transaction itself (I/O error, full disk):
                # the batch is lost; every caller gets this error.
                raise
            try:
                raw.execute("ROLLBACK TO koboi_write")
                raw.execute("RELEASE koboi_write")
            except Exception:  # the rollback failed too: the write's own error is the news
                raise exc from None
            pending.error = translate(exc, self.target) or exc
        else:
            raw.execute("RELEASE koboi_write")

    @staticmethod
    def _apply_settings(connection: Connection, durability: str, busy_timeout: float) -> None:
        record_info = connection.connection.info
        wanted = (durability, busy_timeout)
        if record_info.get("koboi.settings") != wanted:
            raw = connection.connection.driver_connection
            assert raw is not None
            raw.execute(f"PRAGMA synchronous = {_SYNCHRONOUS[durability]}")
            raw.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            record_info["koboi.settings"] = wanted

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction: one consistent snapshot, always rolled back."""
        with (
            translated(self.target),
            self.reader.connect() as connection,
            connection.begin() as transaction,
        ):
            yield connection
            transaction.rollback()

    # schema

    def prepare(self, migrations: Path | None) -> None:
        """Refuse a database this koboi must not touch; create or upgrade the schema."""
        target = self.target
        if target.dialect == "sqlite":
            assert target.path is not None
            # Before connecting for writing: a refused file is never modified.
            current = inspect_sqlite_file(target)
            # Then, before SQLite creates anything: 0600 files in a 0700 directory.
            make_private(target.path)
            if migrations is None and current == migrate.LATEST_REVISION:
                return  # up to date: nothing to check with alembic
            migrate.refuse_if_newer(current, migrate.revisions(migrations), target.label)
        elif migrations is None:
            with self.read() as connection:
                if migrate.current_revision_sql(connection) == migrate.LATEST_REVISION:
                    return
        with self.write(target.durability, target.busy_timeout) as connection:
            if target.dialect == "postgresql":
                connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")
            migrate.upgrade(connection, target.label, migrations)

    def revision(self) -> str | None:
        with self.read() as connection:
            return migrate.current_revision(connection)

    def dispose(self) -> None:
        if self.writer_thread is not None:
            self.writer_thread.stop()
        if self.checkpointer is not None:
            self.checkpointer.stop()
        with self.write_lock:
            self._drop_writer()
        self.writer.dispose()
        if self.reader is not self.writer:
            self.reader.dispose()


class WriterThread:
    """The one thread that runs a SQLite database's write batches.

    A hop through anyio's worker pool (a capacity limiter, a worker looked up,
    a wake-up through its queue each way) cost about 150 µs here, twice per agent
    step; this thread, woken through a queue, hands each result back to the
    caller's event loop with ``call_soon_threadsafe`` in about half that. It
    serves callers of every event loop of the process, one batch at a time, in
    the order they were submitted; SQLite has one writer anyway.
    """

    _STOP = object()

    def __init__(self, name: str, after_each: Callable[[], None] | None = None) -> None:
        self.name = name
        self._after_each = after_each
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on the writer thread; its result or its exception."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - another anyio backend than asyncio
            import anyio.to_thread

            return await anyio.to_thread.run_sync(function, *args)
        future: asyncio.Future[T] = loop.create_future()
        self._start()
        self._queue.put((loop, future, function, args))
        # Shielded: the batch runs to its end whatever happens to the caller; the
        # caller (group_commit) sees it through under a shielded cancel scope.
        return await asyncio.shield(future)

    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._STOP:
                return
            loop, future, function, args = item
            try:
                result, error = function(*args), None
            except BaseException as exc:  # handed to the caller
                result, error = None, exc
            # RuntimeError: the caller's event loop is closed, nobody waits.
            with suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, result, error)
            if self._after_each is not None:
                try:
                    self._after_each()
                except Exception as exc:  # never the end of the writer thread
                    log.warning("after a write batch on %s: %s", self.name, exc)

    def stop(self) -> None:
        """End the thread once the batches already submitted have run."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None and thread.is_alive():
            self._queue.put(self._STOP)
            if thread is not threading.current_thread():
                thread.join()


class Checkpointer:
    """Copies a SQLite database's WAL back into the database file, off the write path.

    SQLite's automatic checkpoint runs inside the commit that crosses its threshold
    (1,000 pages): one write in about a hundred then took 15-20 ms instead of a
    fraction of one, a third of all the time spent writing at ``durability=process``.
    The writer connection turns it off (``wal_autocheckpoint = 0``) and checkpoints
    run in two parts:

    1. every :attr:`every` batches, a thread of its own, with a connection of its
       own, runs a PASSIVE checkpoint: it copies the WAL's frames into the database
       file and syncs it while the writer goes on committing (PASSIVE never waits
       for the writer or for readers);
    2. the writes committed meanwhile keep that checkpoint from being complete, and
       SQLite restarts the WAL from its beginning only after a complete one. So
       after the next batch, once its callers are woken, the writer thread runs a
       second PASSIVE checkpoint on its own connection: only the few frames written
       since are left to copy, no write can come between, and the next write
       starts the WAL afresh.

    A checkpoint syncs the database file at any ``synchronous`` level but OFF, so
    durability is unchanged. A reader holding an old snapshot keeps any checkpoint
    from completing, as before; closing the last connection checkpoints what is left.
    """

    #: Batches between checkpoints: a small append writes 5-8 pages, so about
    #: SQLite's own threshold of 1,000 pages.
    every = 128

    def __init__(self, target: StoreURL, finish: Callable[[], bool]) -> None:
        self.target = target
        #: Runs the completing checkpoint on the writer's connection; False when it
        #: could not run now (the connection was busy).
        self._finish = finish
        self._batches = 0
        self._bulk_running = False
        self._finish_due = False
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        #: How many checkpoints ran, in the background and completing (tests, benchmarks).
        self.checkpoints = 0
        self.completions = 0

    def committed(self) -> None:
        """Called by the writer thread after each batch, its callers already woken."""
        if self._finish_due:
            if self._finish():
                self._finish_due = False
                self.completions += 1
            return
        self._batches += 1
        if self._batches >= self.every and not self._bulk_running:
            self._batches = 0
            self._bulk_running = True
            self._start()
            self._wake.set()

    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._stopping:
                return
            if self._thread is None or not self._thread.is_alive():
                name = f"koboi-sqlite-checkpoint:{self.target.label}"
                self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        assert self.target.path is not None
        connection: sqlite3.Connection | None = None
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                try:
                    if connection is None:
                        connection = sqlite3.connect(
                            self.target.path,
                            timeout=self.target.busy_timeout,
                            isolation_level=None,
                            check_same_thread=False,
                        )
                        connection.execute(
                            f"PRAGMA synchronous = {_SYNCHRONOUS[self.target.durability]}"
                        )
                    connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.checkpoints += 1
                    self._finish_due = True
                except sqlite3.Error:
                    # Busy or failing: the next round tries again, and closing the
                    # last connection checkpoints anyway. The writes are not at stake.
                    if connection is not None:
                        connection.close()
                        connection = None
                finally:
                    self._bulk_running = False
        finally:
            if connection is not None:
                connection.close()

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            thread, self._thread = self._thread, None
        self._wake.set()
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join()


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


_databases: dict[str, Database] = {}
_databases_lock = threading.Lock()


def _key(target: StoreURL) -> str:
    if target.path is not None:
        # One writer per *file*: two spellings of one path must share it.
        return f"sqlite:{os.path.realpath(target.path)}"
    return target.key


def attach(target: StoreURL, migrations: Path | None = None) -> Database:
    """The process's :class:`Database` for ``target``, prepared on first use."""
    with _databases_lock:
        key = _key(target)
        database = _databases.get(key)
        if database is None:
            database = Database(target)
            try:
                with translated(target):
                    database.prepare(migrations)
            except BaseException:  # never keep a half-prepared database
                database.dispose()
                raise
            _databases[key] = database
        database.users += 1
        return database


def detach(database: Database) -> None:
    """Give back a database from :func:`attach`; the last user closes its connections."""
    with _databases_lock:
        database.users -= 1
        if database.users > 0:
            return
        key = _key(database.target)
        if _databases.get(key) is database:
            del _databases[key]
    database.dispose()


def run(target: StoreURL, operation: Callable[[], T]) -> T:
    """Run ``operation`` turning driver errors into clear :class:`StoreError`."""
    with translated(target):
        return operation()
