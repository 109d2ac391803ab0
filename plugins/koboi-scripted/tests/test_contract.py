"""The scripted provider passes the provider contract every provider plugin must pass."""

from __future__ import annotations

from typing import Any

import pytest

from koboi.messages import ModelRequest
from koboi.provider import ModelProvider
from koboi_scripted import ScriptedProvider
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


def _turn(scenario: Scenario) -> list[Any]:
    weather = {"name": "get_weather"}
    if scenario == "tool_call":
        return [{"tool_calls": [{**weather, "arguments": dict(PARIS)}]}]
    if scenario == "two_tool_calls":
        return [
            {
                "tool_calls": [
                    {**weather, "arguments": dict(PARIS)},
                    {**weather, "arguments": dict(TOKYO)},
                ]
            }
        ]
    if scenario == "usage":
        usage = {"input_tokens": USAGE_INPUT_TOKENS, "output_tokens": USAGE_OUTPUT_TOKENS}
        return [{"reply": HELLO_TEXT, "usage": usage}]
    if scenario == "length":
        return [{"reply": LENGTH_TEXT, "finish_reason": "length"}]
    return []  # "error": nothing scripted, and running out is an error


class TestScriptedProviderContract(ProviderContract):
    @pytest.fixture
    def provider_for(self) -> Any:
        def make(scenario: Scenario) -> ModelProvider:
            if scenario == "text":
                # A rule answers whatever history comes before the last user message.
                return ScriptedProvider.from_turns(
                    [], rules=[{"match": ".", "reply": HELLO_TEXT}], on_exhausted="error"
                )
            return ScriptedProvider.from_turns(_turn(scenario), on_exhausted="error")

        return make

    def tool_names_sent(self, provider: ModelProvider) -> list[str] | None:
        assert isinstance(provider, ScriptedProvider)
        last: ModelRequest = provider.requests[-1]
        return [spec.name for spec in last.tools]
