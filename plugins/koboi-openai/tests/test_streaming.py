"""Streamed replies: SSE framing, text and tool-call reassembly, usage, errors mid-stream."""

from __future__ import annotations

import json
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
    ToolCall,
    Usage,
)
from koboi_openai.provider import OpenAIProvider
from koboi_testing.wire import Reply, WireServer

Maker = Callable[..., OpenAIProvider]
ASK = ModelRequest(messages=[Message.user("Say something.")])
UNICODE = "héllo wörld ☀️ 日本"


async def _stream(provider: OpenAIProvider) -> list[ModelStreamEvent]:
    return [event async for event in provider.stream(ASK)]


def _final(events: list[ModelStreamEvent]) -> ModelResponse:
    assert isinstance(events[-1], ResponseDone)
    assert sum(isinstance(e, ResponseDone) for e in events) == 1
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert all(d.text for d in deltas), "no empty TextDeltas"
    assert "".join(d.text for d in deltas) == events[-1].response.message.content
    return events[-1].response


@pytest.mark.anyio
@pytest.mark.parametrize("chunk_size", [1, 2, 3, 5])
@pytest.mark.parametrize("line_end", ["\n", "\r\n"])
async def test_multibyte_text_split_anywhere_arrives_whole(
    server: WireServer, make_provider: Maker, wire: Any, chunk_size: int, line_end: str
) -> None:
    pieces = ["hé", "llo wö", "rld ☀", "️ 日", "本"]
    assert "".join(pieces) == UNICODE
    server.default = Reply.sse(
        wire.text_chunks(pieces, usage=wire.usage(3, 5)), chunk_size=chunk_size, line_end=line_end
    )
    events = await _stream(make_provider())
    response = _final(events)
    assert response.message.content == UNICODE
    assert [e.text for e in events if isinstance(e, TextDelta)] == pieces
    assert response.usage == Usage(input_tokens=3, output_tokens=5, requests=1)
    assert response.finish_reason == "stop"
    assert response.model == "gpt-4o-mini-2024-07-18"


@pytest.mark.anyio
async def test_comments_pings_and_null_content_are_skipped(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    events = [
        b": OPENROUTER PROCESSING\n\n",
        wire.chunk({"role": "assistant", "content": None}),
        b":ping\r\n\r\n",
        wire.chunk({"content": ""}),
        wire.chunk({"content": "Hi"}),
        wire.chunk({"content": None}),
        b"\n\n",
        wire.chunk({"content": "!"}),
        wire.chunk({}, finish="stop"),
        "[DONE]",
    ]
    server.default = Reply.sse(events)
    stream = await _stream(make_provider())
    assert [e.text for e in stream if isinstance(e, TextDelta)] == ["Hi", "!"]
    assert _final(stream).message.content == "Hi!"


@pytest.mark.anyio
@pytest.mark.parametrize("chunk_size", [None, 4])
async def test_tool_call_arguments_in_many_pieces_are_reassembled_per_index(
    server: WireServer, make_provider: Maker, wire: Any, chunk_size: int | None
) -> None:
    paris = json.dumps({"city": "Paris", "units": "°C", "days": [1, 2]}, ensure_ascii=False)
    tokyo = json.dumps({"city": "東京"}, ensure_ascii=False)
    events = wire.tool_chunks(
        [("call_p", "get_weather", paris), ("call_t", "get_weather", tokyo)],
        piece=1,
        text=["Let me ", "check."],
        usage=wire.usage(40, 30),
    )
    server.default = Reply.sse(events, chunk_size=chunk_size)
    stream = await _stream(make_provider())
    response = _final(stream)
    assert response.message.content == "Let me check."
    assert response.message.tool_calls == (
        ToolCall(id="call_p", name="get_weather", arguments=json.loads(paris)),
        ToolCall(id="call_t", name="get_weather", arguments={"city": "東京"}),
    )
    assert response.finish_reason == "tool_calls"
    assert response.usage.input_tokens == 40


@pytest.mark.anyio
async def test_interleaved_tool_call_deltas_are_kept_apart(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    def delta(index: int, **function: str) -> dict[str, Any]:
        return {"tool_calls": [{"index": index, "function": function}]}

    events = [
        wire.chunk({"role": "assistant", "content": None}),
        wire.chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "c0",
                        "type": "function",
                        "function": {"name": "a", "arguments": '{"x"'},
                    },
                    {
                        "index": 1,
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "b", "arguments": ""},
                    },
                ]
            }
        ),
        wire.chunk(delta(1, arguments='{"y": ')),
        wire.chunk(delta(0, arguments=": 1}")),
        wire.chunk(delta(1, arguments="2}")),
        wire.chunk({}, finish="tool_calls"),
        "[DONE]",
    ]
    server.default = Reply.sse(events)
    response = _final(await _stream(make_provider()))
    assert [(c.id, c.name, c.arguments) for c in response.message.tool_calls] == [
        ("c0", "a", {"x": 1}),
        ("c1", "b", {"y": 2}),
    ]


