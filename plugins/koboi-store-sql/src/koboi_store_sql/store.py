"""``SQLStore``: the koboi journal and sessions on SQLite or PostgreSQL.

Operations run on SQLAlchemy's synchronous engine in a worker thread
(``anyio.to_thread.run_sync``). On PostgreSQL every operation is one
transaction and one thread hop. On SQLite the writes of concurrent callers are
grouped: one transaction (each write in its own savepoint), one commit and one
thread hop per batch (see :mod:`koboi_store_sql.group_commit`). Either way a
write that started always finishes (committed or rolled back) before its
caller sees a cancellation.

Timestamps (``created_at``, ``updated_at``, ``at``, lease ``expires_at``) come
from this process's clock (``time.time()``), not the database's: the nodes
sharing a PostgreSQL database must keep their clocks in sync (NTP), or a lease
may look expired early (or late) by the skew between them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread
from sqlalchemy import and_, bindparam, case, delete, func, insert, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from koboi.errors import (
    FencedOut,
    IdempotencyConflict,
    JobNotFound,
    LeaseHeld,
    SessionNotFound,
    StoreError,
)
from koboi.journal import totals_of
from koboi.store import (
    TERMINAL_JOB_STATUSES,
    AuditEntry,
    Job,
    JobQueue,
    JobStatus,
    JournalEvent,
    KeyedRecords,
    Lease,
    NewEvent,
    RecordWrite,
    ResponseCache,
    SessionInfo,
    SessionStatus,
    SessionTotals,
    Store,
    new_job_id,
    new_session_id,
)
from koboi_store_sql import database as db
from koboi_store_sql.prepared import INTEGRITY_ERRORS, Prepared
from koboi_store_sql.schema import audit as audit_table
from koboi_store_sql.schema import counters, jobs, leases, records, response_cache, sessions
from koboi_store_sql.schema import events as events_table
from koboi_store_sql.url import StoreURL, parse_store_url

T = TypeVar("T")

_NO_TOTALS = SessionTotals()

_SESSION_COLUMNS = (
    sessions.c.id,
    sessions.c.status,
    sessions.c.created_at,
    sessions.c.updated_at,
    sessions.c.config_name,
    sessions.c.config_hash,
    sessions.c.owner,
    sessions.c["metadata"],
    sessions.c.last_seq,
    sessions.c.runs,
    sessions.c.model_calls,
    sessions.c.input_tokens,
    sessions.c.output_tokens,
    sessions.c.cost_usd,
)


# The statements of a run's writes (session, status, lease, journal), built once
# and compiled once (prepared.py): per call, SQLAlchemy's execution machinery cost
# more than SQLite's own work (benchmarks/server/README.md).
_LOCK_LAST_SEQ = Prepared(
    select(sessions.c.last_seq).where(sessions.c.id == bindparam("sid")).with_for_update()
)
_INSERT_EVENTS = Prepared(
    insert(events_table).values(
        session_id=bindparam("e_session"),
        seq=bindparam("e_seq"),
        type=bindparam("e_type"),
        data=bindparam("e_data"),
        at=bindparam("e_at"),
    )
)
_INSERT_AUDIT = Prepared(
    insert(audit_table).values(
        session_id=bindparam("a_session"), at=bindparam("a_at"), data=bindparam("a_data")
    )
)
_ADVANCE_SESSION = Prepared(
    update(sessions)
    .where(sessions.c.id == bindparam("sid"))
    .values(last_seq=bindparam("last"), updated_at=bindparam("now"))
)
# A batch that carries usage (a run started, a model or side call answered) also adds
# to the session's totals; NULL totals (a session older than migration 0005) stay NULL.
_ADVANCE_SESSION_TOTALS = Prepared(
    update(sessions)
    .where(sessions.c.id == bindparam("sid"))
    .values(
        last_seq=bindparam("last"),
        updated_at=bindparam("now"),
        runs=sessions.c.runs + bindparam("d_runs"),
        model_calls=sessions.c.model_calls + bindparam("d_calls"),
        input_tokens=sessions.c.input_tokens + bindparam("d_in"),
        output_tokens=sessions.c.output_tokens + bindparam("d_out"),
        cost_usd=sessions.c.cost_usd + bindparam("d_cost"),
    )
)
_SESSION_EXISTS = Prepared(select(sessions.c.id).where(sessions.c.id == bindparam("sid")))
_EVENTS_AFTER = (
    select(events_table.c.seq, events_table.c.type, events_table.c.data, events_table.c.at)
    .where(events_table.c.session_id == bindparam("sid"), events_table.c.seq > bindparam("after"))
    .order_by(events_table.c.seq)
)
_READ_EVENTS = Prepared(_EVENTS_AFTER)
_GET_RECORD = Prepared(
    select(records.c.data).where(
        records.c.kind == bindparam("kind"),
        records.c.key == bindparam("key"),
        records.c.expires_at.is_(None) | (records.c.expires_at > bindparam("now")),
    )
)
_SELECT_SESSION = select(*_SESSION_COLUMNS).where(sessions.c.id == bindparam("sid"))
_GET_SESSION = Prepared(_SELECT_SESSION)
_LOCK_SESSION = Prepared(_SELECT_SESSION.with_for_update())
_INSERT_SESSION = Prepared(
    insert(sessions).values({column.name: bindparam(f"s_{column.name}") for column in sessions.c})
)
_SET_STATUS = Prepared(
    update(sessions)
    .where(sessions.c.id == bindparam("sid"))
    .values(status=bindparam("status"), updated_at=bindparam("now"))
)
_LEASE_ROW = Prepared(
    select(leases.c.holder, leases.c.fence, leases.c.expires_at).where(
        leases.c.session_id == bindparam("sid")
    )
)
_INSERT_LEASE = Prepared(
    insert(leases).values(
        session_id=bindparam("sid"),
        holder=bindparam("l_holder"),
        fence=bindparam("l_fence"),
        expires_at=bindparam("l_expires"),
    )
)
_UPDATE_LEASE = Prepared(
    update(leases)
    .where(leases.c.session_id == bindparam("sid"))
    .values(
        holder=bindparam("l_holder"), fence=bindparam("l_fence"), expires_at=bindparam("l_expires")
    )
)
_RENEW_LEASE = Prepared(
    update(leases)
    .where(leases.c.session_id == bindparam("sid"))
    .values(holder=bindparam("l_holder"), expires_at=bindparam("l_expires"))
)
_RELEASE_LEASE = Prepared(
    update(leases)
    .where(leases.c.session_id == bindparam("sid"), leases.c.fence == bindparam("l_fence"))
    .values(expires_at=bindparam("l_expires"))
)


# Built once: json.dumps with options builds an encoder per call, which cost as much
# as encoding a small event.
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def _encode(data: Mapping[str, Any]) -> str:
    try:
        return _ENCODER.encode(data)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"journal event data must be JSON: {exc}") from None


def _session(row: Sequence[Any]) -> SessionInfo:
    """A session from a row of ``_SESSION_COLUMNS`` (by position: rows may be plain tuples)."""
    return SessionInfo(
        id=row[0],
        status=row[1],
        created_at=float(row[2]),
        updated_at=float(row[3]),
        config_name=row[4],
        config_hash=row[5],
        owner=row[6],
        metadata=json.loads(row[7]),
        last_seq=int(row[8]),
        totals=_totals(row[9:14]),
    )


def _totals(values: Sequence[Any]) -> SessionTotals | None:
    """The totals columns of a session row; None when the row predates them (NULL)."""
    if any(value is None for value in values):
        return None
    runs, calls, input_tokens, output_tokens, cost = values
    return SessionTotals(int(runs), int(calls), int(input_tokens), int(output_tokens), float(cost))


def _job_from(values: Mapping[str, Any]) -> Job:
    """A :class:`Job` from a row's columns (JSON columns still encoded)."""
    result = values.get("result")
    return Job(
        id=values["id"],
        session_id=values["session_id"],
        owner=values["owner"],
        status=values["status"],
        request=json.loads(values["request"]),
        created_at=float(values["created_at"]),
        updated_at=float(values["updated_at"]),
        attempts=int(values["attempts"]),
        holder=values.get("holder"),
        fence=int(values["fence"]),
        lease_expires_at=values.get("lease_expires_at"),
        cancel_requested=bool(values["cancel_requested"]),
        result=json.loads(result) if result is not None else None,
        idempotency_key=values.get("idempotency_key"),
        request_hash=values.get("request_hash"),
    )


