"""Stations: the config's, and those plugins register (``koboi_weather_register_stations``).

Also the ``weather_stations`` toolset: one ``station__<city>`` tool per station.
"""

from __future__ import annotations

from collections.abc import Sequence

from koboi import AgentConfig, Risk, Tool, ToolError
from koboi.errors import RegistrationError
from koboi.plugins import PluginHost, default_host
from koboi.registry import Registration
from koboi.tools import FunctionTool, tool
from koboi.toolsets import Toolset, ToolsetContext, provider_safe_name
from koboi_example_weather.config import WeatherSettings

HOOK = "koboi_weather_register_stations"


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


def _is_temperature(entry: Registration[object]) -> None:
    if isinstance(entry.target, bool) or not isinstance(entry.target, int | float):
        raise RegistrationError(
            f"weather station {entry.name!r}: the temperature must be a number, "
            f"not {entry.target!r}"
        )


def stations_of(config: AgentConfig, host: PluginHost | None = None) -> dict[str, float]:
    """Every station: those plugins register, then the config's (which win)."""
    registered = (host or default_host()).collect(
        HOOK, kind="weather station", validate=_is_temperature
    )
    stations = {entry.name: float(entry.target) for entry in registered}
    section = config.section("weather")
    if section is not None and isinstance(section, WeatherSettings):
        stations.update(section.stations)
    return stations


class StationToolset(Toolset):
    """``station__<city>`` for each station: a tool a model can call without arguments."""

    name = "weather_stations"
    namespace = "station"  # its tools are offered as station__<city>

    def __init__(self) -> None:
        self._tools: list[Tool] = []

    async def open(self, context: ToolsetContext) -> None:
        # The agent's own plugin host: the stations its plugins register.
        stations = stations_of(context.config, context.host)
        self._tools = [_station_tool(city, celsius) for city, celsius in sorted(stations.items())]

    def tools(self) -> Sequence[Tool]:
        return list(self._tools)


def _station_tool(city: str, celsius: float) -> FunctionTool:
    # A valid tool name for any city ("reykjavík" gets a stable hash); the kernel offers
    # it in the toolset's namespace: station__oslo.
    name = provider_safe_name("", city.casefold())

    @tool(
        name=name,
        description=f"Today's temperature at {city}.",
        risk=Risk.SAFE,
        idempotent=True,
        thread=False,
    )
    def station() -> str:
        if celsius != celsius:  # NaN: a broken station
            raise ToolError(f"the station of {city} reports no temperature")
        return f"{city}: {celsius:.1f} °C"

    return station
