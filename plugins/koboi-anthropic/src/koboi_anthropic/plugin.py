"""koboi hooks of the Anthropic provider. Imports its modules only when asked."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi_anthropic.options import AnthropicOptions
    from koboi_anthropic.provider import AnthropicProvider


def create_provider(options: AnthropicOptions) -> AnthropicProvider:
    """Build the provider from its validated ``llm:`` options."""
    from koboi_anthropic.provider import AnthropicProvider

    return AnthropicProvider(options)


@hookimpl
def koboi_register_providers(register: Callable[..., None]) -> None:
    from koboi_anthropic.options import AnthropicOptions

    register(
        "anthropic",
        create_provider,
        options=AnthropicOptions,
        description="Claude models through the Anthropic Messages API.",
    )
