"""The plugin as the kernel sees it: registrations, config section, a whole agent run."""

from __future__ import annotations

from typing import Any

import pytest
from koboi_example_weather.config import DEFAULT_STATIONS, WeatherSettings

from koboi import ConfigError, KoboiAgent, PluginHost, validate_config

BASE: dict[str, Any] = {
    "llm": {"provider": "scripted"},
    "tools": {"builtin": ["weather_forecast"]},
}


def test_registrations_are_owned_by_the_plugin(host: PluginHost) -> None:
    catalog = host.catalog()
    section = catalog.sections.get("weather")
    assert section is not None
    assert section.plugin == "weather"
    assert section.target is WeatherSettings
    tool = catalog.tools.get("weather_forecast")
    assert tool is not None
    assert tool.plugin == "weather"


def test_every_setting_is_described() -> None:
    for name, field in WeatherSettings.model_fields.items():
        assert field.description, f"weather.{name} has no description"


def test_section_is_validated(host: PluginHost) -> None:
    config = validate_config(
        {**BASE, "weather": {"units": "imperial", "stations": {"Oslo": 3}}}, host.catalog()
    )
    section = config.section("weather")
    assert isinstance(section, WeatherSettings)
    assert section.units == "imperial"
    assert section.stations == {"Oslo": 3.0}


def test_defaults_when_the_section_is_absent(host: PluginHost) -> None:
    config = validate_config(BASE, host.catalog())
    assert config.section("weather") is None


def test_unknown_key_and_bad_units_are_reported(host: PluginHost) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_config({**BASE, "weather": {"unit": "metric", "units": "kelvin"}}, host.catalog())
    problems = {p.path: p for p in caught.value.problems}
    assert "weather.unit" in problems
    assert "did you mean 'units'" in problems["weather.unit"].hint
    assert "weather.units" in problems


@pytest.mark.anyio
async def test_an_agent_calls_the_tool(host: PluginHost) -> None:
    config = {
        "llm": {
            "provider": "scripted",
            "rules": [
                {
                    "match": r"weather in (?P<city>\w+)",
                    "tool": "weather_forecast",
                    "arguments": {"city": "{city}"},
                    "reply": "Forecast: {result}",
                }
            ],
        },
        "tools": {"builtin": ["weather_forecast"]},
        "weather": {"units": "metric", "stations": {"Paris": 21.5}},
    }
    async with KoboiAgent.from_dict(config, host=host) as agent:
        result = await agent.run("What is the weather in Paris?")
        assert result.outcome == "completed"
        assert result.output == "Forecast: Paris: 21.5 °C"
        events = [e.type for e in await agent.store.read(result.session_id)]
    assert "tool_call_started" in events
    assert "tool_call_finished" in events


def test_default_stations_are_used_without_a_section() -> None:
    assert "Paris" in DEFAULT_STATIONS
