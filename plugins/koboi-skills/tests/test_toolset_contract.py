"""The ``skills`` toolset keeps koboi-testing's ToolsetContract: opened over a real skill
folder, it offers ``skills__activate`` and ``skills__read_file``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koboi import PluginHost
from koboi.toolsets import ToolList, Toolset, ToolsetContext
from koboi_skills.skilltools import create_toolset
from koboi_testing.contracts import ToolsetContract, toolset_context


class TestSkillsToolsetContract(ToolsetContract):
    @pytest.fixture
    def toolset_context(self, host: PluginHost, tmp_path: Path, kit: Any) -> ToolsetContext:
        kit.write_skill(tmp_path / "skills", "haiku", "Write a haiku.", "Five, seven, five.\n")
        skills = {"search_paths": ["skills"]}
        return toolset_context({"llm": {"provider": "scripted"}, "skills": skills}, tmp_path, host)

    @pytest.fixture
    def toolset(self, toolset_context: ToolsetContext) -> Toolset:
        made = create_toolset(toolset_context.config)
        assert made is not None
        return made

    @pytest.mark.anyio
    async def test_offered_under_the_skills_namespace(
        self, toolset: Toolset, toolset_context: ToolsetContext
    ) -> None:
        await toolset.open(toolset_context)
        try:
            offered = ToolList.build({}, [toolset])
            assert sorted(offered.tools) == ["skills__activate", "skills__read_file"]
        finally:
            await toolset.aclose()
