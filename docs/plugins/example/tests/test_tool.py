"""The weather_forecast tool: the kernel's tool contract, plus its own behaviour."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from koboi_example_weather.tools import format_temperature, make_forecast_tool

from koboi import AgentConfig, PluginHost, Tool, ToolContext, ToolError, validate_config
from koboi_testing.contracts import ToolContract


def make_config(host: PluginHost, weather: Mapping[str, Any] | None = None) -> AgentConfig:
    raw: dict[str, Any] = {
        "llm": {"provider": "scripted"},
        "tools": {"builtin": ["weather_forecast"]},
    }
    if weather is not None:
        raw["weather"] = dict(weather)
    return validate_config(raw, host.catalog())


class TestWeatherForecastContract(ToolContract):
    """Runs every check of koboi-testing's ToolContract against our tool."""

    @pytest.fixture
    def tool(self, host: PluginHost) -> Tool:
        return make_forecast_tool(make_config(host, {"stations": {"Paris": 18.0}}))

    @pytest.fixture
    def valid_arguments(self) -> Mapping[str, Any]:
        return {"city": "Paris"}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [{"city": 42}, {"city": None}, {}]


def test_tool_is_safe_and_idempotent(host: PluginHost) -> None:
    tool = make_forecast_tool(make_config(host))
    assert tool.name == "weather_forecast"
    assert tool.idempotent
    assert tool.risk.value == "safe"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("units", "expected"), [("metric", "Paris: 21.5 °C"), ("imperial", "Paris: 70.7 °F")]
)
async def test_units_come_from_the_config(
    host: PluginHost, koboi_tool_context: ToolContext, units: str, expected: str
) -> None:
    tool = make_forecast_tool(make_config(host, {"units": units, "stations": {"Paris": 21.5}}))
    result = await tool(tool.parse_arguments({"city": "  paris "}), koboi_tool_context)
    assert result.content == expected
    assert not result.is_error


@pytest.mark.anyio
async def test_unknown_city_is_a_tool_error(
    host: PluginHost, koboi_tool_context: ToolContext
) -> None:
    tool = make_forecast_tool(make_config(host, {"stations": {"Paris": 1, "Oslo": 2}}))
    with pytest.raises(ToolError, match="known cities: Oslo, Paris"):
        await tool(tool.parse_arguments({"city": "Atlantis"}), koboi_tool_context)


def test_format_temperature() -> None:
    assert format_temperature(0, "metric") == "0.0 °C"
    assert format_temperature(0, "imperial") == "32.0 °F"
    assert format_temperature(-40, "imperial") == "-40.0 °F"
