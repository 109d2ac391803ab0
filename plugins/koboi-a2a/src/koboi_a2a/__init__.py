"""koboi-a2a: the A2A protocol for koboi (serve an agent to peers, call peers as tools).

Nothing heavy is imported here: the plugin host imports this package while
plugins load; a2a-sdk only when a server or a peer toolset is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_a2a._version import __version__

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from koboi_a2a._version import __version__

        return __version__
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
