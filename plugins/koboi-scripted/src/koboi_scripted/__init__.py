"""Offline, deterministic scripted model provider for koboi.

Everything is imported on first use, so loading the plugin (which imports
this package) builds no model until the provider is registered or used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_scripted._version import __version__
    from koboi_scripted.config import Rule, ScriptedOptions, ScriptedToolCall, Turn
    from koboi_scripted.provider import ScriptedProvider

__all__ = ["Rule", "ScriptedOptions", "ScriptedProvider", "ScriptedToolCall", "Turn", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from koboi_scripted._version import __version__

        return __version__
    if name == "ScriptedProvider":
        from koboi_scripted.provider import ScriptedProvider

        return ScriptedProvider
    if name in ("Rule", "ScriptedOptions", "ScriptedToolCall", "Turn"):
        from koboi_scripted import config

        return getattr(config, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
