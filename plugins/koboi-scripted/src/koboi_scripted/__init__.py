"""Offline, deterministic scripted model provider for koboi.

``ScriptedProvider`` is imported on first use, so loading the plugin (which
imports this package) costs only the options models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from koboi_scripted.config import Rule, ScriptedOptions, ScriptedToolCall, Turn

if TYPE_CHECKING:
    from koboi_scripted.provider import ScriptedProvider

__all__ = ["Rule", "ScriptedOptions", "ScriptedProvider", "ScriptedToolCall", "Turn"]


def __getattr__(name: str) -> Any:
    if name == "ScriptedProvider":
        from koboi_scripted.provider import ScriptedProvider

        return ScriptedProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
