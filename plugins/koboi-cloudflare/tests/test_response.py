"""Reading whole (non-streamed) replies: native and OpenAI shapes, ids, usage, errors."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from koboi.errors import ProviderError
from koboi.messages import Message, ModelRequest, ModelResponse
from koboi_cloudflare.provider import CloudflareProvider
from koboi_testing.wire import Reply, WireServer

Make = Callable[..., CloudflareProvider]
ASK = ModelRequest(messages=[Message.user("What is the weather in Paris and Tokyo?")])


async def complete(server: WireServer, make: Make, reply: Reply) -> ModelResponse:
    server.push(reply)
    return await make().complete(ASK)


@pytest.mark.anyio
async def test_native_tool_calls_with_object_and_string_arguments(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    result = {
        "response": "",
        "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "Paris"}},
            {"name": "get_weather", "arguments": '{"city": "Tokyo"}'},
            {"name": "get_time", "arguments": ""},
            {"name": "get_weather", "parameters": {"city": "Oslo"}},
        ],
        "usage": {"prompt_tokens": 30.0, "completion_tokens": 12, "total_tokens": 42},
    }
    response = await complete(server, make_provider, cf.ok(result))
    calls = response.message.tool_calls
    assert [(c.name, c.arguments, c.raw_arguments) for c in calls] == [
        ("get_weather", {"city": "Paris"}, None),
        ("get_weather", {"city": "Tokyo"}, None),
        ("get_time", {}, None),
        ("get_weather", {"city": "Oslo"}, None),
    ]
    ids = [c.id for c in calls]
    assert len(set(ids)) == 4
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in ids), ids
    assert response.finish_reason == "tool_calls"
    assert response.message.content == ""
    assert (response.usage.input_tokens, response.usage.output_tokens) == (30, 12)
    assert response.usage.requests == 1
    assert response.model == cf.model


@pytest.mark.anyio
async def test_generated_ids_are_stable_for_the_same_reply_and_differ_for_another(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    same = {"response": "", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    other = {"response": "", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Rome"}}]}
    first = await complete(server, make_provider, cf.ok(same))
    again = await complete(server, make_provider, cf.ok(same))
    different = await complete(server, make_provider, cf.ok(other))
    assert first.message.tool_calls[0].id == again.message.tool_calls[0].id
    assert first.message.tool_calls[0].id != different.message.tool_calls[0].id


@pytest.mark.anyio
async def test_identical_calls_in_one_reply_get_distinct_ids(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    call = {"name": "get_weather", "arguments": {"city": "Paris"}}
    dup = {"id": "same_id", "name": "get_weather", "arguments": {"city": "Rome"}}
    response = await complete(
        server, make_provider, cf.ok({"response": "", "tool_calls": [call, call, dup, dup]})
    )
    ids = [c.id for c in response.message.tool_calls]
    assert len(set(ids)) == 4
    assert ids[2] == "same_id"  # an id the model gave is kept


@pytest.mark.anyio
async def test_openai_shaped_result(server: WireServer, make_provider: Make, cf: Any) -> None:
    result = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "@cf/openai/gpt-oss-20b",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "chatcmpl-tool-8c1f0e2b9a",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": 20,
            "completion_tokens": 9,
            "total_tokens": 29,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 3},
        },
    }
    response = await complete(server, make_provider, cf.ok(result))
    (call,) = response.message.tool_calls
    assert (call.id, call.name, call.arguments) == (
        "chatcmpl-tool-8c1f0e2b9a",
        "get_weather",
        {"city": "Paris"},
    )
    assert response.finish_reason == "tool_calls"
    assert response.model == "@cf/openai/gpt-oss-20b"
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (20, 9, 4)
    assert usage.reasoning_tokens == 3


@pytest.mark.anyio
async def test_openai_shaped_text_cut_by_the_limit(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    result = {"choices": [{"message": {"content": "Once upon"}, "finish_reason": "length"}]}
    response = await complete(server, make_provider, cf.ok(result))
    assert (response.message.content, response.finish_reason) == ("Once upon", "length")
    assert response.usage.requests == 1


@pytest.mark.anyio
async def test_arguments_that_are_not_a_json_object_are_kept_raw(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    result = {
        "response": "",
        "tool_calls": [
            {"name": "get_weather", "arguments": '{"city": "Par'},
            {"name": "get_weather", "arguments": "[1, 2]"},
        ],
    }
    response = await complete(server, make_provider, cf.ok(result))
    first, second = response.message.tool_calls
    assert (first.arguments, first.raw_arguments) == ({}, '{"city": "Par')
    assert (second.arguments, second.raw_arguments) == ({}, "[1, 2]")


@pytest.mark.anyio
async def test_success_false_in_a_200_reply_is_a_provider_error(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    body = {"result": None, "success": False, "errors": [{"code": 5006, "message": "bad input"}]}
    with pytest.raises(ProviderError) as caught:
        await complete(server, make_provider, Reply.json(body))
    assert "bad input (code 5006)" in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_error_envelope_of_a_400_names_the_message_and_code(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    reply = cf.failure(5021, "The estimated number of input and output tokens exceeds the limit")
    with pytest.raises(ProviderError) as caught:
        await complete(server, make_provider, reply)
    error = caught.value
    assert error.status == 400
    assert "HTTP 400" in str(error)
    assert "exceeds the limit (code 5021)" in str(error)
    assert cf.token not in str(error)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply.raw(b"<html>oops</html>", status=200), "not valid JSON"),
        (Reply.json([1, 2, 3]), "not a JSON object"),
        (Reply.json({"result": None, "success": True, "errors": []}), "no result object"),
        (
            Reply.json({"result": {"response": "", "tool_calls": [{"arguments": {"a": 1}}]}}),
            "without a tool name",
        ),
        (Reply.json({"result": {"response": "", "tool_calls": {"x": 1}}}), "not a list"),
    ],
    ids=["html", "array", "null-result", "nameless-call", "calls-not-a-list"],
)
async def test_malformed_replies_are_clear_provider_errors(
    server: WireServer, make_provider: Make, reply: Reply, expected: str
) -> None:
    with pytest.raises(ProviderError) as caught:
        await complete(server, make_provider, reply)
    assert expected in str(caught.value)
    assert caught.value.retryable is False


@pytest.mark.anyio
async def test_a_bare_result_without_the_envelope_is_read(
    server: WireServer, make_provider: Make
) -> None:
    response = await complete(server, make_provider, Reply.json({"response": "plain"}))
    assert response.message.content == "plain"
    assert response.finish_reason == "stop"
