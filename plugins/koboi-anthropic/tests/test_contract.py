"""The Anthropic provider passes the provider contract, over the real wire format."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from koboi.provider import ModelProvider
from koboi_anthropic.options import AnthropicOptions
from koboi_anthropic.provider import AnthropicProvider
from koboi_testing.contracts import (
    HELLO_TEXT,
    LENGTH_TEXT,
    PARIS,
    TOKYO,
    USAGE_INPUT_TOKENS,
    USAGE_OUTPUT_TOKENS,
    ProviderContract,
    Scenario,
)
from koboi_testing.wire import Reply, WireServer


def scenario_message(claude: Any, scenario: Scenario) -> dict[str, Any]:
    if scenario == "tool_call":
        return claude.message(
            [
                claude.text("Let me check."),
                claude.tool_use("toolu_01A", "get_weather", dict(PARIS)),
            ],
            stop_reason="tool_use",
        )
    if scenario == "two_tool_calls":
        return claude.message(
            [
                claude.tool_use("toolu_01A", "get_weather", dict(PARIS)),
                claude.tool_use("toolu_01B", "get_weather", dict(TOKYO)),
            ],
            stop_reason="tool_use",
        )
    if scenario == "usage":
        usage = {"input_tokens": USAGE_INPUT_TOKENS, "output_tokens": USAGE_OUTPUT_TOKENS}
        return claude.message([claude.text(HELLO_TEXT)], usage=usage)
    if scenario == "length":
        return claude.message([claude.text(LENGTH_TEXT)], stop_reason="max_tokens")
    return claude.message([claude.text(HELLO_TEXT)])


class TestAnthropicProviderContract(ProviderContract):
    @pytest.fixture
    def provider_for(
        self,
        server: WireServer,
        claude: Any,
        answer: Callable[..., None],
        provider_options: Callable[..., AnthropicOptions],
    ) -> Callable[[Scenario], ModelProvider]:
        self.server = server

        def make(scenario: Scenario) -> ModelProvider:
            if scenario == "error":
                # Overloaded every time: retried once, then a ProviderError.
                server.handler = None
                server.default = Reply.json(
                    claude.error("overloaded_error", "Overloaded"), status=529
                )
            else:
                # Text cut into 2-character pieces, so the stream has several deltas.
                answer(scenario_message(claude, scenario), piece=2)
            return AnthropicProvider(provider_options(server.url, max_retries=1))

        return make

    def tool_names_sent(self, provider: ModelProvider) -> Sequence[str] | None:
        return [tool["name"] for tool in self.server.requests[-1].json()["tools"]]
