"""Test models that answer by position, not by content.

:class:`ScriptedProvider` (koboi-scripted) answers by how many assistant messages a
conversation holds, which is right for one conversation but not for a parent and
its sub-agent sharing a model: each has its own conversation. :class:`InOrderModel`
answers calls strictly in the order they arrive, whoever makes them, and passes
tool calls through exactly as given (raw arguments included), so tests can send
what a provider could decode: duplicate keys, oversized arguments, odd names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from koboi.messages import Message, ModelRequest, ModelResponse, ToolCall
from koboi.provider import ModelProvider

#: One answer: a text, a ``{"name", "arguments"}`` tool call, or a ``ToolCall`` as is.
Turn = str | Mapping[str, Any] | ToolCall


class InOrderModel(ModelProvider):
    """Answers the n-th call with ``turns[n]``; a call after the last one is an error."""

    name = "in-order"

    def __init__(self, turns: Sequence[Turn]) -> None:
        self.turns: list[Turn] = list(turns)
        #: The requests received, in order.
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if not self.turns:
            raise AssertionError(f"InOrderModel: call {len(self.requests)} has no scripted turn")
        turn = self.turns.pop(0)
        if isinstance(turn, str):
            return ModelResponse(message=Message.assistant(turn))
        if not isinstance(turn, ToolCall):
            turn = ToolCall(
                id=f"c{len(self.turns)}", name=str(turn["name"]), arguments=turn["arguments"]
            )
        return ModelResponse(message=Message.assistant(tool_calls=(turn,)))
