"""The fixtures the koboi pytest plugin provides."""

from __future__ import annotations

from pathlib import Path

import pytest

from koboi.sandbox import PassthroughSandbox
from koboi.store import InMemoryStore, NewEvent
from koboi.tools import ToolContext


def test_anyio_backend_is_asyncio(anyio_backend: str) -> None:
    assert anyio_backend == "asyncio"


def test_tool_context_uses_a_passthrough_sandbox_in_tmp_path(
    koboi_tool_context: ToolContext, tmp_path: Path
) -> None:
    assert koboi_tool_context.workdir == tmp_path
    assert isinstance(koboi_tool_context.sandbox, PassthroughSandbox)
    assert koboi_tool_context.sandbox.workdir == tmp_path
    assert koboi_tool_context.session_id
    assert koboi_tool_context.call_id


@pytest.mark.anyio
async def test_tool_context_sandbox_runs_in_tmp_path(
    koboi_tool_context: ToolContext, tmp_path: Path
) -> None:
    result = await koboi_tool_context.sandbox.run_process(["pwd"], timeout=20)
    # Path.resolve() only reads symlinks here; blocking is irrelevant in a test.
    assert Path(result.stdout.strip()).resolve() == tmp_path.resolve()  # noqa: ASYNC240


@pytest.mark.anyio
async def test_memory_store_is_open_and_empty(memory_store: InMemoryStore) -> None:
    assert isinstance(memory_store, InMemoryStore)
    assert await memory_store.list_sessions() == []
    session = await memory_store.create_session("s1")
    assert [e.seq for e in await memory_store.append(session.id, [NewEvent("x")])] == [1]
