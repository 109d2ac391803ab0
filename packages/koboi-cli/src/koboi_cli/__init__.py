"""koboi command line: the ``koboi`` script (``koboi_cli.app:main``).

Importing this package is cheap: the kernel, the plugins and the agent loop are
imported only by the commands that need them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    # Read lazily: importlib.metadata alone costs tens of milliseconds at startup.
    if name == "__version__":
        from importlib import metadata

        try:
            return metadata.version("koboi-cli")
        except metadata.PackageNotFoundError:  # pragma: no cover - a bare source tree
            return "0+unknown"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
