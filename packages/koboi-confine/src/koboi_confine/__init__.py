"""Confinement rules shared by koboi's sandbox backend and its tool families.

A library, not a plugin: it registers nothing. Each module has one job and is
imported by name (``koboi_confine.paths``, ``koboi_confine.environment``,
``koboi_confine.text``), so a tool family gets these rules without installing
the sandbox backend and its seccomp bindings.
"""

from koboi_confine._version import __version__

__all__ = ["__version__"]
