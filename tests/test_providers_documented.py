"""docs/providers.md documents every option of every first-party provider."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

PROVIDERS_MD = Path(__file__).resolve().parents[1] / "docs" / "providers.md"


def _options() -> list[tuple[str, type[BaseModel]]]:
    from koboi_anthropic.options import AnthropicOptions
    from koboi_cloudflare.config import CloudflareOptions
    from koboi_openai.config import OpenAIOptions

    return [
        ("openai", OpenAIOptions),
        ("anthropic", AnthropicOptions),
        ("cloudflare", CloudflareOptions),
    ]


@pytest.mark.parametrize(
    ("provider", "field"),
    [(name, field) for name, model in _options() for field in model.model_fields],
)
def test_provider_option_is_documented(provider: str, field: str) -> None:
    text = PROVIDERS_MD.read_text(encoding="utf-8")
    assert f"`{field}`" in text, f"docs/providers.md does not document {provider}'s {field!r}"
    assert f"## `{provider}`" in text
