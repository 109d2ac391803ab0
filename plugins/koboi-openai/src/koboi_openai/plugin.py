"""koboi hooks of the OpenAI provider. Imports the provider (and httpx) only when one is built."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi_openai.config import OpenAIOptions
    from koboi_openai.provider import OpenAIProvider


def create_provider(options: OpenAIOptions) -> OpenAIProvider:
    """Build the provider from its validated ``llm:`` options."""
    from koboi_openai.provider import OpenAIProvider

    return OpenAIProvider(options)


@hookimpl
def koboi_register_providers(register: Callable[..., None]) -> None:
    from koboi_openai.config import OpenAIOptions

    register(
        "openai",
        create_provider,
        options=OpenAIOptions,
        description=(
            "OpenAI Chat Completions, or any OpenAI-compatible server through base_url "
            "(vLLM, Ollama, llama.cpp, LM Studio, OpenRouter...)."
        ),
    )
