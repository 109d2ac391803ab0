"""koboi hooks of the Cloudflare Workers AI provider. Imports httpx only when used."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi_cloudflare.config import CloudflareOptions
    from koboi_cloudflare.provider import CloudflareProvider


def create_provider(options: CloudflareOptions) -> CloudflareProvider:
    """Build the provider from its validated ``llm:`` options."""
    from koboi_cloudflare.provider import CloudflareProvider

    return CloudflareProvider(options)


@hookimpl
def koboi_register_providers(register: Callable[..., None]) -> None:
    from koboi_cloudflare.config import CloudflareOptions

    register(
        "cloudflare",
        create_provider,
        options=CloudflareOptions,
        description="Cloudflare Workers AI (account id + API token): chat and tool calls.",
    )
