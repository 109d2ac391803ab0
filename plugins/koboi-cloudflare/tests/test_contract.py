"""The provider passes the contract every koboi provider must pass, over the real wire format."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from koboi.provider import ModelProvider
from koboi_cloudflare.provider import CloudflareProvider
from koboi_testing.contracts import (
    HELLO_TEXT,
    LENGTH_TEXT,
    PARIS,
    USAGE_INPUT_TOKENS,
    USAGE_OUTPUT_TOKENS,
    ProviderContract,
    Scenario,
)
from koboi_testing.wire import Received, Reply, WireServer

USAGE = {
    "prompt_tokens": USAGE_INPUT_TOKENS,
    "completion_tokens": USAGE_OUTPUT_TOKENS,
    "total_tokens": USAGE_INPUT_TOKENS + USAGE_OUTPUT_TOKENS,
}


def _calls(scenario: Scenario) -> list[dict[str, Any]]:
    # Native Workers AI calls: no id, arguments as an object or as JSON text.
    if scenario == "tool_call":
        return [{"name": "get_weather", "arguments": dict(PARIS)}]
    if scenario == "two_tool_calls":
        return [
            {"name": "get_weather", "arguments": dict(PARIS)},
            {"name": "get_weather", "arguments": '{"city": "Tokyo"}'},
        ]
    return []


def whole(scenario: Scenario, cf: Any) -> Reply:
    if scenario == "error":
        return cf.failure(3043, "Internal server error", status=500)
    text = LENGTH_TEXT if scenario == "length" else ("" if "tool" in scenario else HELLO_TEXT)
    result: dict[str, Any] = {"response": text, "usage": USAGE}
    if "tool" in scenario:
        result["tool_calls"] = _calls(scenario)
    if scenario == "length":
        result["finish_reason"] = "length"
    return cf.ok(result)


def streamed(scenario: Scenario, cf: Any) -> Reply:
    if scenario == "error":
        return cf.failure(3043, "Internal server error", status=500)
    pieces = ["Hel", "lo"] if scenario == "length" else ["Hel", "lo", "", " there"]
    chunks: list[Any] = []
    if "tool" in scenario:
        chunks.append({"response": "", "tool_calls": _calls(scenario), "p": "abcdef"})
    else:
        chunks += [{"response": piece, "p": "abc"} for piece in pieces]
    final: dict[str, Any] = {"response": "", "usage": USAGE}
    if scenario == "length":
        final["finish_reason"] = "length"
    chunks.append(final)
    return cf.sse(chunks, chunk_size=7)


class TestCloudflareProviderContract(ProviderContract):
    @pytest.fixture
    def provider_for(
        self, server: WireServer, make_provider: Callable[..., CloudflareProvider], cf: Any
    ) -> Callable[[Scenario], ModelProvider]:
        def make(scenario: Scenario) -> ModelProvider:
            def handler(request: Received) -> Reply:
                if request.json()["stream"]:
                    return streamed(scenario, cf)
                return whole(scenario, cf)

            server.handler = handler
            return make_provider()

        return make

    def tool_names_sent(self, provider: ModelProvider) -> list[str] | None:
        assert isinstance(provider, CloudflareProvider)
        server_requests = self._server.requests
        return [tool["name"] for tool in server_requests[-1].json()["tools"]]

    @pytest.fixture(autouse=True)
    def _keep_server(self, server: WireServer) -> None:
        self._server = server
