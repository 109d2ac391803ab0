"""koboi hooks of koboi-example-weather.

This module is what the ``koboi.plugins`` entry point names. It holds only
``@hookimpl`` functions and imports nothing heavy: the tool module is imported
by the factory, when an agent that enables ``weather_forecast`` is assembled.
"""

from __future__ import annotations

from collections.abc import Callable

from koboi import AgentConfig, Tool, hookimpl
from koboi_example_weather.config import WeatherSettings


@hookimpl
def koboi_register_config_sections(register: Callable[..., None]) -> None:
    register("weather", WeatherSettings, description="Offline weather forecast (example plugin).")


def create_forecast_tool(config: AgentConfig) -> Tool:
    """Tool factory: called once per agent, with that agent's validated config."""
    from koboi_example_weather.tools import make_forecast_tool

    return make_forecast_tool(config)


@hookimpl
def koboi_register_tools(register: Callable[..., None]) -> None:
    register(
        "weather_forecast",
        create_forecast_tool,
        description="Today's temperature for a city, from a fixed offline table.",
    )
