"""Thinking blocks survive to the next turn, unchanged and in their place.

With extended thinking and tool use, the API requires the assistant turn that
made the tool calls to be sent back with its thinking blocks (signature
included) before the tool_use blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from koboi.messages import Message, ModelRequest, ModelResponse, ResponseDone, ToolSpec
from koboi_anthropic.provider import AnthropicProvider
from koboi_testing.wire import WireServer

MakeProvider = Callable[..., AnthropicProvider]

CALCULATOR = ToolSpec(
    name="calculator",
    description="Evaluate an arithmetic expression.",
    parameters={"type": "object", "properties": {"expression": {"type": "string"}}},
)
THINKING = {
    "type": "thinking",
    "thinking": "The user wants 6*7. I should use the calculator — ça va. 日本",
    "signature": "EqQBCkYIARgCIkBmN3Hsig/+=",
}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xl"}


async def respond(
    provider: AnthropicProvider, request: ModelRequest, stream: bool
) -> ModelResponse:
    if not stream:
        return await provider.complete(request)
    final = None
    async for event in provider.stream(request):
        assert "ça va" not in getattr(event, "text", ""), "thinking must not be streamed as text"
        if isinstance(event, ResponseDone):
            final = event.response
    assert final is not None
    return final


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("journaled", [False, True], ids=["in-memory", "through-json"])
async def test_thinking_and_tool_use_are_sent_back_unchanged(
    make_provider: MakeProvider,
    answer: Callable[..., None],
    server: WireServer,
    claude: Any,
    stream: bool,
    journaled: bool,
) -> None:
    tool_use = claude.tool_use("toolu_01", "calculator", {"expression": "6*7"})
    answer(
        claude.message(
            [THINKING, REDACTED, claude.text("Let me compute."), tool_use],
            stop_reason="tool_use",
        )
    )
    provider = make_provider(options={"thinking": {"type": "enabled", "budget_tokens": 1024}})
    first = [Message.system("Be exact."), Message.user("What is 6*7?")]
    response = await respond(provider, ModelRequest(messages=first, tools=[CALCULATOR]), stream)
    assistant = response.message
    assert assistant.content == "Let me compute."
    assert [c.id for c in assistant.tool_calls] == ["toolu_01"]
    if journaled:
        # The journal keeps the response as JSON and a resume reads it back.
        assistant = ModelResponse.model_validate_json(response.model_dump_json()).message
        assert assistant == response.message

    answer(claude.message([claude.text("42")]))
    (call,) = assistant.tool_calls
    second = [*first, assistant, Message.tool_result(call, "42")]
    await respond(provider, ModelRequest(messages=second, tools=[CALCULATOR]), stream)

    sent = server.requests[-1].json()
    assert sent["messages"][1] == {
        "role": "assistant",
        "content": [THINKING, REDACTED, claude.text("Let me compute."), tool_use],
    }
    assert sent["messages"][2]["content"][0]["tool_use_id"] == "toolu_01"


@pytest.mark.anyio
async def test_interleaved_blocks_keep_their_order(
    make_provider: MakeProvider, answer: Callable[..., None], server: WireServer, claude: Any
) -> None:
    second_thought = {"type": "thinking", "thinking": "Now the time.", "signature": "c2ln"}
    blocks = [
        THINKING,
        claude.tool_use("toolu_01", "calculator", {"expression": "1+1"}),
        second_thought,
        claude.tool_use("toolu_02", "now", {}),
    ]
    answer(claude.message(blocks, stop_reason="tool_use"))
    provider = make_provider()
    response = await provider.complete(ModelRequest(messages=[Message.user("Go")]))
    calls = response.message.tool_calls
    history = [
        Message.user("Go"),
        response.message,
        *(Message.tool_result(call, "ok") for call in calls),
    ]
    await provider.complete(ModelRequest(messages=history))
    assert server.requests[-1].json()["messages"][1]["content"] == blocks


@pytest.mark.anyio
async def test_text_changed_after_the_response_still_goes_before_the_calls(
    make_provider: MakeProvider, answer: Callable[..., None], server: WireServer, claude: Any
) -> None:
    # The model wrote no text; an interceptor added some to the kept message.
    tool_use = claude.tool_use("toolu_01", "calculator", {"expression": "2"})
    answer(claude.message([THINKING, tool_use], stop_reason="tool_use"))
    provider = make_provider()
    response = await provider.complete(ModelRequest(messages=[Message.user("Go")]))
    edited = response.message.model_copy(update={"content": "[edited]"})
    (call,) = edited.tool_calls
    history = [Message.user("Go"), edited, Message.tool_result(call, "2")]
    await provider.complete(ModelRequest(messages=history))
    assert server.requests[-1].json()["messages"][1]["content"] == [
        THINKING,
        claude.text("[edited]"),
        tool_use,
    ]


@pytest.mark.anyio
async def test_other_providers_data_is_ignored(
    make_provider: MakeProvider, server: WireServer, claude: Any, answer: Callable[..., None]
) -> None:
    answer(claude.message([claude.text("ok")]))
    foreign = Message(
        role="assistant", content="Earlier answer.", provider_data={"openai": {"reasoning": "x"}}
    )
    history = [Message.user("Hi"), foreign, Message.user("Again")]
    await make_provider().complete(ModelRequest(messages=history))
    assert server.requests[-1].json()["messages"][1]["content"] == [claude.text("Earlier answer.")]
