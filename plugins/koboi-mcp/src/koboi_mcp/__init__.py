"""koboi-mcp: the tools of MCP servers as governed, journaled koboi tools.

Nothing heavy is imported here: the plugin host imports this package while
plugins load, and the MCP SDK is imported only when an agent connects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_mcp._version import __version__

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from koboi_mcp._version import __version__

        return __version__
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
