"""Statements of the hot path, compiled once and run on the driver's cursor.

SQLAlchemy Core spends about 100 µs per execution of even a prebuilt statement
(cache key, compiled-cache lookup, execution context, result wrapping); the
sqlite3 driver runs the same statement in about 10 µs. A chat writes some thirty
statements, so on SQLite that overhead alone held the server near 40 chats/s
(benchmarks/server/README.md). The statements are still written with Core, so
the schema stays defined in one place; only their execution skips it.

Only for SQLite: on PostgreSQL the statement runs through SQLAlchemy as usual
(the network round trip dwarfs the overhead there, and the connection's error
handling, such as pool invalidation, stays in charge).

The rows are plain tuples in both cases: callers index them by position.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import IntegrityError

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.sql.base import Executable

#: What a unique or foreign-key violation raises, through SQLAlchemy or not.
INTEGRITY_ERRORS: tuple[type[Exception], ...] = (IntegrityError, sqlite3.IntegrityError)


class Prepared:
    """A Core statement with named bind parameters, compiled once for SQLite."""

    __slots__ = ("_fixed", "_names", "_sql", "statement")

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._sql: str | None = None
        self._names: tuple[str, ...] = ()
        #: Values the statement carries itself (literals, a LIMIT): callers may omit them.
        self._fixed: dict[str, Any] = {}

    def _compile(self, connection: Connection) -> str:
        compiled = self.statement.compile(dialect=connection.dialect)  # type: ignore[attr-defined]
        if compiled.literal_execute_params or compiled.post_compile_params:
            # Expanding IN lists and the like change the SQL per call.
            raise TypeError(f"cannot prepare a statement with expanding parameters: {compiled}")
        names = tuple(compiled.positiontup or ())
        binds = compiled.binds
        self._fixed = {
            name: binds[name].effective_value for name in names if not binds[name].required
        }
        self._names = names
        self._sql = str(compiled)
        return self._sql

    def execute(self, connection: Connection, params: Mapping[str, Any] | None = None) -> Any:
        """Run with ``params``; return an object with ``fetchone``/``fetchall``/``rowcount``."""
        if connection.dialect.name != "sqlite":
            return _Rows(connection.execute(self.statement, dict(params or {})))
        sql = self._sql or self._compile(connection)
        raw = connection.connection.driver_connection
        assert raw is not None
        values = params or {}
        if self._fixed:
            values = {**self._fixed, **values}
        return raw.execute(sql, [values[name] for name in self._names])

    def execute_many(self, connection: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run once per parameter set (an INSERT of several rows)."""
        if connection.dialect.name != "sqlite":
            connection.execute(self.statement, [dict(row) for row in rows])
            return
        sql = self._sql or self._compile(connection)
        raw = connection.connection.driver_connection
        assert raw is not None
        names, fixed = self._names, self._fixed
        if fixed:
            rows = [{**fixed, **row} for row in rows]
        raw.executemany(sql, [[row[name] for name in names] for row in rows])


class _Rows:
    """SQLAlchemy's result seen as plain tuples, like the sqlite3 cursor's."""

    __slots__ = ("_result",)

    def __init__(self, result: Any) -> None:
        self._result = result

    @property
    def rowcount(self) -> int:
        return int(self._result.rowcount)

    def fetchone(self) -> tuple[Any, ...] | None:
        row = self._result.fetchone()
        return None if row is None else tuple(row)

    def fetchall(self) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self._result.fetchall()]
