"""Streaming: SSE chunks of Workers AI into text deltas and one final response."""

from __future__ import annotations

from collections.abc import Callable
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
from koboi_cloudflare.provider import CloudflareProvider
from koboi_testing.wire import WireServer

Make = Callable[..., CloudflareProvider]
ASK = ModelRequest(messages=[Message.user("Say something.")])
UNICODE = "héllo wörld ☀️ 日本"


async def collect(provider: CloudflareProvider) -> list[ModelStreamEvent]:
    return [event async for event in provider.stream(ASK)]


def split(events: list[ModelStreamEvent]) -> tuple[list[str], ModelResponse]:
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert isinstance(events[-1], ResponseDone)
    assert sum(isinstance(e, ResponseDone) for e in events) == 1
    return deltas, events[-1].response


def words(text: str) -> list[dict[str, Any]]:
    return [{"response": piece, "p": "pad"} for piece in text.split(" ")[:1]] + [
        {"response": " " + piece} for piece in text.split(" ")[1:]
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("chunk_size", [1, 2, 3, 5])
async def test_multibyte_text_split_across_network_chunks(
    server: WireServer, make_provider: Make, cf: Any, chunk_size: int
) -> None:
    server.push(cf.sse([*words(UNICODE), {"response": "", "usage": {}}], chunk_size=chunk_size))
    deltas, final = split(await collect(make_provider()))
    assert "".join(deltas) == final.message.content == UNICODE
    assert len(deltas) == 4
    assert final.finish_reason == "stop"


@pytest.mark.anyio
async def test_crlf_line_ends_comments_and_empty_pieces(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    events: list[Any] = [
        b": keep-alive\r\n\r\n",
        {"response": "", "p": "abcdefgh"},
        {"response": "Hi"},
        b":ping\r\n\r\n",
        {"response": ""},
        {"response": " you"},
        {"response": "", "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
    ]
    server.push(cf.sse(events, line_end="\r\n", chunk_size=4))
    deltas, final = split(await collect(make_provider()))
    assert deltas == ["Hi", " you"]  # no empty TextDelta for the empty pieces
    assert final.message.content == "Hi you"
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.requests) == (5, 2, 1)


@pytest.mark.anyio
async def test_native_tool_calls_in_a_chunk_two_calls(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    calls = [
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        {"name": "get_weather", "arguments": '{"city":"Tokyo"}'},
    ]
    server.push(cf.sse([{"response": "", "tool_calls": calls}, {"response": "", "usage": {}}]))
    server.push(cf.ok({"response": "", "tool_calls": calls}))
    provider = make_provider()
    deltas, final = split(await collect(provider))
    completed = await provider.complete(ASK)
    assert deltas == []
    assert [(c.name, c.arguments) for c in final.message.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Tokyo"}),
    ]
    assert final.finish_reason == "tool_calls"
    # The same reply gives the same ids, streamed or not.
    assert [c.id for c in final.message.tool_calls] == [c.id for c in completed.message.tool_calls]
    assert len({c.id for c in final.message.tool_calls}) == 2


@pytest.mark.anyio
async def test_tool_call_arguments_split_across_many_deltas(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    arguments = '{"city": "Paris", "note": "héllo ☀️"}'
    pieces = [arguments[i : i + 3] for i in range(0, len(arguments), 3)]
    chunks: list[Any] = [
        {"tool_calls": [{"index": 0, "id": "callA1B2C3", "function": {"name": "get_weather"}}]},
        *({"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in pieces[:4]),
        {"tool_calls": [{"index": 1, "function": {"name": "get_time", "arguments": ""}}]},
        *({"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in pieces[4:]),
        {"tool_calls": [{"index": 1, "function": {"arguments": '{"tz": "UTC"}'}}]},
        # The closing fragment some servers send: no id, name or arguments.
        {"tool_calls": [{"id": None, "type": None, "function": {"name": None}}]},
        {"response": "", "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
    ]
    server.push(cf.sse(chunks, chunk_size=5))
    deltas, final = split(await collect(make_provider()))
    first, second = final.message.tool_calls
    assert (first.id, first.name) == ("callA1B2C3", "get_weather")
    assert first.arguments == {"city": "Paris", "note": "héllo ☀️"}
    assert (second.name, second.arguments) == ("get_time", {"tz": "UTC"})
    assert second.id and second.id != first.id
    assert final.finish_reason == "tool_calls"
    assert deltas == []


@pytest.mark.anyio
async def test_openai_shaped_chunks(server: WireServer, make_provider: Make, cf: Any) -> None:
    def choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "object": "chat.completion.chunk",
            "choices": [{"delta": delta, "finish_reason": finish}],
        }

    chunks = [
        choice({"role": "assistant", "content": ""}),
        choice({"content": "Once"}),
        choice({"content": " upon"}),
        choice({}, "length"),
        {"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": 2}},
    ]
    server.push(cf.sse(chunks))
    deltas, final = split(await collect(make_provider()))
    assert deltas == ["Once", " upon"]
    assert (final.message.content, final.finish_reason) == ("Once upon", "length")
    assert final.usage.input_tokens == 8


@pytest.mark.anyio
async def test_native_length_finish_in_the_last_chunk(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    server.push(cf.sse([{"response": "Hel"}, {"response": "lo", "finish_reason": "length"}]))
    _, final = split(await collect(make_provider()))
    assert final.finish_reason == "length"


@pytest.mark.anyio
async def test_error_event_after_text_is_emitted_and_not_retried(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    server.default = cf.sse(
        [{"response": "Partial"}, {"errors": [{"code": 3040, "message": "Capacity exceeded"}]}]
    )
    seen: list[str] = []

    async def consume() -> None:
        async for event in make_provider().stream(ASK):
            if isinstance(event, TextDelta):
                seen.append(event.text)

    with pytest.raises(ProviderError) as caught:
        await consume()
    assert seen == ["Partial"]
    assert caught.value.emitted is True
    assert "Capacity exceeded (code 3040)" in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    "bad",
    [
        ("error", '{"message": "model crashed"}'),
        {"error": "model crashed"},
        {"success": False, "errors": [{"code": 1, "message": "model crashed"}]},
    ],
    ids=["error-event", "error-field", "success-false"],
)
async def test_error_before_any_text(
    server: WireServer, make_provider: Make, cf: Any, bad: Any
) -> None:
    server.default = cf.sse([bad, {"response": "never"}])
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider())
    assert "model crashed" in str(caught.value)
    assert caught.value.emitted is False
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_malformed_data_line(server: WireServer, make_provider: Make, cf: Any) -> None:
    server.default = cf.sse(['{"response": "Hi"', {"response": "x"}])
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider())
    assert "not valid JSON" in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_stream_without_done_is_an_error(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    server.default = cf.sse([{"response": "Cut"}], done=False)
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider())
    assert "[DONE]" in str(caught.value)
    assert caught.value.emitted is True
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_connection_dropped_before_any_text_is_retried(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    server.push(cf.sse([{"response": ""}, {"response": "lost"}], drop_after=1))
    server.push(cf.sse([{"response": "Hello"}]))
    deltas, final = split(await collect(make_provider()))
    assert deltas == ["Hello"] and final.message.content == "Hello"
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_json_answer_to_a_stream_request(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    # Some models answer stream: true with one JSON body (JSON mode does not stream).
    server.push(cf.ok({"response": {"answer": 42}}))
    deltas, final = split(await collect(make_provider()))
    assert deltas == ['{"answer": 42}'] == [final.message.content]


@pytest.mark.anyio
async def test_http_error_status_on_a_stream(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    server.push(cf.failure(7003, "No route for that URI", status=404))
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider())
    assert "HTTP 404" in str(caught.value) and "No route for that URI" in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_the_token_is_redacted_from_stream_errors(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    server.default = cf.sse([{"error": f"bad token {cf.token} for this account"}])
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider())
    assert cf.token not in str(caught.value)
    assert "bad token *** for this account" in str(caught.value)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (("error", "upstream went away"), "the stream reported an error: upstream went away"),
        ('"just a string"', "not a JSON object"),
        ("[1, 2]", "not a JSON object"),
    ],
    ids=["error-event-plain-text", "string-chunk", "array-chunk"],
)
async def test_odd_events(
    server: WireServer, make_provider: Make, cf: Any, event: Any, expected: str
) -> None:
    server.default = cf.sse([event])
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider())
    assert expected in str(caught.value)
