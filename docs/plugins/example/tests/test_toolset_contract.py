"""The example's toolset keeps koboi-testing's ToolsetContract (stations from the config)."""

from __future__ import annotations

from pathlib import Path

import pytest
from koboi_example_weather.stations import StationToolset

from koboi import PluginHost
from koboi.toolsets import ToolList, Toolset, ToolsetContext
from koboi_testing.contracts import ToolsetContract, toolset_context


class TestStationToolsetContract(ToolsetContract):
    @pytest.fixture
    def toolset_context(self, host: PluginHost, tmp_path: Path) -> ToolsetContext:
        weather = {"stations": {"Oslo": -3.5}}
        return toolset_context(
            {"llm": {"provider": "scripted"}, "weather": weather}, tmp_path, host
        )

    @pytest.fixture
    def toolset(self) -> Toolset:
        return StationToolset()

    @pytest.mark.anyio
    async def test_a_configured_station_is_offered_in_the_station_namespace(
        self, toolset: Toolset, toolset_context: ToolsetContext
    ) -> None:
        await toolset.open(toolset_context)
        try:
            assert "station__oslo" in ToolList.build({}, [toolset]).tools
        finally:
            await toolset.aclose()
