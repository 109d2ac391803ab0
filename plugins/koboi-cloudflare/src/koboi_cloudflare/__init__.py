"""Cloudflare Workers AI model provider for koboi.

Names are imported on first use, so loading the plugin (which imports this
package) does not import httpx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_cloudflare._version import __version__
    from koboi_cloudflare.config import CloudflareOptions
    from koboi_cloudflare.provider import CloudflareProvider

__all__ = ["CloudflareOptions", "CloudflareProvider", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from koboi_cloudflare._version import __version__

        return __version__
    if name == "CloudflareProvider":
        from koboi_cloudflare.provider import CloudflareProvider

        return CloudflareProvider
    if name == "CloudflareOptions":
        from koboi_cloudflare.config import CloudflareOptions

        return CloudflareOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
