"""koboi-example-weather: an offline ``weather_forecast`` tool for koboi agents.

The tool itself lives in :mod:`koboi_example_weather.tools` and is imported
only when an agent enables it; importing this package (which the plugin host
does at start-up) costs only the settings model.
"""

from __future__ import annotations

from koboi_example_weather.config import WeatherSettings

__all__ = ["WeatherSettings"]
