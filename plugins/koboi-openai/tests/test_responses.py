"""Reading non-streamed replies: tool calls, usage, finish reasons, odd servers."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from koboi.errors import ProviderError
from koboi.messages import Message, ModelRequest, ModelResponse, ToolCall, Usage
from koboi.messages import decode_tool_arguments as decode_arguments
from koboi_openai.provider import OpenAIProvider
from koboi_openai.wire import arguments_to_wire, finish_from_wire
from koboi_testing.wire import Reply, WireServer

Maker = Callable[..., OpenAIProvider]
ASK = ModelRequest(messages=[Message.user("Weather in Paris and Tokyo?")])


async def _complete(server: WireServer, make_provider: Maker, reply: Reply) -> ModelResponse:
    server.default = reply
    return await make_provider(max_retries=0).complete(ASK)


@pytest.mark.anyio
async def test_several_tool_calls_in_one_turn(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    calls = [
        wire.call("call_a", "get_weather", {"city": "Paris"}),
        wire.call("call_b", "get_weather", {"city": "東京"}),
        wire.call("call_c", "get_time", {}),
    ]
    response = await _complete(
        server, make_provider, Reply.json(wire.completion("Checking.", tool_calls=calls))
    )
    assert response.message.content == "Checking."
    assert response.message.tool_calls == (
        ToolCall(id="call_a", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_b", name="get_weather", arguments={"city": "東京"}),
        ToolCall(id="call_c", name="get_time", arguments={}),
    )
    assert response.finish_reason == "tool_calls"
    assert response.model == "gpt-4o-mini-2024-07-18"


@pytest.mark.anyio
@pytest.mark.parametrize("text", ['{"city": "Par', "[1, 2]", '"Paris"', "null", "not json at all"])
async def test_arguments_that_are_not_a_json_object_are_kept_raw(
    server: WireServer, make_provider: Maker, wire: Any, text: str
) -> None:
    calls = [wire.call("call_x", "get_weather", text)]
    response = await _complete(
        server, make_provider, Reply.json(wire.completion(None, tool_calls=calls))
    )
    (call,) = response.message.tool_calls
    assert call.arguments == {}
    assert call.raw_arguments == text
    assert call.id == "call_x"


@pytest.mark.anyio
async def test_a_call_without_an_id_gets_one_and_empty_arguments_are_none(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    calls = [
        {"type": "function", "function": {"name": "get_time", "arguments": ""}},
        {"id": "", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    ]
    response = await _complete(
        server, make_provider, Reply.json(wire.completion(None, tool_calls=calls))
    )
    first, second = response.message.tool_calls
    assert first.id and second.id and first.id != second.id
    assert first.arguments == second.arguments == {}
    assert first.raw_arguments is None


@pytest.mark.anyio
async def test_arguments_sent_as_an_object_are_accepted(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]
    response = await _complete(
        server, make_provider, Reply.json(wire.completion(None, tool_calls=calls))
    )
    assert response.message.tool_calls[0].arguments == {"a": 1}


@pytest.mark.anyio
async def test_the_legacy_function_call_is_a_tool_call(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    body = wire.completion(None, finish="function_call")
    body["choices"][0]["message"]["function_call"] = {
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    }
    response = await _complete(server, make_provider, Reply.json(body))
    (call,) = response.message.tool_calls
    assert (call.name, call.arguments) == ("get_weather", {"city": "Oslo"})
    assert call.id
    assert response.finish_reason == "tool_calls"


@pytest.mark.anyio
async def test_usage_is_mapped_field_by_field(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    usage = wire.usage(1200, 340, cached=1024, reasoning=192)
    response = await _complete(
        server, make_provider, Reply.json(wire.completion("hi", usage=usage))
    )
    assert response.usage == Usage(
        input_tokens=1200,
        output_tokens=340,
        reasoning_tokens=192,
        cache_read_tokens=1024,
        cache_write_tokens=0,
        requests=1,
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    "usage",
    [
        None,
        False,
        {"prompt_tokens": 5},
        {"prompt_tokens": None, "completion_tokens": "7", "completion_tokens_details": None},
    ],
)
async def test_missing_usage_counts_zero_and_one_request(
    server: WireServer, make_provider: Maker, wire: Any, usage: Any
) -> None:
    body = wire.completion("hi", usage=usage if isinstance(usage, dict) else False)
    if usage is None:
        body["usage"] = None
    response = await _complete(server, make_provider, Reply.json(body))
    expected_input = 5 if isinstance(usage, dict) and usage.get("prompt_tokens") == 5 else 0
    assert response.usage == Usage(input_tokens=expected_input, requests=1)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("reason", "with_calls", "expected"),
    [
        ("stop", False, "stop"),
        ("length", False, "length"),
        ("content_filter", False, "content_filter"),
        ("tool_calls", True, "tool_calls"),
        ("function_call", True, "tool_calls"),
        ("something_new", False, "stop"),
        (None, False, "stop"),
        # Ollama says "stop" beside tool calls.
        ("stop", True, "tool_calls"),
        ("something_new", True, "tool_calls"),
        ("length", True, "length"),
    ],
)
async def test_finish_reasons(
    server: WireServer,
    make_provider: Maker,
    wire: Any,
    reason: str | None,
    with_calls: bool,
    expected: str,
) -> None:
    calls = [wire.call("c1", "f", {})] if with_calls else []
    body = wire.completion("x", tool_calls=calls)
    body["choices"][0]["finish_reason"] = reason
    response = await _complete(server, make_provider, Reply.json(body))
    assert response.finish_reason == expected


@pytest.mark.anyio
async def test_a_refusal_is_shown_as_the_reply(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    body = wire.completion(None)
    body["choices"][0]["message"]["refusal"] = "I can't help with that."
    response = await _complete(server, make_provider, Reply.json(body))
    assert response.message.content == "I can't help with that."


@pytest.mark.anyio
async def test_content_as_a_list_of_text_parts(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    body = wire.completion(None)
    body["choices"][0]["message"]["content"] = [
        {"type": "text", "text": "Hello "},
        {"type": "text", "text": "there"},
    ]
    response = await _complete(server, make_provider, Reply.json(body))
    assert response.message.content == "Hello there"


@pytest.mark.anyio
async def test_an_error_envelope_in_a_200_reply_is_a_provider_error(
    server: WireServer, make_provider: Maker, wire: Any, secret: str
) -> None:
    reply = Reply.json(wire.error(f"bad things with key {secret}", "invalid_request_error", "bad"))
    with pytest.raises(ProviderError) as caught:
        await _complete(server, make_provider, reply)
    message = str(caught.value)
    assert "bad things" in message
    assert "invalid_request_error" in message and "code: bad" in message
    assert secret not in message
    assert len(server.requests) == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ('{"id": "chatcmpl-1", "choices": [', "not valid JSON"),
        ("<html>Bad gateway</html>", "not valid JSON"),
        ('{"id": "chatcmpl-1", "choices": []}', "no choices"),
        ('{"id": "chatcmpl-1"}', "no choices"),
        ("[1, 2, 3]", "not a chat completion"),
    ],
)
async def test_malformed_replies_are_clear_provider_errors(
    server: WireServer, make_provider: Maker, raw: str, says: str
) -> None:
    with pytest.raises(ProviderError, match=says):
        await _complete(server, make_provider, Reply.raw(raw))


# -- pure translation --------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(st.dictionaries(st.text(), JSON_VALUES, max_size=5))
def test_arguments_round_trip_through_the_wire(arguments: dict[str, Any]) -> None:
    call = ToolCall(id="c", name="f", arguments=arguments)
    assert decode_arguments(arguments_to_wire(call)) == (arguments, None)


@given(st.text())
def test_decoding_never_fails_and_keeps_what_it_cannot_use(text: str) -> None:
    arguments, raw = decode_arguments(text)
    if raw is None:
        assert arguments == (json.loads(text) if text.strip() else {})
    else:
        assert (arguments, raw) == ({}, text)


def test_a_repeated_key_is_kept_raw_so_the_loop_refuses_it() -> None:
    text = '{"path": "notes.txt", "path": "/etc/passwd"}'
    assert decode_arguments(text) == ({}, text)
    nested = '{"options": {"mode": "r", "mode": "w"}}'
    assert decode_arguments(nested) == ({}, nested)
    # Control: the same keys once each decode normally.
    assert decode_arguments('{"path": "notes.txt"}') == ({"path": "notes.txt"}, None)


@given(st.one_of(st.none(), st.text(), st.integers()), st.booleans())
def test_finish_reason_is_always_a_koboi_reason(reason: Any, has_calls: bool) -> None:
    assert finish_from_wire(reason, has_tool_calls=has_calls) in {
        "stop",
        "tool_calls",
        "length",
        "content_filter",
    }
