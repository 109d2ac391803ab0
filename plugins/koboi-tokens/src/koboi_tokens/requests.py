"""Tokens of messages, tool specs and whole model requests.

Texts are counted by the counter; the framing around them follows the formula
OpenAI publishes for chat models: every message costs 3 tokens besides its role
and content, a tool message's call id and a named message's name are counted,
and every reply is primed with 3 tokens. A tool call costs its name, its
arguments as JSON and 3 tokens; a tool offered to the model costs its name,
description and parameter schema as JSON and 8 tokens. The framing of tools is
an approximation (each API lays tools out its own way); the texts are exact with
an exact counter. Context strategies keep a ``safety_margin`` for the rest.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koboi.messages import Message, ModelRequest, ToolSpec
    from koboi_tokens.counters import TokenCounter

#: Tokens every message costs besides its texts.
PER_MESSAGE = 3
#: Tokens that prime the model's reply, once per request.
PER_REPLY = 3
#: Tokens every tool call costs besides its name and arguments.
PER_TOOL_CALL = 3
#: Tokens every tool offered costs besides its name, description and schema.
PER_TOOL = 8


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def message_tokens(counter: TokenCounter, message: Message) -> int:
    """Tokens ``message`` takes in a request (framing included)."""
    total = PER_MESSAGE + counter.count(message.role) + counter.count(message.content)
    for call in message.tool_calls:
        arguments = call.raw_arguments if call.raw_arguments is not None else _json(call.arguments)
        total += PER_TOOL_CALL + counter.count(call.name) + counter.count(arguments)
        total += counter.count(call.id)
    if message.tool_call_id:
        total += counter.count(message.tool_call_id)
    if message.name:
        total += 1 + counter.count(message.name)
    return total


def tools_tokens(counter: TokenCounter, tools: Iterable[ToolSpec]) -> int:
    """Tokens the tools offered to the model take."""
    return sum(
        PER_TOOL
        + counter.count(spec.name)
        + counter.count(spec.description)
        + counter.count(_json(spec.parameters))
        for spec in tools
    )


def messages_tokens(counter: TokenCounter, messages: Iterable[Message]) -> int:
    """Tokens of ``messages`` (framing included, reply priming not)."""
    return sum(message_tokens(counter, m) for m in messages)


def request_tokens(counter: TokenCounter, request: ModelRequest) -> int:
    """Tokens the whole request takes: its messages, its tools and the reply priming."""
    return (
        messages_tokens(counter, request.messages)
        + tools_tokens(counter, request.tools)
        + PER_REPLY
        + (counter.count(_json(request.response_format)) if request.response_format else 0)
    )


class MessageTokens:
    """Tokens of messages, remembered per message object.

    A long session sends the same messages over and over; each is counted once.
    Entries hold the message itself (its ``id`` is only unique while it lives), so
    keep one per run, not per process.
    """

    __slots__ = ("_counted", "counter")

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._counted: dict[int, tuple[Message, int]] = {}

    def __call__(self, message: Message) -> int:
        known = self._counted.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        tokens = message_tokens(self.counter, message)
        self._counted[id(message)] = (message, tokens)
        return tokens

    def total(self, messages: Sequence[Message]) -> int:
        return sum(self(m) for m in messages)
