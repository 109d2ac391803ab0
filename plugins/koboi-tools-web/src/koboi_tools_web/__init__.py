"""koboi-tools-web: ``web_fetch`` and ``web_search`` for koboi agents.

The tools live in :mod:`koboi_tools_web.tools` and are imported only when an
agent enables one; importing this package (which the plugin host does at
start-up) costs nothing: even the settings model is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_tools_web._version import __version__
    from koboi_tools_web.config import WebSettings

__all__ = ["WebSettings", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from koboi_tools_web._version import __version__

        return __version__
    # Lazy: the plugin host imports this package at start-up, and `koboi --help`
    # must not pay for pydantic.
    if name == "WebSettings":
        from koboi_tools_web.config import WebSettings

        return WebSettings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
