"""The ``orchestration`` toolset keeps koboi-testing's ToolsetContract: the agents marked
``as_tool`` are offered as ``ask__<name>``."""

from __future__ import annotations

import pytest

from koboi.toolsets import ToolList, Toolset, ToolsetContext
from koboi_orchestration.config import AgentDef
from koboi_orchestration.tools import AgentTools
from koboi_testing.contracts import ToolsetContract

AGENTS = [
    AgentDef.model_validate({"name": "researcher", "description": "finds facts", "as_tool": True}),
    AgentDef.model_validate({"name": "critic", "as_tool": True}),
]


class TestAgentToolsContract(ToolsetContract):
    @pytest.fixture
    def toolset(self) -> Toolset:
        return AgentTools(AGENTS)

    @pytest.mark.anyio
    async def test_each_agent_is_offered_as_ask_name(
        self, toolset: Toolset, toolset_context: ToolsetContext
    ) -> None:
        await toolset.open(toolset_context)
        try:
            offered = ToolList.build({}, [toolset])
            assert sorted(offered.tools) == ["ask__critic", "ask__researcher"]
            assert "finds facts" in offered.tools["ask__researcher"].spec().description
        finally:
            await toolset.aclose()
