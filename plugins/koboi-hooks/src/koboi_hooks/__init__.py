"""koboi-hooks: command and URL hooks on a run's lifecycle, configured in YAML.

The hook contract is the one coding agents share (JSON on stdin, exit code 2
blocks with stderr as the reason, optional JSON on stdout), so existing hook
scripts work unchanged. Importing this package costs nothing: the settings,
the runner and the interceptor are imported when an agent uses the section.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_hooks._version import __version__
    from koboi_hooks.settings import HooksSettings

__all__ = ["HooksSettings", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from koboi_hooks._version import __version__

        return __version__
    if name == "HooksSettings":
        from koboi_hooks.settings import HooksSettings

        return HooksSettings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
