"""The ``mcp`` toolset keeps koboi-testing's ToolsetContract, over two real stdio servers
(the MCP SDK's notes server, twice): the same tool names, each server's in a namespace
of its own (``a__add_note``, ``b__add_note``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koboi.plugins import default_host
from koboi.toolsets import ToolList, Toolset, ToolsetContext
from koboi_mcp.toolset import create_toolset
from koboi_testing.contracts import ToolsetContract, toolset_context

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


class TestMcpToolsetContract(ToolsetContract):
    @pytest.fixture
    def toolset_context(self, tmp_path: Path, kit: Any) -> ToolsetContext:
        servers = {name: kit.notes_server(tmp_path / name) for name in ("a", "b")}
        for name in servers:
            (tmp_path / name).mkdir()
        return toolset_context(kit.agent_config(tmp_path, servers), tmp_path, default_host())

    @pytest.fixture
    def toolset(self, toolset_context: ToolsetContext) -> Toolset:
        made = create_toolset(toolset_context.config)
        assert made is not None
        return made

    @pytest.mark.anyio
    async def test_each_server_has_a_namespace_of_its_own(
        self, toolset: Toolset, toolset_context: ToolsetContext
    ) -> None:
        await toolset.open(toolset_context)
        try:
            offered = ToolList.build({}, [toolset])
            assert {"a__add_note", "b__add_note"} <= set(offered.tools)
            assert offered.namespaces == {"mcp": "mcp"}  # the toolset's; each tool has its own
        finally:
            await toolset.aclose()
