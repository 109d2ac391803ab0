"""koboi hooks of koboi-example-weather.

This module is what the ``koboi.plugins`` entry point names. It holds only
``@hookimpl`` functions and imports nothing but the hook marker: every other
module (pydantic models included) is imported inside the hook or factory that
needs it, so ``koboi --help`` and every command that never uses the plugin pay
nothing for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi import AgentConfig, Runner, Tool
    from koboi.hookspecs import (
        RegisterConfigSection,
        RegisterHookspecs,
        RegisterInterceptor,
        RegisterRunner,
        RegisterTool,
        RegisterToolset,
    )
    from koboi.toolsets import Toolset
    from koboi_example_weather.config import BriefingOptions


@hookimpl
def koboi_register_hookspecs(register: RegisterHookspecs) -> None:
    # This plugin's own hook: other plugins add weather stations.
    from koboi_example_weather import hookspecs

    register(hookspecs)


@hookimpl
def koboi_weather_register_stations(register: Any) -> None:
    # The plugin implements its own hook too: the stations it ships.
    from koboi_example_weather.config import DEFAULT_STATIONS

    for city, celsius in DEFAULT_STATIONS.items():
        register(city, celsius, description="shipped with koboi-example-weather")


@hookimpl
def koboi_register_config_sections(register: RegisterConfigSection) -> None:
    from koboi_example_weather.config import WeatherSettings

    register("weather", WeatherSettings, description="Offline weather forecast (example plugin).")


def create_forecast_tool(config: AgentConfig) -> Tool:
    """Tool factory: called once per agent, with that agent's validated config."""
    from koboi_example_weather.tools import make_forecast_tool

    return make_forecast_tool(config)


@hookimpl
def koboi_register_tools(register: RegisterTool) -> None:
    register(
        "weather_forecast",
        create_forecast_tool,
        description="Today's temperature for a city, from a fixed offline table.",
    )


def create_station_toolset(config: AgentConfig) -> Toolset | None:
    """One tool per known station, when ``weather.station_tools`` asks for them."""
    from koboi_example_weather.stations import StationToolset, settings_of

    if not settings_of(config).station_tools:
        return None
    return StationToolset()


@hookimpl
def koboi_register_toolsets(register: RegisterToolset) -> None:
    register(
        "weather_stations",
        create_station_toolset,
        description="station__<city> tools, one per known weather station.",
    )


def create_briefing(options: BriefingOptions, config: AgentConfig) -> Runner:
    """Runner factory: called once per agent whose config says ``agent.runner: briefing``."""
    from koboi_example_weather.briefing import Briefing

    return Briefing(options.cities)


@hookimpl
def koboi_register_runners(register: RegisterRunner) -> None:
    from koboi_example_weather.config import BriefingOptions

    register(
        "briefing",
        create_briefing,
        options=BriefingOptions,
        description="The loop once per city, then every forecast in one answer.",
    )


@hookimpl
def koboi_register_interceptors(register: RegisterInterceptor, config: AgentConfig) -> None:
    if "weather_forecast" not in config.tools.builtin:
        return
    from koboi_example_weather.guide import ForecastGuide
    from koboi_example_weather.memory import ForecastMemory

    register(ForecastMemory())
    register(ForecastGuide())
