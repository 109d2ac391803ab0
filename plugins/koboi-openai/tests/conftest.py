"""Shared fixtures: a loopback server speaking Chat Completions, providers aimed at it,
and builders of the API's JSON and SSE payloads."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import pytest

import koboi_openai.plugin
import koboi_tools_basic.plugin
from koboi.plugins import PluginHost
from koboi_openai.config import OpenAIOptions
from koboi_openai.provider import OpenAIProvider
from koboi_testing.wire import WireServer

#: The key test providers send; tests assert it never shows up in messages.
SECRET = "sk-proj-TESTSECRET0123456789abcdefABCDEF"


class Payloads:
    """Builders of Chat Completions wire payloads, shaped like the real API's."""

    @staticmethod
    def usage(
        prompt: int = 11, completion: int = 7, *, cached: int = 0, reasoning: int = 0
    ) -> dict[str, Any]:
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    @staticmethod
    def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}

    @classmethod
    def completion(
        cls,
        content: str | None = None,
        *,
        tool_calls: Sequence[dict[str, Any]] = (),
        finish: str | None = None,
        usage: dict[str, Any] | bool | None = True,
        model: str = "gpt-4o-mini-2024-07-18",
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        if tool_calls:
            message["tool_calls"] = list(tool_calls)
        body: dict[str, Any] = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 1732900000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": finish or ("tool_calls" if tool_calls else "stop"),
                }
            ],
            "system_fingerprint": "fp_test",
        }
        if usage is True:
            body["usage"] = cls.usage()
        elif isinstance(usage, dict):
            body["usage"] = usage
        return body

    @staticmethod
    def chunk(
        delta: dict[str, Any] | None = None,
        *,
        finish: str | None = None,
        usage: dict[str, Any] | None = None,
        choices: bool = True,
        model: str = "gpt-4o-mini-2024-07-18",
    ) -> dict[str, Any]:
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": 1732900000,
            "model": model,
            "system_fingerprint": "fp_test",
            "choices": (
                [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}]
                if choices
                else []
            ),
            "usage": usage,
        }

    @classmethod
    def text_chunks(
        cls,
        pieces: Sequence[str],
        *,
        finish: str = "stop",
        usage: dict[str, Any] | None = None,
        done: bool = True,
    ) -> list[Any]:
        """The SSE events of a streamed text reply, as OpenAI sends them with include_usage."""
        events: list[Any] = [cls.chunk({"role": "assistant", "content": "", "refusal": None})]
        events += [cls.chunk({"content": piece}) for piece in pieces]
        events.append(cls.chunk({}, finish=finish))
        if usage is not None:
            events.append(cls.chunk(choices=False, usage=usage))
        if done:
            events.append("[DONE]")
        return events

    @classmethod
    def tool_chunks(
        cls,
        calls: Sequence[tuple[str, str, str]],
        *,
        piece: int = 3,
        text: Sequence[str] = (),
        usage: dict[str, Any] | None = None,
    ) -> list[Any]:
        """A streamed reply calling tools: ``(id, name, arguments_json)`` each, the
        arguments cut into ``piece``-character deltas, calls one after another."""
        events: list[Any] = [cls.chunk({"role": "assistant", "content": None})]
        events += [cls.chunk({"content": t}) for t in text]
        for index, (call_id, name, arguments) in enumerate(calls):
            first = {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            events.append(cls.chunk({"tool_calls": [first]}))
            for start in range(0, len(arguments), piece):
                part = {"index": index, "function": {"arguments": arguments[start : start + piece]}}
                events.append(cls.chunk({"tool_calls": [part]}))
        events.append(cls.chunk({}, finish="tool_calls"))
        if usage is not None:
            events.append(cls.chunk(choices=False, usage=usage))
        events.append("[DONE]")
        return events

    @staticmethod
    def error(
        message: str, type_: str = "invalid_request_error", code: Any = None
    ) -> dict[str, Any]:
        return {"error": {"message": message, "type": type_, "param": None, "code": code}}


@pytest.fixture
def wire() -> type[Payloads]:
    return Payloads


@pytest.fixture(autouse=True)
def _no_ambient_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see the developer's real keys; each sets what it needs."""
    for name in ("OPENAI_API_KEY", "OPENROUTER_API_KEY", "KOBOI_TEST_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KOBOI_STORE", "memory://")


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer() as running:
        yield running


ProviderMaker = Callable[..., OpenAIProvider]


@pytest.fixture
async def make_provider(server: WireServer) -> AsyncIterator[ProviderMaker]:
    """Build providers aimed at ``server`` (fast retries, short timeouts); closed afterwards."""
    made: list[OpenAIProvider] = []

    def make(**overrides: Any) -> OpenAIProvider:
        settings: dict[str, Any] = {
            "model": "gpt-4o-mini",
            "base_url": f"{server.url}/v1",
            "api_key": SECRET,
            "timeout_seconds": 5.0,
            "connect_timeout_seconds": 2.0,
            "max_retries": 2,
            "retry_initial_delay": 0.01,
            "retry_max_delay": 0.02,
        }
        settings.update(overrides)
        provider = OpenAIProvider(OpenAIOptions.model_validate(settings))
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


@pytest.fixture
def secret() -> str:
    return SECRET


@pytest.fixture
def host() -> PluginHost:
    """A plugin host with exactly this plugin and the basic tools, whatever else is installed."""
    h = PluginHost(load_entry_points=False, strict=True)
    h.add_plugin(koboi_openai.plugin, "openai", dist="koboi-openai")
    h.add_plugin(koboi_tools_basic.plugin, "tools-basic", dist="koboi-tools-basic")
    return h
