"""Fixtures: SQLite files in tmp_path, and a private schema on the PostgreSQL server.

PostgreSQL tests (``@pytest.mark.postgres``) use ``KOBOI_TEST_POSTGRES_URL``
(default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``). Each test run
creates its own schema ``koboi_test_<random>`` there and drops it at the end,
so it never touches anybody else's tables. Deselect them with ``-m "not postgres"``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

POSTGRES_URL = os.environ.get(
    "KOBOI_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _conninfo(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@pytest.fixture(scope="session")
def postgres_schema() -> Iterator[str]:
    """A fresh schema on the test server, dropped (with its tables) after the run."""
    import psycopg

    schema = f"koboi_test_{uuid.uuid4().hex[:10]}"
    try:
        connection = psycopg.connect(_conninfo(POSTGRES_URL), autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {POSTGRES_URL} ({exc}); start it, set "
            'KOBOI_TEST_POSTGRES_URL, or deselect these tests with -m "not postgres"'
        )
    with connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield schema
        finally:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


def postgres_url(schema: str, **options: str) -> str:
    query = "&".join(
        [f"options={quote(f'-csearch_path={schema}')}", *(f"{k}={v}" for k, v in options.items())]
    )
    return f"{POSTGRES_URL}?{query}"


@pytest.fixture
def pg_url(postgres_schema: str) -> str:
    return postgres_url(postgres_schema)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store" / "koboi.db"


@pytest.fixture
def pg_conninfo() -> str:
    """libpq connection string of the test server (no koboi options)."""
    return _conninfo(POSTGRES_URL)


@pytest.fixture
def pg_private_schema(postgres_schema: str, pg_conninfo: str) -> Iterator[tuple[str, str]]:
    """A schema of one test's own, and a store URL using it; dropped afterwards."""
    import psycopg

    name = f"{postgres_schema}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(pg_conninfo, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield name, postgres_url(name)
    finally:
        with psycopg.connect(pg_conninfo, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
