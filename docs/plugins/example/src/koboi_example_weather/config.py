"""The ``weather:`` config section. Only pydantic here, so loading the plugin stays cheap."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: Used when the config has no ``weather`` section, or a section without ``stations``.
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
        default_factory=lambda: dict(DEFAULT_STATIONS),
        description=(
            "Fixed offline forecast: city name -> temperature in degrees Celsius. "
            "Cities are matched case-insensitively."
        ),
    )
