"""koboi-mcp-serve: ``koboi mcp-serve``, an agent's tools as an MCP server.

Nothing heavy is imported here: the plugin host imports this package while
plugins load; the MCP SDK and the HTTP server only when the command runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_mcp_serve._version import __version__

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from koboi_mcp_serve._version import __version__

        return __version__
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
