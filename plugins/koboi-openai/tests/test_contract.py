"""The provider passes the contract every koboi provider must pass, over real HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from koboi.provider import ModelProvider
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
from koboi_testing.wire import Received, Reply, WireServer


def _scenario_reply(scenario: Scenario, streaming: bool, wire: Any) -> Reply:
    usage = wire.usage(USAGE_INPUT_TOKENS, USAGE_OUTPUT_TOKENS)
    paris = json.dumps(PARIS)
    tokyo = json.dumps(TOKYO)
    if scenario == "error":
        return Reply.json(wire.error("The server had an error", "server_error"), status=500)
    if not streaming:
        if scenario in ("text", "usage"):
            return Reply.json(wire.completion(HELLO_TEXT, usage=usage))
        if scenario == "length":
            return Reply.json(wire.completion(LENGTH_TEXT, finish="length"))
        calls = [wire.call("call_paris", "get_weather", paris)]
        if scenario == "two_tool_calls":
            calls.append(wire.call("call_tokyo", "get_weather", tokyo))
        return Reply.json(wire.completion(None, tool_calls=calls))
    if scenario in ("text", "usage"):
        # Cut into odd pieces, then the body into 7-byte network chunks.
        return Reply.sse(wire.text_chunks(["Hel", "lo", " the", "re"], usage=usage), chunk_size=7)
    if scenario == "length":
        return Reply.sse(wire.text_chunks(["He", "llo"], finish="length"), chunk_size=5)
    calls = [("call_paris", "get_weather", paris)]
    if scenario == "two_tool_calls":
        calls.append(("call_tokyo", "get_weather", tokyo))
    return Reply.sse(wire.tool_chunks(calls, piece=2, usage=usage), chunk_size=11)


class TestOpenAIProviderContract(ProviderContract):
    @pytest.fixture
    def provider_for(
        self, server: WireServer, make_provider: Callable[..., ModelProvider], wire: Any
    ) -> Callable[[Scenario], ModelProvider]:
        self.server = server

        def make(scenario: Scenario) -> ModelProvider:
            def answer(request: Received) -> Reply:
                return _scenario_reply(scenario, bool(request.json().get("stream")), wire)

            server.handler = answer
            return make_provider(max_retries=1)

        return make

    def tool_names_sent(self, provider: ModelProvider) -> list[str] | None:
        body = self.server.requests[-1].json()
        return [tool["function"]["name"] for tool in body.get("tools", [])]
