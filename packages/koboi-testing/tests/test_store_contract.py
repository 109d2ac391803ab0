"""The store contract, run against the in-kernel InMemoryStore."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from koboi.store import InMemoryStore
from koboi_testing.contracts import StoreContract


class TestInMemoryStore(StoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[InMemoryStore]:
        async with InMemoryStore() as store:
            assert isinstance(store, InMemoryStore)
            yield store


class TestMemoryStoreFixture(StoreContract):
    """The plugin's ``memory_store`` fixture passes the contract as well."""

    @pytest.fixture
    def store(self, memory_store: InMemoryStore) -> InMemoryStore:
        return memory_store
