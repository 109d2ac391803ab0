"""koboi-console: a web console on ``koboi serve``.

Nothing heavy is imported here: the plugin host imports this package while plugins
load; FastAPI and Jinja2 only when a server builds its app with the ``console``
section on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_console._version import __version__

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from koboi_console._version import __version__

        return __version__
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
