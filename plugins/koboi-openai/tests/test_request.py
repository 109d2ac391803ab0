"""What goes on the wire: the exact JSON body, the path and the headers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from koboi.errors import ProviderError
from koboi.messages import Message, ModelRequest, ToolCall, ToolSpec
from koboi_openai.provider import OpenAIProvider
from koboi_testing.wire import Reply, WireServer

Maker = Callable[..., OpenAIProvider]

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather in a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
PARIS_CALL = ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris ☀️"})
BAD_CALL = ToolCall(id="call_2", name="get_weather", raw_arguments='{"city": "Nowh')

HISTORY = [
    Message.system("You are terse."),
    Message.user("Weather in Paris? ☀️"),
    Message.assistant("Let me check.", tool_calls=(PARIS_CALL, BAD_CALL)),
    Message.tool_result(PARIS_CALL, "sunny, 21 °C"),
    Message.tool_result(BAD_CALL, "arguments are not valid JSON", is_error=True),
    Message.system("Answer in one line."),
    Message.assistant("It is sunny."),
    Message.user("Thanks!"),
]

EXPECTED_MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris? ☀️"},
    {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris ☀️"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                # What the model sent, sent back as it was.
                "function": {"name": "get_weather", "arguments": '{"city": "Nowh'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 °C"},
    {"role": "tool", "tool_call_id": "call_2", "content": "Error: arguments are not valid JSON"},
    {"role": "system", "content": "Answer in one line."},
    {"role": "assistant", "content": "It is sunny."},
    {"role": "user", "content": "Thanks!"},
]


@pytest.mark.anyio
async def test_the_whole_body_of_a_plain_call(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.json(wire.completion("ok"))
    provider = make_provider(options={"temperature": 0.2, "seed": 7, "max_tokens": 50})
    await provider.complete(ModelRequest(messages=HISTORY, tools=[WEATHER]))
    (received,) = server.requests
    assert received.method == "POST"
    assert received.path == "/v1/chat/completions"
    assert received.headers["content-type"] == "application/json"
    assert received.json() == {
        "model": "gpt-4o-mini",
        "messages": EXPECTED_MESSAGES,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather in a city.",
                    "parameters": WEATHER.parameters,
                },
            }
        ],
        "temperature": 0.2,
        "seed": 7,
        "max_tokens": 50,
    }


@pytest.mark.anyio
async def test_streaming_asks_for_usage_in_the_last_chunk(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.sse(wire.text_chunks(["ok"]))
    provider = make_provider()
    [_ async for _ in provider.stream(ModelRequest(messages=[Message.user("hi")]))]
    body = server.requests[0].json()
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert "tools" not in body  # no tools: no empty list some servers reject


@pytest.mark.anyio
async def test_stream_usage_can_be_switched_off(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.sse(wire.text_chunks(["ok"]))
    provider = make_provider(stream_usage=False)
    [_ async for _ in provider.stream(ModelRequest(messages=[Message.user("hi")]))]
    body = server.requests[0].json()
    assert body["stream"] is True
    assert "stream_options" not in body


@pytest.mark.anyio
async def test_a_plain_call_sends_no_stream_keys(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.json(wire.completion("ok"))
    await make_provider().complete(ModelRequest(messages=[Message.user("hi")]))
    body = server.requests[0].json()
    # stream_options without stream: true is a 400 at OpenAI.
    assert "stream" not in body and "stream_options" not in body


@pytest.mark.anyio
async def test_request_options_override_configured_ones(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.json(wire.completion("ok"))
    provider = make_provider(
        options={"temperature": 0.2, "top_p": 0.9, "stop": ["\n\n"], "reasoning_effort": "low"}
    )
    request = ModelRequest(
        messages=[Message.user("hi")],
        options={"temperature": 0.0, "max_completion_tokens": 64, "model": "o4-mini"},
    )
    await provider.complete(request)
    body = server.requests[0].json()
    assert body["temperature"] == 0.0
    assert body["top_p"] == 0.9
    assert body["stop"] == ["\n\n"]
    assert body["reasoning_effort"] == "low"
    assert body["max_completion_tokens"] == 64
    assert body["model"] == "o4-mini"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_object"},
        {
            "type": "json_schema",
            "json_schema": {
                "name": "weather",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
                    "required": ["city", "celsius"],
                    "additionalProperties": False,
                },
            },
        },
    ],
)
async def test_response_format_is_sent_as_given(
    server: WireServer, make_provider: Maker, wire: Any, response_format: dict[str, Any]
) -> None:
    server.default = Reply.json(wire.completion('{"city": "Paris", "celsius": 21}'))
    response = await make_provider().complete(
        ModelRequest(messages=[Message.user("Paris?")], response_format=response_format)
    )
    assert server.requests[0].json()["response_format"] == response_format
    assert response.message.content == '{"city": "Paris", "celsius": 21}'


@pytest.mark.anyio
async def test_request_options_may_not_replace_the_conversation(
    server: WireServer, make_provider: Maker
) -> None:
    with pytest.raises(ProviderError, match="messages"):
        await make_provider().complete(
            ModelRequest(messages=[Message.user("hi")], options={"messages": []})
        )
    assert server.requests == []


@pytest.mark.anyio
async def test_assistant_turn_with_only_tool_calls_has_null_content(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.json(wire.completion("ok"))
    call = ToolCall(id="call_9", name="list_files", arguments={})
    history = [
        Message.user("ls"),
        Message.assistant(tool_calls=(call,)),
        Message.tool_result(call, ""),
    ]
    await make_provider().complete(ModelRequest(messages=history))
    messages = server.requests[0].json()["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_9",
                "type": "function",
                "function": {"name": "list_files", "arguments": "{}"},
            }
        ],
    }
    assert messages[2] == {"role": "tool", "tool_call_id": "call_9", "content": ""}


@pytest.mark.anyio
async def test_system_role_can_be_developer(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.json(wire.completion("ok"))
    await make_provider(system_role="developer").complete(
        ModelRequest(messages=[Message.system("Be brief."), Message.user("hi")])
    )
    assert server.requests[0].json()["messages"][0] == {"role": "developer", "content": "Be brief."}


@pytest.mark.anyio
async def test_auth_organization_project_and_extra_headers(
    server: WireServer, make_provider: Maker, wire: Any, secret: str
) -> None:
    server.default = Reply.json(wire.completion("ok"))
    provider = make_provider(organization="org-123", project="proj_456", headers={"X-Trace": "abc"})
    await provider.complete(ModelRequest(messages=[Message.user("hi")]))
    headers = server.requests[0].headers
    assert headers["authorization"] == f"Bearer {secret}"
    assert headers["openai-organization"] == "org-123"
    assert headers["openai-project"] == "proj_456"
    assert headers["x-trace"] == "abc"
    assert headers["user-agent"] == "koboi"


@pytest.mark.anyio
async def test_without_a_key_no_authorization_header_is_sent(
    server: WireServer, make_provider: Maker, wire: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The user's OpenAI key is in the environment, and the server is not OpenAI.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-REALUSERKEY0123456789abcdef")
    server.default = Reply.json(wire.completion("ok"))
    provider = make_provider(api_key=None)
    await provider.complete(ModelRequest(messages=[Message.user("hi")]))
    assert "authorization" not in server.requests[0].headers
    assert b"REALUSERKEY" not in server.requests[0].body
    assert not organization_or_project(server.requests[0].headers)


def organization_or_project(headers: dict[str, str]) -> list[str]:
    return [name for name in headers if name.startswith("openai-")]


@pytest.mark.anyio
async def test_a_named_variable_supplies_the_key_for_a_compatible_server(
    server: WireServer, make_provider: Maker, wire: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-v1-0123456789abcdef0123456789")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-REALUSERKEY0123456789abcdef")
    server.default = Reply.json(wire.completion("ok"))
    provider = make_provider(api_key=None, api_key_env_var="OPENROUTER_API_KEY")
    await provider.complete(ModelRequest(messages=[Message.user("hi")]))
    assert (
        server.requests[0].headers["authorization"] == "Bearer sk-or-v1-0123456789abcdef0123456789"
    )


@pytest.mark.anyio
async def test_tool_options_are_sent_only_beside_tools(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.json(wire.completion("ok"))
    provider = make_provider(options={"parallel_tool_calls": False, "tool_choice": "required"})
    await provider.complete(ModelRequest(messages=[Message.user("hi")], tools=[WEATHER]))
    await provider.complete(ModelRequest(messages=[Message.user("hi")]))
    with_tools, without = (r.json() for r in server.requests)
    assert with_tools["parallel_tool_calls"] is False
    assert with_tools["tool_choice"] == "required"
    # OpenAI answers 400 to either of these without tools.
    assert "parallel_tool_calls" not in without and "tool_choice" not in without
