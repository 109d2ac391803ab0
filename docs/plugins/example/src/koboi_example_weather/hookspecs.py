"""The hook this plugin defines for others: ``koboi_weather_register_stations``.

Its name starts with ``koboi_weather_``, this plugin's id: a plugin may only
define hooks in its own namespace.
"""

from __future__ import annotations

from typing import Protocol

from koboi.hookspecs import hookspec


class RegisterStation(Protocol):
    """``register(city, celsius, *, description="")``."""

    def __call__(self, city: str, celsius: float, *, description: str = "") -> None: ...


@hookspec
def koboi_weather_register_stations(register: RegisterStation) -> None:
    """Add weather stations to the offline forecast.

    :param register: ``register(city, celsius, *, description="")``: a city's name
        (matched case-insensitively) and its temperature in degrees Celsius.

    Collected once per plugin host, the first time an agent uses the forecast. A
    city registered by two plugins is an error naming both; the ``weather.stations``
    of a config win over every registered station. Sync only.
    """
