"""Running the shipped alembic migrations, programmatically (no alembic.ini).

The caller owns the connection *and its transaction*: the revision is read,
checked and upgraded inside that one transaction, so two processes opening
the same new database serialise (SQLite ``BEGIN IMMEDIATE``, a PostgreSQL
advisory lock) and a failed migration leaves the database as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from koboi.errors import StoreError
from koboi_store_sql.schema import VERSION_TABLE

if TYPE_CHECKING:
    from alembic.script import ScriptDirectory
    from sqlalchemy.engine import Connection

MIGRATIONS = Path(__file__).parent / "migrations"


class SchemaTooNew(StoreError):
    """The database was written by a newer koboi; this one refuses to touch it."""


@dataclass(frozen=True)
class Revisions:
    """What this koboi knows: the latest revision and every revision it could upgrade from."""

    head: str
    known: frozenset[str]


#: The newest revision shipped in ``migrations/versions`` (a test keeps it equal to
#: alembic's head). Opening a database already at it needs no alembic at all,
#: which keeps alembic's import (most of a second, cold, and ~15 MB of RSS) off
#: every resume and every serving replica.
LATEST_REVISION = "0005"


def current_revision_sql(connection: Connection) -> str | None:
    """The database's revision by plain SQL; None when the version table is missing."""
    from sqlalchemy import exc

    try:
        with connection.begin_nested():
            row = connection.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").first()
    except exc.DBAPIError:
        return None
    return str(row[0]) if row is not None else None


def script_directory(location: Path | None = None) -> ScriptDirectory:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(location or MIGRATIONS))
    return ScriptDirectory.from_config(config)


def revisions(location: Path | None = None) -> Revisions:
    script = script_directory(location)
    head = script.get_current_head()
    if head is None:  # pragma: no cover - the package always ships a revision
        raise StoreError(f"no migrations found in {location or MIGRATIONS}")
    return Revisions(head, frozenset(r.revision for r in script.walk_revisions()))


def refuse_if_newer(current: str | None, known: Revisions, label: str) -> None:
    if current is not None and current not in known.known:
        raise SchemaTooNew(
            f"the database {label} was written by a newer koboi (schema revision {current}; "
            f"this koboi knows up to {known.head}); upgrade koboi-store-sql to use it. "
            "The database was not modified."
        )


def current_revision(connection: Connection) -> str | None:
    """The database's revision, read as alembic reads it; None before the first migration.

    Plain SQLAlchemy rather than alembic's ``MigrationContext``: a serving replica
    asks this on every readiness probe, and importing alembic (with mako and
    pygments) for that costs ~15 MB of resident memory for the process's life.
    """
    from sqlalchemy import inspect

    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    rows = [
        str(row[0])
        for row in connection.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}")
    ]
    if len(rows) > 1:  # alembic refuses this too: koboi's history has no branches
        raise StoreError(
            f"the schema version table {VERSION_TABLE} holds {len(rows)} revisions "
            f"({', '.join(sorted(rows))}); koboi expects one"
        )
    return rows[0] if rows else None


def upgrade(
    connection: Connection, label: str, location: Path | None = None
) -> tuple[str | None, str]:
    """Upgrade to the latest revision inside the caller's transaction; (before, after)."""
    from alembic.config import Config
    from alembic.runtime.environment import EnvironmentContext

    script = script_directory(location)
    known = revisions(location)
    before = current_revision(connection)
    refuse_if_newer(before, known, label)
    if before == known.head:
        return before, known.head

    def steps(revision: Any, _context: Any) -> Any:
        return script._upgrade_revs(known.head, revision)

    config = Config()
    config.set_main_option("script_location", str(location or MIGRATIONS))
    with EnvironmentContext(config, script, fn=steps, destination_rev=known.head) as env:
        env.configure(connection=connection, version_table=VERSION_TABLE, transactional_ddl=True)
        env.run_migrations()
    return before, known.head
