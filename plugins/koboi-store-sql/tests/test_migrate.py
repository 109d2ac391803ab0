"""Reading the schema revision without alembic.

A serving replica asks the revision on every readiness probe; reading it with
plain SQL keeps alembic, mako and pygments (~15 MB of RSS) out of the process.
These tests hold that reading to alembic's own answer.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from alembic.util import CommandError

from koboi.errors import StoreError
from koboi_store_sql import SQLStore
from koboi_store_sql.migrate import LATEST_REVISION, current_revision
from koboi_store_sql.schema import VERSION_TABLE


def _alembic_revision(connection: sa.Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    revision: str | None = context.get_current_revision()
    return revision


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'k.db'}")
    yield engine
    engine.dispose()


async def _migrate(url: str) -> None:
    async with SQLStore(url):
        pass


def test_the_revision_is_read_as_alembic_reads_it(engine: sa.Engine, tmp_path: Path) -> None:
    with engine.connect() as connection:  # no version table yet
        assert current_revision(connection) is None
        assert _alembic_revision(connection) is None
    anyio.run(_migrate, f"sqlite:///{tmp_path / 'k.db'}")
    with engine.connect() as connection:
        assert _alembic_revision(connection) == LATEST_REVISION  # the control
        assert current_revision(connection) == LATEST_REVISION


def test_an_empty_version_table_is_no_revision(engine: sa.Engine) -> None:
    with engine.begin() as connection:
        connection.exec_driver_sql(f"CREATE TABLE {VERSION_TABLE} (version_num VARCHAR(32))")
        assert _alembic_revision(connection) is None
        assert current_revision(connection) is None


def test_two_revisions_in_the_version_table_are_refused_as_alembic_refuses_them(
    engine: sa.Engine,
) -> None:
    with engine.begin() as connection:
        connection.exec_driver_sql(f"CREATE TABLE {VERSION_TABLE} (version_num VARCHAR(32))")
        connection.exec_driver_sql(f"INSERT INTO {VERSION_TABLE} VALUES ('0001'), ('0002')")
        with pytest.raises(CommandError, match="more than one head"):
            _alembic_revision(connection)
        with pytest.raises(StoreError, match=r"2 revisions \(0001, 0002\)"):
            current_revision(connection)


@pytest.mark.postgres
def test_the_revision_is_read_as_alembic_reads_it_on_postgresql(pg_url: str) -> None:
    engine = sa.create_engine(pg_url)
    try:
        anyio.run(_migrate, pg_url)
        with engine.connect() as connection:
            assert _alembic_revision(connection) == LATEST_REVISION
            assert current_revision(connection) == LATEST_REVISION
    finally:
        engine.dispose()


def test_asking_an_up_to_date_store_its_revision_does_not_import_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    anyio.run(_migrate, url)  # here, in the test process: alembic creates the schema
    code = (
        "import anyio, sys\n"
        "from koboi_store_sql import SQLStore\n"
        "async def main():\n"
        f"    async with SQLStore({url!r}) as store:\n"
        "        print(await store.schema_revision())\n"
        "anyio.run(main)\n"
        "print(sorted(m for m in ('alembic', 'mako', 'sqlalchemy') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    # sqlalchemy is the control: the store did read the database in that process.
    assert done.stdout.split("\n")[:2] == [LATEST_REVISION, "['sqlalchemy']"]
