"""PostgreSQL specifics: schema revisions, refusals, connection errors."""

from __future__ import annotations

import psycopg
import pytest

from koboi.errors import StoreError
from koboi_store_sql import SQLStore
from koboi_store_sql.migrate import SchemaTooNew, revisions
from koboi_store_sql.schema import VERSION_TABLE

pytestmark = pytest.mark.postgres


@pytest.mark.anyio
async def test_migrated_on_first_open_and_durability_applied(pg_url: str) -> None:
    async with SQLStore(pg_url + "&durability=process&busy_timeout=2") as store:
        assert await store.schema_revision() == revisions().head
        database = store._database
        assert database is not None
        with database.write("process", 2) as connection:
            assert connection.exec_driver_sql("SHOW synchronous_commit").scalar_one() == "off"
            assert connection.exec_driver_sql("SHOW lock_timeout").scalar_one() == "2s"
    async with SQLStore(pg_url) as store:
        database = store._database
        assert database is not None
        with database.write("power_loss", 5) as connection:
            assert connection.exec_driver_sql("SHOW synchronous_commit").scalar_one() == "on"


@pytest.mark.anyio
async def test_a_newer_schema_revision_is_refused_and_left_alone(
    pg_private_schema: tuple[str, str], pg_conninfo: str
) -> None:
    schema, url = pg_private_schema
    async with SQLStore(url) as store:
        await store.create_session("kept")
    with psycopg.connect(pg_conninfo, autocommit=True) as connection:
        connection.execute(
            f'UPDATE "{schema}".{VERSION_TABLE} SET version_num = %s', ("9999_future",)
        )
    with pytest.raises(SchemaTooNew, match=r"newer koboi \(schema revision 9999_future") as caught:
        async with SQLStore(url):
            pass
    assert "postgresql+psycopg://postgres@127.0.0.1" in str(caught.value)
    with psycopg.connect(pg_conninfo, autocommit=True) as connection:
        rows = connection.execute(f'SELECT id FROM "{schema}".sessions').fetchall()
        version = connection.execute(
            f'SELECT version_num FROM "{schema}".{VERSION_TABLE}'
        ).fetchall()
    assert rows == [("kept",)]
    assert version == [("9999_future",)]


@pytest.mark.anyio
async def test_an_unreachable_server_is_a_clear_error() -> None:
    url = "postgresql://koboi:s3cret@127.0.0.1:1/nowhere?connect_timeout=2"
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL at") as caught:
        async with SQLStore(url):
            pass
    assert "s3cret" not in str(caught.value)
    assert "127.0.0.1:1" in str(caught.value)


@pytest.mark.anyio
async def test_the_database_refuses_to_change_or_delete_audit_records(
    pg_private_schema: tuple[str, str], pg_conninfo: str
) -> None:
    from koboi.store import NewEvent

    schema, url = pg_private_schema
    async with SQLStore(url) as store:
        await store.create_session("s")
        await store.append("s", [NewEvent("a")], audit=[{"phase": "before"}])
    with psycopg.connect(pg_conninfo, autocommit=True) as connection:
        for statement in (
            f"UPDATE \"{schema}\".audit SET data = '{{}}'",
            f'DELETE FROM "{schema}".audit',
        ):
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                connection.execute(statement)
        # Control: records can still be added, and other tables stay writable.
        connection.execute(
            f"INSERT INTO \"{schema}\".audit (session_id, at, data) VALUES ('s', 0, '{{}}')"
        )
        connection.execute(f"UPDATE \"{schema}\".sessions SET status = 'failed'")
        count = connection.execute(f'SELECT count(*) FROM "{schema}".audit').fetchone()
    assert count == (2,)


@pytest.mark.anyio
async def test_a_claimer_skips_a_job_another_transaction_has_locked(
    pg_private_schema: tuple[str, str], pg_conninfo: str
) -> None:
    schema, url = pg_private_schema
    async with SQLStore(url + "&busy_timeout=2") as store:
        first, _ = await store.create_job(session_id="s", owner="o", request={"n": 1})
        second, _ = await store.create_job(session_id="s", owner="o", request={"n": 2})
        with psycopg.connect(pg_conninfo) as other:
            # Another replica is in the middle of claiming the oldest job.
            other.execute(f'SELECT id FROM "{schema}".jobs WHERE id = %s FOR UPDATE', (first.id,))
            claimed = await store.claim_job("node-b", 30)
            # Not blocked behind the lock (busy_timeout is 2 s), and not the locked job.
            assert claimed is not None and claimed.id == second.id
            other.rollback()
        # Control: once the lock is gone, the oldest job is claimed.
        claimed = await store.claim_job("node-b", 30)
        assert claimed is not None and claimed.id == first.id
