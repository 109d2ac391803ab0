"""The version of koboi-tui: written here and nowhere else (hatchling reads it)."""

__version__ = "0.1.0"