def _job(row: Any) -> Job:
    return _job_from(row._mapping)


def _dialect(connection: Connection) -> Any:
    """The SQLAlchemy dialect module of the connection, for INSERT ... ON CONFLICT.

    PostgreSQL and SQLite spell the upsert the same way.
    """
    from sqlalchemy.dialects import postgresql, sqlite

    return postgresql if connection.dialect.name == "postgresql" else sqlite


def _unexpired(column: Any) -> Any:
    return column.is_(None) | (column > bindparam("now"))


def _put_record(
    connection: Connection, kind: str, key: str, data: str, expires_at: float | None
) -> None:
    """Insert or replace one keyed record (its data already encoded)."""
    values = {"data": data, "expires_at": expires_at, "updated_at": time.time()}
    statement = _dialect(connection).insert(records).values(kind=kind, key=key, **values)
    connection.execute(
        statement.on_conflict_do_update(index_elements=[records.c.kind, records.c.key], set_=values)
    )


def _not_found(session_id: str) -> SessionNotFound:
    return SessionNotFound(f"no session {session_id!r} in this store")


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


class SQLStore(Store, KeyedRecords, JobQueue, ResponseCache):
    """A durable :class:`koboi.Store` on SQLite (one machine) or PostgreSQL (shared), with
    every optional capability: keyed records and counters, the job queue, the response cache.

    :param url: ``sqlite:///path.db`` or ``postgresql[+psycopg]://...`` with
        koboi's options in the query string (see :mod:`koboi_store_sql.url`).
    :param base_dir: what a relative SQLite path is relative to (the config's directory).
    :param migrations: another alembic script directory (tests of the upgrade path).
    """

    def __init__(
        self,
        url: str,
        base_dir: str | Path | None = None,
        *,
        migrations: Path | None = None,
    ) -> None:
        self.target: StoreURL = parse_store_url(url, Path(base_dir) if base_dir else None)
        self.name = self.target.dialect
        self._migrations = migrations
        self._database: db.Database | None = None

    def __repr__(self) -> str:
        return f"SQLStore({self.target.label!r})"

    # -- life cycle ---------------------------------------------------------------

    async def open(self) -> None:
        if self._database is None:
            self._database = await anyio.to_thread.run_sync(
                db.attach, self.target, self._migrations
            )

    async def close(self) -> None:
        database, self._database = self._database, None
        if database is not None:
            await anyio.to_thread.run_sync(db.detach, database)

    def _db(self) -> db.Database:
        if self._database is None:
            raise StoreError(f"the store {self.target.label} is not open (use 'async with store')")
        return self._database

    async def _write(self, operation: Callable[[Connection], T]) -> T:
        database = self._db()
        target = self.target
        if database.committer is not None:
            # SQLite: concurrent writes share transactions (group_commit.py).
            return await database.committer.write(operation, target.durability, target.busy_timeout)

        def run() -> T:
            with database.write(target.durability, target.busy_timeout) as connection:
                return operation(connection)

        return await anyio.to_thread.run_sync(run)

    async def _read(self, operation: Callable[[Connection], T]) -> T:
        database = self._db()

        def run() -> T:
            with database.read() as connection:
                return operation(connection)

        return await anyio.to_thread.run_sync(run)

    # -- sessions -------------------------------------------------------------------

    async def create_session(
        self,
        session_id: str | None = None,
        *,
        config_name: str = "",
        config_hash: str = "",
        owner: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        now = time.time()
        info = SessionInfo(
            id=session_id or new_session_id(),
            status="created",
            created_at=now,
            updated_at=now,
            config_name=config_name,
            config_hash=config_hash,
            owner=owner,
            metadata=json.loads(_encode(dict(metadata or {}))),
            totals=SessionTotals(),
        )
        values = {
            "s_id": info.id,
            "s_status": info.status,
            "s_created_at": now,
            "s_updated_at": now,
            "s_config_name": config_name,
            "s_config_hash": config_hash,
            "s_owner": owner,
            "s_metadata": _encode(info.metadata),
            "s_last_seq": 0,
            "s_runs": 0,
            "s_model_calls": 0,
            "s_input_tokens": 0,
            "s_output_tokens": 0,
            "s_cost_usd": 0.0,
        }

        def create(connection: Connection) -> SessionInfo:
            try:
                _INSERT_SESSION.execute(connection, values)
            except INTEGRITY_ERRORS:
                raise StoreError(f"session {info.id!r} already exists") from None
            return info

        return await self._write(create)

    async def get_session(self, session_id: str) -> SessionInfo:
        return await self._read(partial(self._get, session_id=session_id))

    @staticmethod
    def _get(connection: Connection, session_id: str, *, lock: bool = False) -> SessionInfo:
        query = _LOCK_SESSION if lock else _GET_SESSION
        row = query.execute(connection, {"sid": session_id}).fetchone()
        if row is None:
            raise _not_found(session_id)
        return _session(row)

    async def list_sessions(
        self, *, limit: int = 50, status: SessionStatus | None = None, owner: str | None = None
    ) -> list[SessionInfo]:
        query = select(*_SESSION_COLUMNS)
        if status is not None:
            query = query.where(sessions.c.status == status)
        if owner is not None:
            query = query.where(sessions.c.owner == owner)
        query = query.order_by(
            sessions.c.updated_at.desc(), sessions.c.created_at.desc(), sessions.c.id.desc()
        ).limit(max(limit, 0))

        def list_(connection: Connection) -> list[SessionInfo]:
            return [_session(row) for row in connection.execute(query)]

        return await self._read(list_)

    async def set_status(
        self, session_id: str, status: SessionStatus, *, fence: int | None = None
    ) -> SessionInfo:
        def set_(connection: Connection) -> SessionInfo:
            info = self._get(connection, session_id, lock=True)
            if fence is not None:
                self._check_fence(connection, session_id, fence)
            now = time.time()
            _SET_STATUS.execute(connection, {"sid": session_id, "status": status, "now": now})
            return replace(info, status=status, updated_at=now)

        return await self._write(set_)

    async def match_sessions(self, prefix: str, *, limit: int = 10) -> list[str]:
        # LIKE can use the primary key index; substr() makes the match exact,
        # since SQLite's LIKE ignores ASCII case.
        query = (
            select(sessions.c.id)
            .where(
                sessions.c.id.like(_like_prefix(prefix), escape="\\"),
                func.substr(sessions.c.id, 1, len(prefix)) == prefix,
            )
            .order_by(sessions.c.id)
            .limit(max(limit, 0))
        )

        def match(connection: Connection) -> list[str]:
            return [str(row[0]) for row in connection.execute(query)]

        return await self._read(match)

    # -- journal --------------------------------------------------------------------

    async def append(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        *,
        fence: int | None = None,
        audit: Sequence[Mapping[str, Any]] = (),
        status: SessionStatus | None = None,
    ) -> list[JournalEvent]:
        encoded = [(event.type, _encode(event.data)) for event in events]
        audited = [_encode(record) for record in audit]
        added = totals_of(events)

        def append(connection: Connection) -> list[JournalEvent]:
            # The session row is the per-session lock (FOR UPDATE on PostgreSQL;
            # SQLite's BEGIN IMMEDIATE already excludes every other writer).
            found = _LOCK_LAST_SEQ.execute(connection, {"sid": session_id}).fetchone()
            if found is None:
                raise _not_found(session_id)
            last = int(found[0])
            if fence is not None:
                self._check_fence(connection, session_id, fence)
            now = time.time()
            if audited:
                _INSERT_AUDIT.execute_many(
                    connection,
                    [{"a_session": session_id, "a_at": now, "a_data": data} for data in audited],
                )
            if status is not None:
                _SET_STATUS.execute(connection, {"sid": session_id, "status": status, "now": now})
            if not encoded:
                return []
            rows: list[dict[str, Any]] = [
                {"e_session": session_id, "e_seq": last + i, "e_type": kind, "e_data": data}
                for i, (kind, data) in enumerate(encoded, start=1)
            ]
            for row in rows:
                row["e_at"] = now
            _INSERT_EVENTS.execute_many(connection, rows)
            advance: dict[str, Any] = {"sid": session_id, "last": last + len(rows), "now": now}
            if added == _NO_TOTALS:
                _ADVANCE_SESSION.execute(connection, advance)
            else:
                advance.update(
                    d_runs=added.runs,
                    d_calls=added.model_calls,
                    d_in=added.input_tokens,
                    d_out=added.output_tokens,
                    d_cost=added.cost_usd,
                )
                _ADVANCE_SESSION_TOTALS.execute(connection, advance)
            return [
                JournalEvent(session_id, last + i, kind, json.loads(data), now)
                for i, (kind, data) in enumerate(encoded, start=1)
            ]

        return await self._write(append)

    async def read(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        params = {"sid": session_id, "after": after}
        # A LIMIT is compiled into the statement: only the common, unlimited read
        # is prepared.
        query = _READ_EVENTS if limit is None else Prepared(_EVENTS_AFTER.limit(max(limit, 0)))

        def read(connection: Connection) -> list[JournalEvent]:
            if _SESSION_EXISTS.execute(connection, params).fetchone() is None:
                raise _not_found(session_id)
            if limit is not None and limit <= 0:
                return []
            return [
                JournalEvent(session_id, int(seq), kind, json.loads(data), float(at))
                for seq, kind, data, at in query.execute(connection, params).fetchall()
            ]

        return await self._read(read)

    # -- leases ---------------------------------------------------------------------

    @staticmethod
    def _lease_row(connection: Connection, session_id: str) -> tuple[str, int, float] | None:
        """The session's lease (holder, fence, expires_at), or None."""
        row = _LEASE_ROW.execute(connection, {"sid": session_id}).fetchone()
        return None if row is None else (str(row[0]), int(row[1]), float(row[2]))

    def _check_fence(self, connection: Connection, session_id: str, fence: int) -> None:
        current = self._lease_row(connection, session_id)
        if current is None or current[1] != fence:
            holder = current[0] if current is not None else "nobody"
            raise FencedOut(
                f"session {session_id!r} was taken over (now held by {holder}); "
                "this process must stop writing to it"
            )

    async def acquire_lease(
        self, session_id: str, holder: str, ttl: float, *, take_over_from: str | None = None
    ) -> Lease:
        def acquire(connection: Connection) -> Lease:
            self._get(connection, session_id, lock=True)
            current = self._lease_row(connection, session_id)
            now = time.time()
            if current is not None:
                current_holder, current_fence, current_expiry = current
                if current_holder not in (holder, take_over_from) and current_expiry > now:
                    raise LeaseHeld(current_holder, current_expiry, session_id)
                fence = current_fence if current_holder == holder else current_fence + 1
            else:
                fence = 1
            lease = Lease(session_id, holder, fence, now + ttl)
            values = {
                "sid": session_id,
                "l_holder": holder,
                "l_fence": fence,
                "l_expires": lease.expires_at,
            }
            (_INSERT_LEASE if current is None else _UPDATE_LEASE).execute(connection, values)
            return lease

        return await self._write(acquire)

    async def get_lease(self, session_id: str) -> Lease | None:
        def get(connection: Connection) -> Lease | None:
            self._get(connection, session_id)
            row = self._lease_row(connection, session_id)
            return None if row is None else Lease(session_id, *row)

        return await self._read(get)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        def renew(connection: Connection) -> Lease:
            self._get(connection, lease.session_id, lock=True)
            self._check_fence(connection, lease.session_id, lease.fence)
            renewed = replace(lease, expires_at=time.time() + ttl)
            _RENEW_LEASE.execute(
                connection,
                {
                    "sid": lease.session_id,
                    "l_holder": lease.holder,
                    "l_expires": renewed.expires_at,
                },
            )
            return renewed

        return await self._write(renew)

    async def release_lease(self, lease: Lease) -> None:
        def release(connection: Connection) -> None:
            _RELEASE_LEASE.execute(
                connection, {"sid": lease.session_id, "l_fence": lease.fence, "l_expires": 0.0}
            )

        await self._write(release)

    # -- the response cache ---------------------------------------------------------------

    async def cache_get(self, key: str) -> dict[str, Any] | None:
        def get(connection: Connection) -> dict[str, Any] | None:
            row = connection.execute(
                select(response_cache.c.entry).where(response_cache.c.key == key)
            ).first()
            return None if row is None else dict(json.loads(row.entry))

        return await self._read(get)

    async def cache_put(self, key: str, entry: Mapping[str, Any]) -> None:
        encoded = _encode(entry)
        now = time.time()

        def put(connection: Connection) -> None:
            # An upsert: two processes recording the same answer at once must both succeed.
            statement = (
                _dialect(connection)
                .insert(response_cache)
                .values(key=key, entry=encoded, created_at=now)
            )
            connection.execute(
                statement.on_conflict_do_update(
                    index_elements=[response_cache.c.key],
                    set_={"entry": encoded, "created_at": now},
                )
            )

        await self._write(put)

    async def cache_keys(self) -> list[str]:
        def keys(connection: Connection) -> list[str]:
            rows = connection.execute(select(response_cache.c.key).order_by(response_cache.c.key))
            return [str(row.key) for row in rows]

        return await self._read(keys)

    # -- the audit trail ------------------------------------------------------------

    async def read_audit(
        self, session_id: str | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[AuditEntry]:
        query = select(audit_table).where(audit_table.c.id > after).order_by(audit_table.c.id)
        if session_id is not None:
            query = query.where(audit_table.c.session_id == session_id)
        if limit is not None:
            query = query.limit(max(limit, 0))

        def read(connection: Connection) -> list[AuditEntry]:
            return [
                AuditEntry(int(row.id), row.session_id, float(row.at), json.loads(row.data))
                for row in connection.execute(query)
            ]

        return await self._read(read)

    # -- keyed records --------------------------------------------------------------

    async def record_put(
        self,
        kind: str,
        key: str,
        data: Mapping[str, Any],
        *,
        expires_at: float | None = None,
    ) -> None:
        encoded = _encode(data)

        def put(connection: Connection) -> None:
            _put_record(connection, kind, key, encoded, expires_at)

        await self._write(put)

    async def record_get(self, kind: str, key: str) -> dict[str, Any] | None:
        def get(connection: Connection) -> dict[str, Any] | None:
            params = {"kind": kind, "key": key, "now": time.time()}
            row = _GET_RECORD.execute(connection, params).fetchone()
            return None if row is None else dict(json.loads(row[0]))

        return await self._read(get)

    async def record_list(self, kind: str, *, prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
        query = (
            select(records.c.key, records.c.data)
            .where(records.c.kind == kind, _unexpired(records.c.expires_at))
            .order_by(records.c.key)
        )
        if prefix:
            query = query.where(records.c.key.like(_like_prefix(prefix), escape="\\"))

        def list_(connection: Connection) -> list[tuple[str, dict[str, Any]]]:
            rows = connection.execute(query, {"now": time.time()})
            return [(str(row.key), dict(json.loads(row.data))) for row in rows]

        return await self._read(list_)

    async def record_delete(self, kind: str, key: str) -> bool:
        def delete_(connection: Connection) -> bool:
            result = connection.execute(
                records.delete().where(records.c.kind == kind, records.c.key == key)
            )
            return bool(result.rowcount)

        return await self._write(delete_)

    async def record_create(
        self,
        kind: str,
        key: str,
        data: Mapping[str, Any],
        *,
        expires_at: float | None = None,
    ) -> bool:
        encoded = _encode(data)

        def create(connection: Connection) -> bool:
            now = time.time()
            found = connection.execute(
                select(records.c.expires_at)
                .where(records.c.kind == kind, records.c.key == key)
                .with_for_update()
            ).first()
            values = {"data": encoded, "expires_at": expires_at, "updated_at": now}
            if found is None:
                # Two creators may both find nothing (PostgreSQL locks no missing row):
                # the primary key lets one insert win; the savepoint keeps the loser's
                # transaction usable.
                try:
                    with connection.begin_nested():
                        connection.execute(insert(records).values(kind=kind, key=key, **values))
                except IntegrityError:
                    return False
                return True
            if found.expires_at is None or found.expires_at > now:
                return False
            connection.execute(
                update(records).where(records.c.kind == kind, records.c.key == key).values(**values)
            )
            return True

        return await self._write(create)

    # -- jobs -----------------------------------------------------------------------

    async def create_job(
        self,
        *,
        session_id: str,
        owner: str | None,
        request: Mapping[str, Any],
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> tuple[Job, bool]:
        encoded = _encode(request)

        def existing(connection: Connection) -> Job | None:
            if idempotency_key is None:
                return None
            row = connection.execute(
                select(jobs).where(
                    jobs.c.owner_key == (owner or ""), jobs.c.idempotency_key == idempotency_key
                )
            ).first()
            if row is None:
                return None
            if row.request_hash != request_hash:
                raise IdempotencyConflict(
                    f"idempotency key {idempotency_key!r} was used for another request"
                )
            return _job(row)

        def create(connection: Connection) -> tuple[Job, bool]:
            found = existing(connection)
            if found is not None:
                return found, False
            now = time.time()
            values = {
                "id": new_job_id(),
                "session_id": session_id,
                "owner": owner,
                "owner_key": owner or "",
                "status": "queued",
                "request": encoded,
                "created_at": now,
                "updated_at": now,
                "attempts": 0,
                "fence": 0,
                "cancel_requested": False,
                "idempotency_key": idempotency_key,
                "request_hash": request_hash,
            }
            try:
                with connection.begin_nested():
                    connection.execute(insert(jobs).values(**values))
            except IntegrityError:
                # Another request with the same key committed first: theirs is the job.
                raced = existing(connection)
                if raced is None:
                    raise
                return raced, False
            return _job_from(values), True

        return await self._write(create)

    async def get_job(self, job_id: str) -> Job:
        def get(connection: Connection) -> Job:
            row = connection.execute(select(jobs).where(jobs.c.id == job_id)).first()
            if row is None:
                raise JobNotFound(f"no job {job_id!r} in this store")
            return _job(row)

        return await self._read(get)

    async def find_job(self, *, owner: str | None, idempotency_key: str) -> Job | None:
        query = select(jobs).where(
            jobs.c.owner_key == (owner or ""), jobs.c.idempotency_key == idempotency_key
        )

        def find(connection: Connection) -> Job | None:
            row = connection.execute(query).first()
            return _job(row) if row is not None else None

        return await self._read(find)

    async def list_jobs(
        self, *, owner: str | None = None, status: JobStatus | None = None, limit: int = 50
    ) -> list[Job]:
        query = select(jobs).order_by(jobs.c.created_at.desc()).limit(max(limit, 0))
        if owner is not None:
            query = query.where(jobs.c.owner_key == owner)
        if status is not None:
            query = query.where(jobs.c.status == status)

        def list_(connection: Connection) -> list[Job]:
            return [_job(row) for row in connection.execute(query)]

        return await self._read(list_)

    async def claim_job(self, holder: str, ttl: float) -> Job | None:
        def claim(connection: Connection) -> Job | None:
            now = time.time()
            connection.execute(
                update(jobs)
                .where(jobs.c.status == "queued", jobs.c.cancel_requested.is_(True))
                .values(status="cancelled", updated_at=now)
            )
            expired = or_(jobs.c.lease_expires_at.is_(None), jobs.c.lease_expires_at <= now)
            # SKIP LOCKED: on PostgreSQL, concurrent claimers pass over each other's
            # candidate instead of waiting for it. (SQLite serialises writers anyway.)
            row = connection.execute(
                select(jobs)
                .where(
                    or_(
                        jobs.c.status == "queued",
                        and_(jobs.c.status.in_(("running", "awaiting_approval")), expired),
                    )
                )
                .order_by(jobs.c.created_at)
                .limit(1)
                .with_for_update(skip_locked=True)
            ).first()
            if row is None:
                return None
            values = {
                "status": "awaiting_approval" if row.status == "awaiting_approval" else "running",
                "holder": holder,
                "fence": int(row.fence) + 1,
                "attempts": int(row.attempts) + 1,
                "lease_expires_at": now + ttl,
                "updated_at": now,
            }
            connection.execute(update(jobs).where(jobs.c.id == row.id).values(**values))
            return _job_from({**row._mapping, **values})

        return await self._write(claim)

    def _held(self, connection: Connection, job: Job) -> Any:
        row = connection.execute(select(jobs).where(jobs.c.id == job.id).with_for_update()).first()
        if row is None:
            raise JobNotFound(f"no job {job.id!r} in this store")
        if (
            int(row.fence) != job.fence
            or row.holder != job.holder
            or row.status in TERMINAL_JOB_STATUSES
        ):
            raise FencedOut(
                f"job {job.id!r} is no longer held by {job.holder} (fence {job.fence}); "
                "this process must stop working on it"
            )
        return row

    async def renew_job(self, job: Job, ttl: float) -> Job:
        def renew(connection: Connection) -> Job:
            row = self._held(connection, job)
            values = {"lease_expires_at": time.time() + ttl}
            connection.execute(update(jobs).where(jobs.c.id == job.id).values(**values))
            return _job_from({**row._mapping, **values})

        return await self._write(renew)

    async def update_job(
        self,
        job: Job,
        *,
        status: JobStatus,
        result: Mapping[str, Any] | None = None,
        records: Sequence[RecordWrite] = (),
    ) -> Job:
        encoded = _encode(result) if result is not None else None
        outbox = [(kind, key, _encode(data)) for kind, key, data in records]

        def update_(connection: Connection) -> Job:
            row = self._held(connection, job)
            for kind, key, data in outbox:
                _put_record(connection, kind, key, data, None)
            values: dict[str, Any] = {"status": status, "updated_at": time.time()}
            if encoded is not None:
                values["result"] = encoded
            if status in TERMINAL_JOB_STATUSES:
                values.update(holder=None, lease_expires_at=None)
            connection.execute(update(jobs).where(jobs.c.id == job.id).values(**values))
            merged = {**row._mapping, **values}
            return _job_from(merged)

        return await self._write(update_)

    async def requeue_job(self, job: Job, *, records: Sequence[RecordWrite] = ()) -> Job:
        outbox = [(kind, key, _encode(data)) for kind, key, data in records]

        def requeue(connection: Connection) -> Job:
            row = connection.execute(
                select(jobs).where(jobs.c.id == job.id).with_for_update()
            ).first()
            if row is None:
                raise JobNotFound(f"no job {job.id!r} in this store")
            if (
                int(row.fence) != job.fence
                or row.holder != job.holder
                or row.status != "waiting_input"
            ):
                raise FencedOut(
                    f"job {job.id!r} changed since it was read (now {row.status}); read it again"
                )
            for kind, key, data in outbox:
                _put_record(connection, kind, key, data, None)
            values: dict[str, Any] = {
                "status": "queued",
                "holder": None,
                "lease_expires_at": None,
                "updated_at": time.time(),
            }
            connection.execute(update(jobs).where(jobs.c.id == job.id).values(**values))
            return _job_from({**row._mapping, **values})

        return await self._write(requeue)

    async def release_job(self, job: Job) -> Job:
        def release(connection: Connection) -> Job:
            row = self._held(connection, job)
            now = time.time()
            values = {"lease_expires_at": now, "updated_at": now}
            connection.execute(update(jobs).where(jobs.c.id == job.id).values(**values))
            return _job_from({**row._mapping, **values})

        return await self._write(release)

    async def cancel_job(self, job_id: str) -> Job:
        def cancel(connection: Connection) -> Job:
            row = connection.execute(
                select(jobs).where(jobs.c.id == job_id).with_for_update()
            ).first()
            if row is None:
                raise JobNotFound(f"no job {job_id!r} in this store")
            if row.status in TERMINAL_JOB_STATUSES:
                return _job(row)
            values: dict[str, Any] = {"cancel_requested": True, "updated_at": time.time()}
            if row.status == "queued":
                values["status"] = "cancelled"
            connection.execute(update(jobs).where(jobs.c.id == job_id).values(**values))
            return _job_from({**row._mapping, **values})

        return await self._write(cancel)

    # -- counters -------------------------------------------------------------------

    async def counter_add(self, key: str, amount: int = 1, *, expires_at: float | None) -> int:
        def add(connection: Connection) -> int:
            now = time.time()
            # One statement, so two processes adding at once both count: an expired
            # counter starts again from `amount` with the new expiry.
            stale = counters.c.expires_at.is_not(None) & (counters.c.expires_at <= now)
            statement = (
                _dialect(connection)
                .insert(counters)
                .values(key=key, value=amount, expires_at=expires_at)
            )
            statement = statement.on_conflict_do_update(
                index_elements=[counters.c.key],
                set_={
                    "value": case((stale, amount), else_=counters.c.value + amount),
                    "expires_at": case((stale, expires_at), else_=counters.c.expires_at),
                },
            ).returning(counters.c.value)
            return int(connection.execute(statement).scalar_one())

        return await self._write(add)

    async def purge_expired(self) -> int:
        """Delete expired records and counters (they are ignored, not dropped, as they expire)."""

        def purge(connection: Connection) -> int:
            now = time.time()
            removed = 0
            for table in (records, counters):
                expired = table.c.expires_at.is_not(None) & (table.c.expires_at <= now)
                removed += connection.execute(delete(table).where(expired)).rowcount or 0
            return removed

        return await self._write(purge)

    # -- administration -------------------------------------------------------------

    async def schema_revision(self) -> str | None:
        """The alembic revision of the open database."""
        return await anyio.to_thread.run_sync(self._db().revision)

    async def statistics(self) -> dict[str, Any]:
        """How big the database is: rows per table and bytes (for ``koboi diagnostics``)."""
        target = self.target

        def count(connection: Connection) -> dict[str, Any]:
            rows = {
                table.name: int(
                    connection.execute(select(func.count()).select_from(table)).scalar_one()
                )
                for table in (sessions, events_table, audit_table, records, jobs, response_cache)
            }
            found: dict[str, Any] = {"dialect": target.dialect, "rows": rows}
            if target.dialect == "sqlite" and target.path is not None:
                files = [target.path, Path(f"{target.path}-wal"), Path(f"{target.path}-shm")]
                found["bytes"] = sum(f.stat().st_size for f in files if f.exists())
            elif target.dialect == "postgresql":
                found["bytes"] = int(
                    connection.exec_driver_sql(
                        "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
                    ).scalar_one()
                )
            return found

        return await self._read(count)
