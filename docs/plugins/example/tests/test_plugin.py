"""The plugin as the kernel sees it: registrations, config section, a whole agent run."""

from __future__ import annotations

from typing import Any

import koboi_example_weather.plugin
import pytest
from koboi_example_weather.config import DEFAULT_STATIONS, WeatherSettings

from koboi import ConfigError, KoboiAgent, PluginHost, hookimpl, validate_config

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


RULES: dict[str, Any] = {
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
    }
}


@pytest.mark.anyio
async def test_an_agent_calls_the_tool(host: PluginHost) -> None:
    config = {
        **RULES,
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


def test_default_stations_are_registered_through_the_plugins_own_hook(host: PluginHost) -> None:
    from koboi_example_weather.stations import stations_of

    config = validate_config(BASE, host.catalog())
    assert stations_of(config, host) == DEFAULT_STATIONS
    assert host.get("weather").defines == ["koboi_weather_register_stations"]  # type: ignore[union-attr]


class Nordic:
    """A third plugin adding a station through the weather plugin's hook."""

    @hookimpl
    def koboi_weather_register_stations(self, register: Any) -> None:
        register("Oslo", 3.5, description="from another plugin")


class Rival:
    @hookimpl
    def koboi_weather_register_stations(self, register: Any) -> None:
        register("Paris", 99.0)


def test_another_plugin_adds_stations_and_a_duplicate_names_both(host: PluginHost) -> None:
    from koboi_example_weather.stations import stations_of

    host.add_plugin(Nordic(), "nordic")
    config = validate_config({**BASE, "weather": {"stations": {"Lima": 19.0}}}, host.catalog())
    assert stations_of(config, host) == {**DEFAULT_STATIONS, "Oslo": 3.5, "Lima": 19.0}
    lenient = PluginHost(load_entry_points=False, strict=False)
    lenient.add_plugin(koboi_example_weather.plugin, "weather")
    # Plugins are asked in order of their ids: the one asked later ("zrival") fails.
    lenient.add_plugin(Rival(), "zrival")
    assert stations_of(validate_config(BASE, host.catalog()), lenient)["Paris"] == 18.0
    rival = lenient.get("zrival")
    assert rival is not None and rival.status == "failed"
    assert "'weather' and 'zrival'" in rival.reason


@pytest.mark.anyio
async def test_the_forecast_records_its_own_events_and_the_next_run_remembers(
    host: PluginHost,
) -> None:
    config = {**RULES, "tools": {"builtin": ["weather_forecast"]}}
    async with KoboiAgent.from_dict(config, host=host) as agent:
        first = await agent.run("What is the weather in Tokyo?")
        second = await agent.run("And the weather in Paris?", session_id=first.session_id)
        events = await agent.store.read(first.session_id)
    assert second.output == "Forecast: Paris: 18.0 °C"
    recorded = [e.data["city"] for e in events if e.type == "weather.forecast"]
    assert recorded == ["Tokyo", "Paris"]
    second_call = next(
        e for e in events if e.type == "model_call_started" and e.data.get("rewritten_by")
    )
    assert second_call.data["rewritten_by"] == ["context"]


@pytest.mark.anyio
async def test_the_station_toolset_offers_a_tool_per_station(host: PluginHost) -> None:
    config = {
        "llm": {
            "provider": "scripted",
            "script": [
                {"tool_calls": [{"name": "station__oslo", "arguments": {}}]},
                {"reply": "done"},
            ],
        },
        "weather": {"station_tools": True, "stations": {"Oslo": 2.0}},
    }
    async with KoboiAgent.from_dict(config, host=host) as agent:
        assert {"station__oslo", "station__paris", "station__tokyo"} <= set(agent.tools)
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    finished = [e.data["content"] for e in events if e.type == "tool_call_finished"]
    assert finished == ["Oslo: 2.0 °C"]


def test_loading_the_plugin_imports_nothing_heavy() -> None:
    import subprocess
    import sys

    code = (
        "import sys, koboi_example_weather.plugin\n"
        "heavy = [m for m in ('pydantic', 'koboi.config', 'koboi.loop', "
        "'koboi_example_weather.config') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == ""
