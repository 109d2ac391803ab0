"""koboi shell tools: ``run_shell`` (foreground or background), ``shell_status``, ``shell_kill``.

Every command runs through the session's sandbox (``ctx.run_process``); see the
README for what each backend confines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_tools_shell._version import __version__

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    # The version on first use: the plugin host imports this package whenever koboi
    # loads its plugins (koboi --help included), and needs nothing of it.
    if name == "__version__":
        from koboi_tools_shell._version import __version__

        return __version__
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
