"""OpenAI Chat Completions provider for koboi (and any OpenAI-compatible server).

Names are imported on first use, so loading the plugin (which imports this
package) does not import httpx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_openai._version import __version__
    from koboi_openai.config import OpenAIOptions
    from koboi_openai.provider import OpenAIProvider

__all__ = ["OpenAIOptions", "OpenAIProvider", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from koboi_openai._version import __version__

        return __version__
    if name == "OpenAIProvider":
        from koboi_openai.provider import OpenAIProvider

        return OpenAIProvider
    if name == "OpenAIOptions":
        from koboi_openai.config import OpenAIOptions

        return OpenAIOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
