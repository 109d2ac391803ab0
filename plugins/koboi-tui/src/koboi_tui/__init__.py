"""koboi-tui: ``koboi chat CONFIG``, an interactive terminal UI for a koboi agent.

See docs/chat.md. Importing this package imports nothing from Textual: the UI
loads only when ``koboi chat`` runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_tui._version import __version__

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    # The version on first use: the plugin host imports this package whenever koboi
    # loads its plugins (koboi --help included), and needs nothing of it.
    if name == "__version__":
        from koboi_tui._version import __version__

        return __version__
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
