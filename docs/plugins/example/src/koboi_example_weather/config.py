"""The ``weather:`` config section. Only pydantic here, so loading the plugin stays cheap."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: The stations the plugin registers itself (``koboi_weather_register_stations``).
DEFAULT_STATIONS: dict[str, float] = {
    "Paris": 18.0,
    "Tokyo": 22.5,
    "Reykjavik": 4.0,
}


class WeatherSettings(BaseModel):
    """Settings of the offline weather forecast."""

    # An unknown key is an error, with a "did you mean" hint from the kernel.
    model_config = ConfigDict(extra="forbid")

    units: Literal["metric", "imperial"] = Field(
        default="metric",
        description="Units of reported temperatures: metric (degrees C) or imperial (degrees F).",
    )
    stations: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Fixed offline forecast: city name -> temperature in degrees Celsius, added to "
            "(and winning over) the stations plugins register; the plugin itself registers "
            "Paris, Tokyo and Reykjavik. Cities are matched case-insensitively."
        ),
    )
    station_tools: bool = Field(
        default=False,
        description="Also offer one station__<city> tool per station (the weather_stations "
        "toolset).",
    )
    cite: bool = Field(
        default=False,
        description="End every answer that gives a forecast with where it comes from (the "
        "offline table).",
    )


class BriefingOptions(BaseModel):
    """Options of the ``briefing`` runner (``agent.runner: {name: briefing, ...}``)."""

    model_config = ConfigDict(extra="forbid")

    cities: list[str] = Field(
        default_factory=list,
        description="Cities of the briefing, in order; empty: every known station, by name.",
    )
