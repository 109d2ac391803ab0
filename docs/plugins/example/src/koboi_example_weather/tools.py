"""The ``weather_forecast`` tool, built per agent from its ``weather:`` section."""

from __future__ import annotations

from koboi import AgentConfig, FunctionTool, Risk, ToolError, tool
from koboi_example_weather.config import WeatherSettings


def settings_of(config: AgentConfig) -> WeatherSettings:
    """The agent's validated ``weather`` section, or the defaults when it has none."""
    section = config.section("weather")
    if section is None:
        return WeatherSettings()
    if not isinstance(section, WeatherSettings):
        # Only possible if another plugin owned "weather"; the kernel would have
        # refused the duplicate registration, so this is a programming error.
        raise TypeError(f"the 'weather' section is a {type(section).__name__}")
    return section


def format_temperature(celsius: float, units: str) -> str:
    """``18.0`` -> ``"18.0 °C"`` (metric) or ``"64.4 °F"`` (imperial)."""
    if units == "imperial":
        return f"{celsius * 9 / 5 + 32:.1f} °F"
    return f"{celsius:.1f} °C"


def make_forecast_tool(config: AgentConfig) -> FunctionTool:
    """Build the tool for one agent: the stations and units are fixed when it is made."""
    settings = settings_of(config)
    by_key = {city.casefold(): (city, temp) for city, temp in settings.stations.items()}
    units = settings.units

    @tool(name="weather_forecast", risk=Risk.SAFE, idempotent=True, thread=False)
    def weather_forecast(city: str) -> str:
        """Return today's forecast temperature for a city.

        Args:
            city: Name of the city, e.g. "Paris".
        """
        found = by_key.get(city.strip().casefold())
        if found is None:
            known = ", ".join(sorted(settings.stations)) or "none"
            # A ToolError's message is what the model reads as the tool result.
            raise ToolError(f"no forecast for {city!r}; known cities: {known}")
        name, celsius = found
        return f"{name}: {format_temperature(celsius, units)}"

    return weather_forecast
