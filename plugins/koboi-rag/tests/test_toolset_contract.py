"""The ``rag`` toolset keeps koboi-testing's ToolsetContract: opened over an in-memory
store, it ingests real documents and offers its search tool as ``rag__search``."""

from __future__ import annotations

from pathlib import Path

import pytest

from koboi import PluginHost
from koboi.toolsets import Toolset, ToolsetContext
from koboi_rag.agent import create_toolset
from koboi_testing.contracts import ToolsetContract, toolset_context

from .conftest import write_docs


class TestRagToolsetContract(ToolsetContract):
    @pytest.fixture
    def toolset_context(self, host: PluginHost, tmp_path: Path) -> ToolsetContext:
        write_docs(tmp_path)
        rag = {"documents": ["guide"], "embedder": {"name": "lsa", "dimensions": 3}}
        return toolset_context({"llm": {"provider": "scripted"}, "rag": rag}, tmp_path, host)

    @pytest.fixture
    def toolset(self, toolset_context: ToolsetContext) -> Toolset:
        made = create_toolset(toolset_context.config)
        assert made is not None
        return made

    @pytest.mark.anyio
    async def test_the_search_tool_finds_an_ingested_document(
        self, toolset: Toolset, toolset_context: ToolsetContext
    ) -> None:
        from koboi.toolsets import ToolList

        await toolset.open(toolset_context)
        try:
            offered = ToolList.build({}, [toolset])
            assert list(offered.tools) == ["rag__search"]
            engine = toolset.engine  # type: ignore[attr-defined]
            outcome = await engine.search("refund within 30 days")
            assert outcome.results and outcome.results[0].source == "guide/refunds.txt"
        finally:
            await toolset.aclose()
