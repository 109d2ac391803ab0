"""pytest plugin of koboi-testing (loaded through the ``pytest11`` entry point).

It defines fixtures, and imports koboi lazily inside them so that loading the
plugin stays cheap for every pytest run in an environment that has it. It also
turns on ``KOBOI_STRICT_PLUGINS`` for the test session (unless the environment
sets it), so a plugin that fails to load fails the tests instead of being
skipped with a warning.

Fixtures:

``anyio_backend``
    ``"asyncio"``, so ``@pytest.mark.anyio`` tests run once, on asyncio. Override
    it in a ``conftest.py`` to add trio.
``koboi_tool_context``
    A :class:`koboi.tools.ToolContext` whose sandbox is a
    :class:`koboi.sandbox.PassthroughSandbox` rooted at ``tmp_path``.
``memory_store``
    An opened :class:`koboi.store.InMemoryStore` (async fixture; use it from
    ``@pytest.mark.anyio`` tests).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# The contract suites live in the installed package, not in a test module, so
# their plain ``assert`` statements are rewritten only if we ask for it before
# they are imported.
pytest.register_assert_rewrite("koboi_testing.contracts")


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("KOBOI_STRICT_PLUGINS", "1")


if TYPE_CHECKING:
    from koboi.store import InMemoryStore
    from koboi.tools import ToolContext


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Run anyio tests on asyncio only (koboi targets asyncio; trio is opt-in)."""
    return "asyncio"


@pytest.fixture
def koboi_tool_context(tmp_path: Path) -> ToolContext:
    """A tool context with a passthrough sandbox and ``tmp_path`` as the working directory."""
    from koboi.sandbox import PassthroughSandbox
    from koboi.tools import ToolContext

    return ToolContext(
        session_id="test-session",
        call_id="call-1",
        step=1,
        sandbox=PassthroughSandbox(workdir=tmp_path),
        workdir=tmp_path,
    )


@pytest.fixture
async def memory_store(anyio_backend: str) -> AsyncIterator[InMemoryStore]:
    """An opened, empty in-memory store, closed after the test."""
    from koboi.store import InMemoryStore

    store = InMemoryStore()
    async with store:
        yield store
