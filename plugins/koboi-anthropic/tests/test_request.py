"""What goes on the wire: the exact body and headers of POST /v1/messages."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from koboi.errors import ProviderError
from koboi.messages import Message, ModelRequest, ToolCall, ToolSpec
from koboi_anthropic import convert
from koboi_anthropic.provider import AnthropicProvider
from koboi_testing.wire import WireServer

MakeProvider = Callable[..., AnthropicProvider]

CALCULATOR = ToolSpec(
    name="calculator",
    description="Evaluate an arithmetic expression.",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
)


@pytest.fixture(autouse=True)
def _hello(answer: Callable[..., None], claude: Any) -> None:
    answer(claude.message([claude.text("Hello")]))


async def sent(
    provider: AnthropicProvider, server: WireServer, request: ModelRequest, *, stream: bool = False
) -> dict[str, Any]:
    """The JSON body the server received for ``request``."""
    if stream:
        async for _ in provider.stream(request):
            pass
    else:
        await provider.complete(request)
    body: dict[str, Any] = server.requests[-1].json()
    return body


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


# -- headers and the minimal body ----------------------------------------------------


@pytest.mark.anyio
async def test_headers_path_and_minimal_body(
    make_provider: MakeProvider, server: WireServer, api_key: str
) -> None:
    body = await sent(make_provider(), server, ModelRequest(messages=[Message.user("Hi")]))
    received = server.requests[-1]
    assert (received.method, received.path) == ("POST", "/v1/messages")
    assert received.headers["x-api-key"] == api_key
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert received.headers["content-type"] == "application/json"
    assert "authorization" not in received.headers
    assert body == {
        "model": "claude-test-1",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [text("Hi")]}],
    }


@pytest.mark.anyio
async def test_bearer_token_replaces_the_api_key(
    make_provider: MakeProvider, server: WireServer, auth_token: str
) -> None:
    provider = make_provider(api_key=None, auth_token=SecretStr(auth_token))
    await sent(provider, server, ModelRequest(messages=[Message.user("Hi")]))
    headers = server.requests[-1].headers
    assert headers["authorization"] == f"Bearer {auth_token}"
    assert "x-api-key" not in headers


@pytest.mark.anyio
async def test_base_url_with_a_path_and_extra_headers(
    provider_options: Callable[..., Any], server: WireServer
) -> None:
    options = provider_options(
        server.url + "/gateway/anthropic/",
        headers={"anthropic-beta": "interleaved-thinking-2025-05-14", "anthropic-version": "x"},
        anthropic_version="2024-01-01",
    )
    provider = AnthropicProvider(options)
    try:
        await sent(provider, server, ModelRequest(messages=[Message.user("Hi")]))
    finally:
        await provider.aclose()
    received = server.requests[-1]
    assert received.path == "/gateway/anthropic/v1/messages"
    assert received.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    # An explicit header wins over the option.
    assert received.headers["anthropic-version"] == "x"


@pytest.mark.anyio
async def test_stream_flag_only_when_streaming(
    make_provider: MakeProvider, server: WireServer
) -> None:
    provider = make_provider(options={"stream": True})
    request = ModelRequest(messages=[Message.user("Hi")])
    assert "stream" not in await sent(provider, server, request)
    assert (await sent(provider, server, request, stream=True))["stream"] is True


# -- system prompt ------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True])
async def test_system_messages_go_to_the_system_field(
    make_provider: MakeProvider, server: WireServer, stream: bool
) -> None:
    request = ModelRequest(
        messages=[
            Message.system("You are terse."),
            Message.user("Hi"),
            Message.system("Answer in French."),
            Message.system("   "),
        ]
    )
    body = await sent(make_provider(), server, request, stream=stream)
    assert body["system"] == "You are terse.\n\nAnswer in French."
    assert body["messages"] == [{"role": "user", "content": [text("Hi")]}]
    assert all(m["role"] != "system" for m in body["messages"])


# -- messages, tool calls and tool results ------------------------------------------------


@pytest.mark.anyio
async def test_a_tool_turn_with_two_results_and_a_following_user_text(
    make_provider: MakeProvider, server: WireServer
) -> None:
    add = ToolCall(id="toolu_01", name="calculator", arguments={"expression": "1+1"})
    bad = ToolCall(id="toolu_02", name="calculator", arguments={"expression": "1/0"})
    request = ModelRequest(
        messages=[
            Message.system("Use the calculator."),
            Message.user("Compute 1+1 and 1/0 ☀️"),
            Message.assistant("Computing both.", tool_calls=(add, bad)),
            Message.tool_result(add, "2"),
            Message.tool_result(bad, "division by zero", is_error=True),
            Message.user("And explain."),
        ],
        tools=[CALCULATOR],
    )
    body = await sent(make_provider(), server, request)
    assert body["messages"] == [
        {"role": "user", "content": [text("Compute 1+1 and 1/0 ☀️")]},
        {
            "role": "assistant",
            "content": [
                text("Computing both."),
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "calculator",
                    "input": {"expression": "1+1"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_02",
                    "name": "calculator",
                    "input": {"expression": "1/0"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": "2",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_02",
                    "content": "division by zero",
                    "is_error": True,
                },
                text("And explain."),
            ],
        },
    ]
    assert body["tools"] == [
        {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "input_schema": CALCULATOR.parameters,
        }
    ]


@pytest.mark.anyio
async def test_assistant_without_text_and_empty_messages(
    make_provider: MakeProvider, server: WireServer
) -> None:
    call = ToolCall(id="call_abc.1:x", name="calculator", raw_arguments="{not json")
    request = ModelRequest(
        messages=[
            Message.user("Go"),
            Message.user(""),
            Message.assistant(tool_calls=(call,)),
            Message.tool_result(call, "invalid arguments", is_error=True),
            Message.assistant(""),
            Message.user("Again"),
        ]
    )
    body = await sent(make_provider(), server, request)
    assert body["messages"] == [
        {"role": "user", "content": [text("Go")]},
        {
            "role": "assistant",
            "content": [
                # An id from another provider, made valid; undecodable arguments sent as {}.
                {"type": "tool_use", "id": "call_abc_1_x", "name": "calculator", "input": {}}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_abc_1_x",
                    "content": "invalid arguments",
                    "is_error": True,
                },
                text("Again"),
            ],
        },
    ]


@pytest.mark.anyio
async def test_tool_without_a_schema_gets_an_object_schema(
    make_provider: MakeProvider, server: WireServer
) -> None:
    bare = ToolSpec(name="now", description="The time.", parameters={})
    body = await sent(
        make_provider(), server, ModelRequest(messages=[Message.user("Hi")], tools=[bare])
    )
    assert body["tools"] == [
        {"name": "now", "description": "The time.", "input_schema": {"type": "object"}}
    ]


# -- options ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_options_are_forwarded_and_request_options_win(
    make_provider: MakeProvider, server: WireServer
) -> None:
    provider = make_provider(
        max_tokens=1000,
        options={
            "temperature": 0.2,
            "top_k": 5,
            "stop_sequences": ["END"],
            "metadata": {"user_id": "u-1"},
            "thinking": {"type": "enabled", "budget_tokens": 2048},
        },
    )
    request = ModelRequest(
        messages=[Message.user("Hi")],
        options={"temperature": 0.9, "top_p": 0.5, "max_tokens": 3000, "top_k": None},
    )
    body = await sent(provider, server, request)
    assert body["temperature"] == 0.9
    assert body["top_p"] == 0.5
    assert body["max_tokens"] == 3000
    assert "top_k" not in body  # None removes an option
    assert body["stop_sequences"] == ["END"]
    assert body["metadata"] == {"user_id": "u-1"}
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}


@pytest.mark.anyio
async def test_max_tokens_option_overrides_the_default(
    make_provider: MakeProvider, server: WireServer
) -> None:
    body = await sent(
        make_provider(options={"max_tokens": 64}),
        server,
        ModelRequest(messages=[Message.user("Hi")]),
    )
    assert body["max_tokens"] == 64


# -- structured output ----------------------------------------------------------------------

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


@pytest.mark.anyio
@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
        {"type": "json_schema", "name": "person", "schema": PERSON},
    ],
)
async def test_json_schema_becomes_a_system_instruction(
    make_provider: MakeProvider, server: WireServer, response_format: dict[str, Any]
) -> None:
    request = ModelRequest(
        messages=[Message.system("Extract people."), Message.user("Ann is 31.")],
        response_format=response_format,
    )
    body = await sent(make_provider(), server, request)
    assert "response_format" not in body
    system = body["system"]
    assert system.startswith("Extract people.\n\n")
    assert 'JSON schema named "person"' in system
    schema_text = system[system.index("{") :]
    assert json.loads(schema_text) == PERSON


@pytest.mark.anyio
async def test_json_object_and_text_formats(
    make_provider: MakeProvider, server: WireServer
) -> None:
    provider = make_provider()
    body = await sent(
        provider,
        server,
        ModelRequest(messages=[Message.user("Hi")], response_format={"type": "json_object"}),
    )
    assert "single JSON object" in body["system"]
    body = await sent(
        provider,
        server,
        ModelRequest(messages=[Message.user("Hi")], response_format={"type": "text"}),
    )
    assert "system" not in body


@pytest.mark.anyio
async def test_unsupported_response_format_fails_before_sending(
    make_provider: MakeProvider, server: WireServer
) -> None:
    request = ModelRequest(messages=[Message.user("Hi")], response_format={"type": "xml"})
    with pytest.raises(ProviderError, match="unsupported response_format"):
        await make_provider().complete(request)
    with pytest.raises(ProviderError, match="unsupported response_format"):
        async for _ in make_provider().stream(request):
            pass
    assert server.requests == []


# -- the translation, for any history ---------------------------------------------------------

_texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=8)


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Conversations as the loop builds them: turns of user text, tool calls and results."""
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append(Message.system(draw(_texts)))
    counter = 0
    for _ in range(draw(st.integers(0, 5))):
        messages.append(Message.user(draw(_texts)))
        for _ in range(draw(st.integers(0, 3))):
            calls = []
            for _ in range(draw(st.integers(0, 3))):
                counter += 1
                calls.append(ToolCall(id=f"toolu_{counter}", name="calculator"))
            messages.append(Message.assistant(draw(_texts), tool_calls=tuple(calls)))
            for call in calls:
                messages.append(
                    Message.tool_result(call, draw(_texts), is_error=draw(st.booleans()))
                )
    return messages


@given(histories())
def test_any_history_alternates_and_keeps_every_call_and_result(messages: list[Message]) -> None:
    turns = convert.to_messages(messages)
    roles = [turn["role"] for turn in turns]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    for turn in turns:
        assert turn["content"], "no turn may be empty"
        assert all(b["text"] for b in turn["content"] if b["type"] == "text")
        if turn["role"] == "user":
            kinds = [b["type"] for b in turn["content"]]
            # tool_result blocks come first in a user turn.
            assert kinds == sorted(kinds, key=lambda k: k != "tool_result")
    uses = [b["id"] for t in turns for b in t["content"] if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for t in turns for b in t["content"] if b["type"] == "tool_result"]
    expected = [c.id for m in messages for c in m.tool_calls]
    assert uses == expected
    assert results == [m.tool_call_id for m in messages if m.role == "tool"]
    # Every assistant turn with tool uses is answered by the next user turn.
    for index, turn in enumerate(turns):
        ids = [b["id"] for b in turn["content"] if b["type"] == "tool_use"]
        if ids:
            answered = [
                b["tool_use_id"] for b in turns[index + 1]["content"] if b["type"] == "tool_result"
            ]
            assert answered == ids
