"""The store contract on SQLite (both durability modes) and on PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from koboi_store_sql import SQLStore
from koboi_testing.contracts import StoreContract


class TestSQLitePowerLoss(StoreContract):
    @pytest.fixture
    async def store(self, db_path: Path) -> AsyncIterator[SQLStore]:
        async with SQLStore(f"sqlite:///{db_path}") as store:
            assert isinstance(store, SQLStore)
            yield store


class TestSQLiteProcessDurability(StoreContract):
    @pytest.fixture
    async def store(self, db_path: Path) -> AsyncIterator[SQLStore]:
        async with SQLStore(f"sqlite:///{db_path}?durability=process") as store:
            assert isinstance(store, SQLStore)
            yield store


@pytest.mark.postgres
class TestPostgreSQL(StoreContract):
    @pytest.fixture
    async def store(self, pg_url: str) -> AsyncIterator[SQLStore]:
        async with SQLStore(pg_url) as store:
            assert isinstance(store, SQLStore)
            yield store
