"""Reading replies: content blocks, stop reasons, usage, and replies that are not messages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from koboi.errors import ProviderError
from koboi.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ResponseDone,
    TextDelta,
)
from koboi_anthropic.provider import AnthropicProvider
from koboi_testing.wire import Reply, WireServer

MakeProvider = Callable[..., AnthropicProvider]
REQUEST = ModelRequest(messages=[Message.user("Hi")])


async def collect(events: AsyncIterator[ModelStreamEvent]) -> tuple[str, ModelResponse]:
    deltas: list[str] = []
    final: ModelResponse | None = None
    async for event in events:
        if isinstance(event, TextDelta):
            deltas.append(event.text)
        elif isinstance(event, ResponseDone):
            final = event.response
    assert final is not None
    return "".join(deltas), final


async def both(provider: AnthropicProvider) -> list[ModelResponse]:
    """The response of complete() and of stream(), checking the deltas match the content."""
    completed = await provider.complete(REQUEST)
    streamed_text, streamed = await collect(provider.stream(REQUEST))
    assert streamed_text == streamed.message.content
    return [completed, streamed]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "content_filter"),
        (None, "stop"),
        ("a_reason_added_later", "stop"),
    ],
)
async def test_stop_reasons(
    make_provider: MakeProvider,
    answer: Callable[..., None],
    claude: Any,
    stop_reason: str | None,
    finish: str,
) -> None:
    answer(claude.message([claude.text("Hi there")], stop_reason=stop_reason))
    for response in await both(make_provider()):
        assert response.finish_reason == finish
        assert response.message.content == "Hi there"


@pytest.mark.anyio
async def test_text_around_tool_calls_and_usage_with_cache(
    make_provider: MakeProvider, answer: Callable[..., None], claude: Any
) -> None:
    answer(
        claude.message(
            [
                claude.text("First I compute. "),
                claude.tool_use("toolu_01", "calculator", {"expression": "6*7"}),
                claude.text("Then I check."),
                claude.tool_use("toolu_02", "now", {}),
            ],
            stop_reason="tool_use",
            usage={
                "input_tokens": 20,
                "output_tokens": 30,
                "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 500,
            },
            model="claude-sonnet-4-5-20250929",
        )
    )
    for response in await both(make_provider()):
        message = response.message
        assert message.content == "First I compute. Then I check."
        assert [(c.id, c.name, c.arguments) for c in message.tool_calls] == [
            ("toolu_01", "calculator", {"expression": "6*7"}),
            ("toolu_02", "now", {}),
        ]
        assert response.finish_reason == "tool_calls"
        assert response.model == "claude-sonnet-4-5-20250929"
        # koboi counts every input token: uncached + read from cache + written to it.
        assert response.usage.input_tokens == 1520
        assert response.usage.cache_read_tokens == 1000
        assert response.usage.cache_write_tokens == 500
        assert response.usage.output_tokens == 30
        assert response.usage.requests == 1
        # Nothing to keep: no provider_data.
        assert message.provider_data is None


@pytest.mark.anyio
async def test_thinking_is_not_content(
    make_provider: MakeProvider, answer: Callable[..., None], claude: Any
) -> None:
    answer(
        claude.message(
            [claude.thinking("Let me think about hello."), claude.text("Hello!")],
        )
    )
    for response in await both(make_provider()):
        assert response.message.content == "Hello!"
        assert "think" not in response.message.content
        kept = response.message.provider_data
        assert kept is not None
        assert kept["anthropic"]["content"][0]["thinking"] == "Let me think about hello."


@pytest.mark.anyio
async def test_error_envelope_in_a_200_reply(
    make_provider: MakeProvider, server: WireServer, claude: Any
) -> None:
    server.default = Reply.json(claude.error("overloaded_error", "Overloaded"))
    with pytest.raises(ProviderError) as caught:
        await make_provider().complete(REQUEST)
    assert "overloaded_error: Overloaded" in str(caught.value)
    assert caught.value.retryable
    assert caught.value.status == 529


@pytest.mark.anyio
@pytest.mark.parametrize(
    "body",
    [b"{not json", b'{"type": "message", "content": "nope"}', b"[]", b"null"],
    ids=["invalid-json", "content-not-a-list", "a-list", "null"],
)
async def test_a_reply_that_is_not_a_message(
    make_provider: MakeProvider, server: WireServer, body: bytes
) -> None:
    server.default = Reply.raw(body)
    with pytest.raises(ProviderError) as caught:
        await make_provider().complete(REQUEST)
    message = str(caught.value)
    assert message.startswith("anthropic: ")
    assert "not valid JSON" in message or "not a message" in message
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_tool_use_input_that_is_not_an_object(
    make_provider: MakeProvider, answer: Callable[..., None], claude: Any
) -> None:
    block = {"type": "tool_use", "id": "toolu_9", "name": "calculator", "input": [1, 2]}
    answer(claude.message([block], stop_reason="tool_use"))
    response = await make_provider().complete(REQUEST)
    (call,) = response.message.tool_calls
    assert call.arguments == {}
    assert call.raw_arguments == "[1, 2]"
