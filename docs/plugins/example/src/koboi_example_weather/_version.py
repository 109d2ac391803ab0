"""The version of koboi-example-weather: written here and nowhere else (hatchling reads it)."""

__version__ = "0.1.0"
