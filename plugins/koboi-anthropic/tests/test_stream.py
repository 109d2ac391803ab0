"""Streaming: SSE events as the API sends them, cut anywhere, with errors in the middle."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from koboi.errors import ProviderError
from koboi.messages import Message, ModelRequest, ModelResponse, ResponseDone, TextDelta
from koboi_anthropic.provider import AnthropicProvider
from koboi_testing.wire import Reply, WireServer

MakeProvider = Callable[..., AnthropicProvider]
REQUEST = ModelRequest(messages=[Message.user("Hi")])
UNICODE = "héllo wörld ☀️ 日本 — ok"


async def stream(provider: AnthropicProvider) -> tuple[list[str], ModelResponse]:
    deltas: list[str] = []
    final: ModelResponse | None = None
    async for event in provider.stream(REQUEST):
        if isinstance(event, TextDelta):
            deltas.append(event.text)
        elif isinstance(event, ResponseDone):
            assert final is None, "one ResponseDone"
            final = event.response
    assert final is not None
    return deltas, final


async def drain(provider: AnthropicProvider, delivered: list[str]) -> None:
    """Stream ``REQUEST``, appending each text delta to ``delivered``."""
    async for event in provider.stream(REQUEST):
        if isinstance(event, TextDelta):
            delivered.append(event.text)


def sse(events: list[Any], **kw: Any) -> Reply:
    return Reply.sse(events, **kw)


@pytest.mark.anyio
@pytest.mark.parametrize("chunk_size", [1, 2, 3, 5])
@pytest.mark.parametrize("line_end", ["\n", "\r\n", "\r"])
async def test_utf8_split_anywhere_with_any_line_end(
    make_provider: MakeProvider, server: WireServer, claude: Any, chunk_size: int, line_end: str
) -> None:
    message = claude.message([claude.text(UNICODE)])
    server.default = sse(claude.events(message, piece=4), chunk_size=chunk_size, line_end=line_end)
    deltas, final = await stream(make_provider())
    assert len(deltas) > 1
    assert "".join(deltas) == final.message.content == UNICODE


@pytest.mark.anyio
async def test_tool_arguments_in_many_pieces_and_two_calls(
    make_provider: MakeProvider, server: WireServer, claude: Any
) -> None:
    first = {"expression": "(1 + 2) * 3", "note": "naïve ☀️", "nested": {"a": [1, 2, {"b": None}]}}
    message = claude.message(
        [
            claude.text("Two calls."),
            claude.tool_use("toolu_01", "calculator", first),
            claude.tool_use("toolu_02", "now", {}),
        ],
        stop_reason="tool_use",
    )
    events = claude.events(message, piece=1)  # one character of JSON per delta
    pieces = [e for e in events if e[1].get("delta", {}).get("type") == "input_json_delta"]
    assert len(pieces) > 30
    server.default = sse(events, chunk_size=7)
    deltas, final = await stream(make_provider())
    assert "".join(deltas) == "Two calls."
    calls = final.message.tool_calls
    assert [(c.id, c.name, c.arguments, c.raw_arguments) for c in calls] == [
        ("toolu_01", "calculator", first, None),
        ("toolu_02", "now", {}, None),
    ]
    assert final.finish_reason == "tool_calls"


@pytest.mark.anyio
async def test_ping_comments_and_unknown_events_are_ignored(
    make_provider: MakeProvider, server: WireServer, claude: Any
) -> None:
    message = claude.message([claude.text("Hello there")])
    events = claude.events(message, piece=5)
    noisy: list[Any] = [b": keep-alive comment\n\n"]
    for event in events:
        noisy += [event, ("ping", {"type": "ping"}), b":\n\n"]
    noisy.insert(3, ("future_event", {"type": "future_event", "x": 1}))
    server.default = sse(noisy)
    deltas, final = await stream(make_provider())
    assert "".join(deltas) == final.message.content == "Hello there"


@pytest.mark.anyio
async def test_usage_from_message_start_and_message_delta(
    make_provider: MakeProvider, server: WireServer, claude: Any
) -> None:
    usage = {
        "input_tokens": 25,
        "output_tokens": 40,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 7,
    }
    server.default = sse(claude.events(claude.message([claude.text("Hi")], usage=usage)))
    _, final = await stream(make_provider())
    assert final.usage.input_tokens == 25 + 100 + 7
    assert final.usage.output_tokens == 40  # from message_delta, not message_start's 1
    assert (final.usage.cache_read_tokens, final.usage.cache_write_tokens) == (100, 7)


@pytest.mark.anyio
async def test_cumulative_usage_in_message_delta_wins(
    make_provider: MakeProvider, server: WireServer, claude: Any
) -> None:
    events = claude.events(claude.message([claude.text("Hi")], usage={"input_tokens": 5}))
    for _, data in events:
        if data["type"] == "message_delta":
            data["usage"] = {"input_tokens": 9, "output_tokens": 3, "cache_read_input_tokens": None}
    server.default = sse(events)
    _, final = await stream(make_provider())
    assert (final.usage.input_tokens, final.usage.output_tokens) == (9, 3)


@pytest.mark.anyio
async def test_thinking_is_accumulated_not_streamed(
    make_provider: MakeProvider, server: WireServer, claude: Any
) -> None:
    thinking = claude.thinking("Step one. Step two. Step three.", signature="c2lnbmF0dXJl")
    message = claude.message([thinking, claude.text("Done.")])
    server.default = sse(claude.events(message, piece=4))
    deltas, final = await stream(make_provider())
    assert "".join(deltas) == final.message.content == "Done."
    assert "Step" not in "".join(deltas)
    assert final.message.provider_data == {"anthropic": {"content": [thinking, {"type": "text"}]}}


@pytest.mark.anyio
async def test_invalid_tool_json_becomes_raw_arguments(
    make_provider: MakeProvider, server: WireServer, claude: Any
) -> None:
    message = claude.message(
        [claude.tool_use("toolu_01", "calculator", {"x": 1})], stop_reason="max_tokens"
    )
    events = claude.events(message)
    # Cut the arguments short, as max_tokens does.
    events = [
        e
        for e in events
        if not (
            e[1].get("delta", {}).get("type") == "input_json_delta"
            and e[1]["delta"]["partial_json"] != '{"x'
        )
    ]
    server.default = sse(events)
    _, final = await stream(make_provider())
    (call,) = final.message.tool_calls
    assert (call.arguments, call.raw_arguments) == ({}, '{"x')
    assert final.finish_reason == "length"


# -- failures ----------------------------------------------------------------------------


def _with_error_after(events: list[Any], count: int, error: dict[str, Any]) -> list[Any]:
    """The first ``count`` events, then an ``error`` event (the stream ends there)."""
    return [*events[:count], ("error", error)]


@pytest.mark.anyio
async def test_overloaded_before_any_text_is_retried(
    make_provider: MakeProvider, server: WireServer, claude: Any
) -> None:
    good = claude.events(claude.message([claude.text("Hello")]))
    server.push(sse(_with_error_after(good, 2, claude.error("overloaded_error", "Overloaded"))))
    server.push(sse(good))
    deltas, final = await stream(make_provider(max_retries=2))
    assert "".join(deltas) == final.message.content == "Hello"
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_overloaded_every_time_gives_up(
    make_provider: MakeProvider, server: WireServer, claude: Any
) -> None:
    good = claude.events(claude.message([claude.text("Hello")]))
    server.default = sse(_with_error_after(good, 1, claude.error("api_error", "Internal error")))
    with pytest.raises(ProviderError) as caught:
        await stream(make_provider(max_retries=2))
    assert "api_error: Internal error" in str(caught.value)
    assert "gave up after 3 attempts" in str(caught.value)
    assert caught.value.retryable and not caught.value.emitted
    assert len(server.requests) == 3


@pytest.mark.anyio
async def test_error_after_text_was_delivered_is_not_retried(
    make_provider: MakeProvider, server: WireServer, claude: Any
) -> None:
    good = claude.events(claude.message([claude.text("Hello there, friend")], usage=None), piece=3)
    first_text = next(
        i for i, e in enumerate(good) if e[1].get("delta", {}).get("type") == "text_delta"
    )
    server.default = sse(
        _with_error_after(good, first_text + 2, claude.error("overloaded_error", "Overloaded"))
    )
    delivered: list[str] = []
    with pytest.raises(ProviderError) as caught:
        await drain(make_provider(max_retries=3), delivered)
    assert "".join(delivered) == "Hello "
    assert caught.value.emitted
    assert not caught.value.retryable
    assert "overloaded_error" in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_invalid_request_error_event_is_not_retried(
    make_provider: MakeProvider, server: WireServer, claude: Any
) -> None:
    server.default = sse([("error", claude.error("invalid_request_error", "bad thinking block"))])
    with pytest.raises(ProviderError) as caught:
        await stream(make_provider(max_retries=3))
    assert not caught.value.retryable
    assert caught.value.status == 400
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_stream_without_message_stop_fails(
    make_provider: MakeProvider, server: WireServer, claude: Any
) -> None:
    events = claude.events(claude.message([claude.text("Hi")]))
    server.default = sse(events[:-1])  # no message_stop
    with pytest.raises(ProviderError, match="ended without a final event"):
        await stream(make_provider())


@pytest.mark.anyio
async def test_connection_dropped_mid_stream(
    make_provider: MakeProvider, server: WireServer, claude: Any
) -> None:
    events = claude.events(claude.message([claude.text("Hello there")]), piece=2)
    # message_start, ping, content_block_start, "He", "ll", then the connection drops. The
    # pause before each chunk lets "He" arrive well before the reset (which may discard
    # data still in flight).
    server.default = sse(events, drop_after=5, delay=0.03)
    delivered: list[str] = []
    with pytest.raises(ProviderError) as caught:
        await drain(make_provider(max_retries=2), delivered)
    assert delivered[0] == "He"
    assert caught.value.emitted
    assert len(server.requests) == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    "bad",
    [
        b"event: content_block_delta\ndata: {not json\n\n",
        b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 7, '
        b'"delta": {"type": "text_delta", "text": "x"}}\n\n',
        b'data: {"type": "content_block_start"}\n\n',
        b"data: [1, 2]\n\n",
    ],
    ids=["invalid-json", "delta-of-unknown-block", "start-without-index", "not-an-object"],
)
async def test_malformed_events(
    make_provider: MakeProvider, server: WireServer, claude: Any, bad: bytes
) -> None:
    events = claude.events(claude.message([claude.text("Hi")]))
    server.default = sse([events[0], bad, *events[1:]])
    with pytest.raises(ProviderError) as caught:
        await stream(make_provider())
    assert str(caught.value).startswith("anthropic: ")
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_json_reply_to_a_stream_request(
    make_provider: MakeProvider, server: WireServer, claude: Any
) -> None:
    # A compatible server that ignores "stream" and answers with JSON.
    server.default = Reply.json(claude.message([claude.text("Plain JSON")]))
    deltas, final = await stream(make_provider())
    assert deltas == ["Plain JSON"]
    assert json.loads(server.requests[0].body)["stream"] is True
    assert final.message.content == "Plain JSON"
