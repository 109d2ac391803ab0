"""What goes on the wire: URL, headers and the exact JSON body."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from koboi.messages import Message, ModelRequest, ToolCall, ToolSpec
from koboi_cloudflare.provider import CloudflareProvider
from koboi_cloudflare.wire_format import wire_call_id
from koboi_testing.wire import WireServer

CALC = ToolSpec(
    name="calculator",
    description="Evaluate arithmetic.",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "e.g. 2 + 2"}},
        "required": ["expression"],
    },
)

Make = Callable[..., CloudflareProvider]


@pytest.mark.anyio
async def test_url_keeps_the_model_path_and_the_at_sign(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    server.default = cf.ok({"response": "hi"})
    await make_provider().complete(ModelRequest(messages=[Message.user("hi")]))
    (received,) = server.requests
    assert received.method == "POST"
    # Not "%40cf%2Fmeta%2F...": Cloudflare routes on the literal path.
    assert (
        received.path
        == f"/client/v4/accounts/{cf.account}/ai/run/@cf/meta/llama-3.3-70b-instruct-fp8-fast"
    )
    assert received.headers["authorization"] == f"Bearer {cf.token}"
    assert received.headers["content-type"] == "application/json"


@pytest.mark.anyio
async def test_other_model_families_and_base_url_with_trailing_slash(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    server.default = cf.ok({"response": "hi"})
    provider = make_provider(
        model="@hf/nousresearch/hermes-2-pro-mistral-7b", base_url=server.url + "/client/v4/"
    )
    await provider.complete(ModelRequest(messages=[Message.user("hi")]))
    assert server.requests[0].path == (
        f"/client/v4/accounts/{cf.account}/ai/run/@hf/nousresearch/hermes-2-pro-mistral-7b"
    )


@pytest.mark.anyio
async def test_body_of_a_conversation_with_tool_calls_and_results(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    server.default = cf.ok({"response": "Done."})
    ok = ToolCall(id="Ab3dE6gH9", name="calculator", arguments={"expression": "6 * 7"})
    bad = ToolCall(id="call_1", name="calculator", arguments={"expression": "1/0"})
    request = ModelRequest(
        messages=[
            Message.system("Use the calculator."),
            Message.user("What are 6 * 7 and 1/0? ☀️"),
            Message.assistant("Let me compute.", tool_calls=(ok, bad)),
            Message.tool_result(ok, "42"),
            Message.tool_result(bad, "division by zero", is_error=True),
            Message.user("Thanks."),
        ],
        tools=[CALC],
    )
    await make_provider().complete(request)
    body = server.requests[0].json()
    stand_in = wire_call_id("call_1")
    assert re.fullmatch(r"[A-Za-z0-9]{9}", stand_in)
    assert body == {
        "messages": [
            {"role": "system", "content": "Use the calculator."},
            {"role": "user", "content": "What are 6 * 7 and 1/0? ☀️"},
            {
                "role": "assistant",
                "content": "Let me compute.",
                "tool_calls": [
                    {
                        "id": "Ab3dE6gH9",
                        "type": "function",
                        "function": {"name": "calculator", "arguments": '{"expression":"6 * 7"}'},
                    },
                    {
                        "id": stand_in,
                        "type": "function",
                        "function": {"name": "calculator", "arguments": '{"expression":"1/0"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "Ab3dE6gH9", "content": "42", "name": "calculator"},
            {
                "role": "tool",
                "tool_call_id": stand_in,
                "content": "Error: division by zero",
                "name": "calculator",
            },
            {"role": "user", "content": "Thanks."},
        ],
        "tools": [
            {
                "name": "calculator",
                "description": "Evaluate arithmetic.",
                "parameters": CALC.parameters,
            }
        ],
        "stream": False,
    }
    # The raw body is UTF-8 JSON, not \\u escapes the server would have to undo.
    assert "☀️".encode() in server.requests[0].body


@pytest.mark.anyio
async def test_an_assistant_turn_with_only_tool_calls_shows_them_in_content(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    server.default = cf.ok({"response": "ok"})
    call = ToolCall(id="Zz9Yy8Xx7", name="calculator", arguments={"expression": "2+2"})
    raw = ToolCall(id="Qq1Ww2Ee3", name="calculator", raw_arguments="{not json")
    request = ModelRequest(
        messages=[
            Message.user("2+2?"),
            Message.assistant(tool_calls=(call,)),
            Message.tool_result(call, "4"),
            Message.assistant(tool_calls=(raw,)),
        ]
    )
    await make_provider().complete(request)
    sent = server.requests[0].json()["messages"]
    assert json.loads(sent[1]["content"]) == {
        "name": "calculator",
        "parameters": {"expression": "2+2"},
    }
    # Arguments the model could not write as JSON go back exactly as it wrote them.
    assert sent[3]["tool_calls"][0]["function"]["arguments"] == "{not json"
    assert "tools" not in server.requests[0].json()


@pytest.mark.anyio
async def test_options_are_forwarded_and_request_options_win(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    server.default = cf.ok({"response": "ok"})
    provider = make_provider(
        options={
            "temperature": 0.2,
            "top_p": 0.9,
            "top_k": 40,
            "seed": 7,
            "max_tokens": 512,
            "repetition_penalty": 1.1,
            "lora": "my-adapter",
        }
    )
    request = ModelRequest(
        messages=[Message.user("hi")],
        options={"temperature": 0.7, "max_tokens": 64, "frequency_penalty": 0.5},
    )
    await provider.complete(request)
    body = server.requests[0].json()
    assert {k: v for k, v in body.items() if k not in ("messages", "stream")} == {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 40,
        "seed": 7,
        "max_tokens": 64,
        "repetition_penalty": 1.1,
        "lora": "my-adapter",
        "frequency_penalty": 0.5,
    }


@pytest.mark.anyio
async def test_request_options_cannot_replace_what_the_provider_writes(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    server.default = cf.ok({"response": "ok"})
    request = ModelRequest(
        messages=[Message.user("hi")],
        options={"stream": True, "messages": [], "prompt": "x", "tools": [{"name": "evil"}]},
    )
    await make_provider().complete(request)
    body = server.requests[0].json()
    assert body == {"messages": [{"role": "user", "content": "hi"}], "stream": False}


@pytest.mark.anyio
async def test_response_format_is_forwarded_as_is(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "capital": {"type": "string"}},
        "required": ["name", "capital"],
    }
    response_format = {"type": "json_schema", "json_schema": schema}
    # JSON mode answers with an object in "response", not a string.
    server.default = cf.ok({"response": {"name": "India", "capital": "New Delhi"}})
    provider = make_provider(options={"response_format": {"type": "json_object"}})
    response = await provider.complete(
        ModelRequest(messages=[Message.user("India?")], response_format=response_format)
    )
    assert server.requests[0].json()["response_format"] == response_format
    assert json.loads(response.message.content) == {"name": "India", "capital": "New Delhi"}


@pytest.mark.anyio
async def test_streaming_requests_say_stream_true(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    server.default = cf.sse([{"response": "hi"}])
    events = [e async for e in make_provider().stream(ModelRequest(messages=[Message.user("x")]))]
    assert events[-1].kind == "done"
    assert server.requests[0].json()["stream"] is True