@pytest.mark.anyio
async def test_broken_streamed_arguments_are_kept_raw(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.sse(wire.tool_chunks([("c1", "get_weather", '{"city": "Par')]))
    (call,) = _final(await _stream(make_provider())).message.tool_calls
    assert call.arguments == {}
    assert call.raw_arguments == '{"city": "Par'


@pytest.mark.anyio
async def test_whole_calls_without_index_or_id_as_some_servers_send_them(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    whole = [
        {"type": "function", "function": {"name": "a", "arguments": '{"n": 1}'}},
        {"type": "function", "function": {"name": "b", "arguments": '{"n": 2}'}},
    ]
    server.default = Reply.sse(
        [
            wire.chunk({"role": "assistant", "tool_calls": whole}),
            wire.chunk({}, finish="stop"),
            "[DONE]",
        ]
    )
    response = _final(await _stream(make_provider()))
    calls = response.message.tool_calls
    assert [(c.name, c.arguments) for c in calls] == [("a", {"n": 1}), ("b", {"n": 2})]
    assert calls[0].id and calls[1].id and calls[0].id != calls[1].id
    assert response.finish_reason == "tool_calls"


@pytest.mark.anyio
async def test_calls_that_all_say_index_0_but_have_their_own_ids(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    def first(call_id: str, name: str) -> dict[str, Any]:
        return {
            "tool_calls": [{"index": 0, "id": call_id, "function": {"name": name, "arguments": ""}}]
        }

    def more(arguments: str) -> dict[str, Any]:
        return {"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}

    events = [
        wire.chunk(first("c1", "a")),
        wire.chunk(more('{"n":')),
        wire.chunk(more("1}")),
        wire.chunk(first("c2", "b")),
        wire.chunk(more('{"n":2}')),
        wire.chunk({}, finish="tool_calls"),
        "[DONE]",
    ]
    server.default = Reply.sse(events)
    calls = _final(await _stream(make_provider())).message.tool_calls
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("c1", "a", {"n": 1}),
        ("c2", "b", {"n": 2}),
    ]


@pytest.mark.anyio
async def test_usage_on_the_last_choice_chunk(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    events = [
        wire.chunk({"role": "assistant", "content": "Hi"}),
        wire.chunk({}, finish="stop", usage=wire.usage(9, 2, cached=4)),
        "[DONE]",
    ]
    server.default = Reply.sse(events)
    response = _final(await _stream(make_provider()))
    assert response.usage == Usage(input_tokens=9, output_tokens=2, cache_read_tokens=4, requests=1)


@pytest.mark.anyio
async def test_no_usage_at_all_counts_zero(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.sse(wire.text_chunks(["Hi"]))
    response = _final(await _stream(make_provider(stream_usage=False)))
    assert response.usage == Usage(requests=1)


@pytest.mark.anyio
async def test_a_stream_that_ends_after_its_finish_reason_without_done(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.sse(wire.text_chunks(["Hi"], done=False))
    response = _final(await _stream(make_provider()))
    assert response.message.content == "Hi"


@pytest.mark.anyio
async def test_a_stream_cut_before_its_finish_reason_fails(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.sse([wire.chunk({"role": "assistant", "content": ""})])
    with pytest.raises(ProviderError, match="without a final event"):
        await _stream(make_provider(max_retries=0))


@pytest.mark.anyio
async def test_an_error_event_before_any_text_is_retried_when_transient(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.push(
        Reply.sse(
            [
                wire.chunk({"role": "assistant", "content": ""}),
                wire.error(
                    "The server had an error while processing your request.", "server_error"
                ),
            ]
        ),
        Reply.sse(wire.text_chunks(["Recovered"])),
    )
    events = await _stream(make_provider())
    assert _final(events).message.content == "Recovered"
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_an_error_event_that_is_not_transient_is_raised_at_once(
    server: WireServer, make_provider: Maker, wire: Any, secret: str
) -> None:
    server.default = Reply.sse(
        [wire.error(f"Invalid prompt (key {secret})", "invalid_request_error", "invalid_prompt")]
    )
    with pytest.raises(ProviderError) as caught:
        await _stream(make_provider())
    message = str(caught.value)
    assert "Invalid prompt" in message and "invalid_prompt" in message
    assert secret not in message
    assert caught.value.emitted is False
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_an_error_event_after_text_was_delivered_is_not_retried(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.sse(
        [
            wire.chunk({"role": "assistant", "content": "Once upon"}),
            wire.chunk({"content": " a time"}),
            wire.error("The server had an error", "server_error"),
        ]
    )
    seen: list[str] = []

    async def consume() -> None:
        async for event in make_provider().stream(ASK):
            if isinstance(event, TextDelta):
                seen.append(event.text)

    with pytest.raises(ProviderError) as caught:
        await consume()
    assert seen == ["Once upon", " a time"]
    assert caught.value.emitted is True
    assert caught.value.retryable is False
    assert "server had an error" in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_a_named_error_event(server: WireServer, make_provider: Maker) -> None:
    server.default = Reply.sse([("error", {"message": "model overloaded", "type": "invalid"})])
    with pytest.raises(ProviderError, match="model overloaded"):
        await _stream(make_provider(max_retries=0))


@pytest.mark.anyio
async def test_a_malformed_data_line_is_a_clear_provider_error(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.sse(
        [wire.chunk({"role": "assistant", "content": ""}), b'data: {"choices": [{"delta": \n\n']
    )
    with pytest.raises(ProviderError, match="not valid JSON"):
        await _stream(make_provider(max_retries=0))
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_a_server_that_ignores_stream_and_answers_json(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.json(wire.completion("Plain JSON", usage=wire.usage(2, 2)))
    response = _final(await _stream(make_provider()))
    assert response.message.content == "Plain JSON"
    assert response.usage.output_tokens == 2


@pytest.mark.anyio
async def test_a_streamed_refusal_is_delivered_as_text(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    events = [
        wire.chunk({"role": "assistant", "content": None, "refusal": ""}),
        wire.chunk({"refusal": "I can't "}),
        wire.chunk({"refusal": "help with that."}),
        wire.chunk({}, finish="stop"),
        "[DONE]",
    ]
    server.default = Reply.sse(events)
    assert _final(await _stream(make_provider())).message.content == "I can't help with that."
