"""The ``weather_forecast`` tool, built per agent from its ``weather:`` section."""

from __future__ import annotations

from koboi import AgentConfig, FunctionTool, Risk, ToolContext, ToolError, tool
from koboi_example_weather.stations import settings_of, stations_of

__all__ = ["format_temperature", "make_forecast_tool", "settings_of"]


def format_temperature(celsius: float, units: str) -> str:
    """``18.0`` -> ``"18.0 °C"`` (metric) or ``"64.4 °F"`` (imperial)."""
    if units == "imperial":
        return f"{celsius * 9 / 5 + 32:.1f} °F"
    return f"{celsius:.1f} °C"


def make_forecast_tool(config: AgentConfig) -> FunctionTool:
    """Build the tool for one agent: its units are fixed when it is made, its stations are
    those of the plugin host of the run that calls it."""
    units = settings_of(config).units

    @tool(name="weather_forecast", risk=Risk.SAFE, idempotent=True, thread=False)
    def weather_forecast(city: str, ctx: ToolContext) -> str:
        """Return today's forecast temperature for a city.

        Args:
            city: Name of the city, e.g. "Paris".
        """
        # The stations the plugins of the agent's own host register (outside a run, as in
        # a unit test, the default host's).
        stations = stations_of(config, ctx.run.host if ctx.run is not None else None)
        by_key = {name.casefold(): (name, temp) for name, temp in stations.items()}
        found = by_key.get(city.strip().casefold())
        if found is None:
            known = ", ".join(sorted(stations)) or "none"
            # A ToolError's message is what the model reads as the tool result.
            raise ToolError(f"no forecast for {city!r}; known cities: {known}")
        name, celsius = found
        if ctx.run is not None:
            # The plugin's own event: journaled with the call, handed back next run.
            ctx.record("weather.forecast", {"city": name, "celsius": celsius})
        return f"{name}: {format_temperature(celsius, units)}"

    return weather_forecast
