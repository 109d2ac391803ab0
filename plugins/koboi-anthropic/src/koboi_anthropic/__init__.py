"""Claude models for koboi, through the Anthropic Messages API.

Everything is imported on first use, so loading the plugin (which imports
this package) does not import httpx or build anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_anthropic._version import __version__
    from koboi_anthropic.options import AnthropicOptions
    from koboi_anthropic.provider import AnthropicProvider

__all__ = ["AnthropicOptions", "AnthropicProvider", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from koboi_anthropic._version import __version__

        return __version__
    if name == "AnthropicProvider":
        from koboi_anthropic.provider import AnthropicProvider

        return AnthropicProvider
    if name == "AnthropicOptions":
        from koboi_anthropic.options import AnthropicOptions

        return AnthropicOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
