"""koboi-example-weather: an offline ``weather_forecast`` tool for koboi agents.

Importing this package imports only its ``_version``: the plugin host imports
:mod:`koboi_example_weather.plugin` at start-up, and everything else is imported
when an agent uses it.
"""

from koboi_example_weather._version import __version__

__all__ = ["__version__"]
