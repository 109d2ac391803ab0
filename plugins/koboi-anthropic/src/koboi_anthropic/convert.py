"""Translation between koboi's messages and the Anthropic Messages API's JSON.

Pure functions and one stream accumulator, no HTTP: ``provider.py`` glues
them to :class:`koboi_http.HTTPProvider`.

Blocks the model must see again (``thinking`` with its ``signature``,
``redacted_thinking``, and any other block type koboi has no field for) are
kept in the assistant message's ``provider_data``::

    {"anthropic": {"content": [
        {"type": "thinking", "thinking": "...", "signature": "..."},
        {"type": "text"},                      # where the text went
        {"type": "tool_use", "id": "toolu_1"}  # where each tool call went
    ]}}

The text and the tool calls themselves are not copied there: they stay in
``Message.content`` and ``Message.tool_calls`` (which interceptors may
change), and only their position is recorded, so that the next request sends
every block back in its original order.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from koboi.errors import ProviderError
from koboi.messages import (
    FinishReason,
    Message,
    ModelResponse,
    ToolCall,
    ToolSpec,
    Usage,
    decode_tool_arguments,
)

#: Key of this provider's data in ``Message.provider_data``.
PROVIDER_DATA_KEY = "anthropic"

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}

#: Error types of the API's envelope and the HTTP status each stands for.
ERROR_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
#: Error types after which the same request may succeed when sent again.
RETRYABLE_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})

# Tool-use ids must match this; ids made by other providers may not.
_BAD_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")


# -- requests ---------------------------------------------------------------------


def system_prompt(messages: Iterable[Message], extra: str | None = None) -> str | None:
    """The top-level ``system`` field: every system message (and ``extra``), joined."""
    parts = [m.content for m in messages if m.role == "system" and m.content.strip()]
    if extra:
        parts.append(extra)
    return "\n\n".join(parts) if parts else None


def to_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """koboi messages (minus system ones) as the API's alternating ``messages`` list.

    Tool results become ``tool_result`` blocks of a user turn; consecutive
    messages of the same role (several tool results, then the user's next
    text) are merged into one turn, with the ``tool_result`` blocks first, as
    the API requires. Messages with nothing to send are left out.
    """
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        if message.role == "assistant":
            role, blocks = "assistant", assistant_blocks(message)
        elif message.role == "tool":
            role, blocks = "user", [tool_result_block(message)]
        else:
            role, blocks = "user", _text_blocks(message.content)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        if turn["role"] == "user":
            # Stable: tool results keep their order, and so does the text after them.
            turn["content"].sort(key=lambda block: block.get("type") != "tool_result")
    return turns


def tool_result_block(message: Message) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id(message.tool_call_id or ""),
        "content": message.content,
        "is_error": message.is_error,
    }


def tool_use_block(call: ToolCall) -> dict[str, Any]:
    # A call whose arguments did not decode (raw_arguments) is sent with an
    # empty input: the API requires an object, and its result says what was wrong.
    return {
        "type": "tool_use",
        "id": tool_use_id(call.id),
        "name": call.name,
        "input": dict(call.arguments),
    }


def tool_use_id(call_id: str) -> str:
    """``call_id`` in the alphabet the API accepts for tool-use ids."""
    return _BAD_ID_CHARS.sub("_", call_id) or "toolu_unknown"


def assistant_blocks(message: Message) -> list[dict[str, Any]]:
    """An assistant message's content blocks, with kept blocks back in their places."""
    text = _text_blocks(message.content)
    uses = {call.id: tool_use_block(call) for call in message.tool_calls}
    layout = kept_layout(message)
    if layout is None:
        return [*text, *uses.values()]
    blocks: list[dict[str, Any]] = []
    text_placed = not text
    for item in layout:
        kind = item.get("type")
        if kind == "text":
            if not text_placed:
                blocks.extend(text)
                text_placed = True
        elif kind == "tool_use":
            block = uses.pop(str(item.get("id")), None)
            if block is not None:
                blocks.append(block)
        else:
            blocks.append(copy.deepcopy(dict(item)))
    if not text_placed:
        # The text was added after the response (an interceptor): before the tool calls.
        first_use = next(
            (i for i, b in enumerate(blocks) if b.get("type") == "tool_use"), len(blocks)
        )
        blocks[first_use:first_use] = text
    blocks.extend(uses.values())
    return blocks


def kept_layout(message: Message) -> list[Mapping[str, Any]] | None:
    """The block layout this provider kept in ``message.provider_data``, if any."""
    data = message.provider_data
    if not isinstance(data, Mapping):
        return None
    mine = data.get(PROVIDER_DATA_KEY)
    if not isinstance(mine, Mapping):
        return None
    content = mine.get("content")
    if not isinstance(content, list):
        return None
    return [item for item in content if isinstance(item, Mapping)]


def tool_definitions(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    out = []
    for spec in tools:
        schema = dict(spec.parameters) if spec.parameters else {}
        # The API requires an object schema.
        schema.setdefault("type", "object")
        out.append({"name": spec.name, "description": spec.description, "input_schema": schema})
    return out


def structured_output_instruction(response_format: Mapping[str, Any] | None) -> str | None:
    """A system-prompt instruction for ``response_format`` (the API has no such field).

    Accepts ``{"type": "json_schema", "json_schema": {"name", "schema"}}`` (the
    OpenAI form), the same with ``name`` and ``schema`` at the top level,
    ``{"type": "json_object"}`` and ``{"type": "text"}``; anything else is a
    ``ProviderError``.
    """
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return (
            "Reply with a single JSON object and nothing else: no prose before or after it, "
            "and no Markdown code fence."
        )
    if kind == "json_schema":
        spec = response_format.get("json_schema", response_format)
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if isinstance(schema, Mapping):
            name = spec.get("name") or "response"
            description = spec.get("description")
            about = f" ({description})" if isinstance(description, str) and description else ""
            return (
                f'Reply with a single JSON object that validates against the JSON schema named "{name}"'
                f"{about} below, and nothing else: no prose before or after it, and no Markdown "
                f"code fence.\n\n{json.dumps(schema, ensure_ascii=False, sort_keys=True)}"
            )
    raise ProviderError(
        f"anthropic: unsupported response_format {dict(response_format)!r}; use "
        '{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}, '
        '{"type": "json_object"} or {"type": "text"}'
    )


def _text_blocks(text: str) -> list[dict[str, Any]]:
    # The API refuses empty text blocks.
    return [{"type": "text", "text": text}] if text else []


# -- responses ------------------------------------------------------------------------


def finish_reason(stop_reason: Any, has_tool_calls: bool) -> FinishReason:
    mapped = _STOP_REASONS.get(stop_reason) if isinstance(stop_reason, str) else None
    if has_tool_calls and mapped in (None, "stop"):
        return "tool_calls"
    return mapped or "stop"


def to_usage(usage: Any) -> Usage:
    """koboi's usage from the API's ``usage`` object.

    The API's ``input_tokens`` counts only the input that was neither read
    from nor written to the prompt cache; koboi's counts all of it (see
    :class:`~koboi.messages.Usage`), so the two cache counts are added to it.
    ``output_tokens`` already includes thinking.
    """
    if not isinstance(usage, Mapping):
        return Usage(requests=1)
    cache_read = _count(usage.get("cache_read_input_tokens"))
    cache_write = _count(usage.get("cache_creation_input_tokens"))
    return Usage(
        input_tokens=_count(usage.get("input_tokens")) + cache_read + cache_write,
        output_tokens=_count(usage.get("output_tokens")),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        requests=1,
    )


def _count(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return 0


def to_response(
    blocks: Sequence[Any], *, stop_reason: Any, usage: Any, model: str
) -> ModelResponse:
    """A koboi response from the API's content blocks, stop reason and usage."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    layout: list[dict[str, Any]] = []
    kept = False
    for index, block in enumerate(blocks):
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            texts.append(text if isinstance(text, str) else "")
            layout.append({"type": "text"})
        elif kind == "tool_use":
            call = _tool_call(block, index)
            calls.append(call)
            layout.append({"type": "tool_use", "id": call.id})
        else:
            # thinking, redacted_thinking, and whatever else the API adds:
            # kept as they are, to be sent back on the next turn.
            layout.append(copy.deepcopy(dict(block)))
            kept = True
    message = Message(
        role="assistant",
        content="".join(texts),
        tool_calls=tuple(calls),
        provider_data={PROVIDER_DATA_KEY: {"content": layout}} if kept else None,
    )
    return ModelResponse(
        message=message,
        usage=to_usage(usage),
        finish_reason=finish_reason(stop_reason, bool(calls)),
        model=model,
    )


def parse_message(body: Any, default_model: str) -> ModelResponse:
    """A koboi response from the API's JSON reply (a ``message`` object)."""
    if isinstance(body, Mapping) and body.get("type") == "error":
        raise stream_error(body)
    if not isinstance(body, Mapping) or not isinstance(body.get("content"), list):
        snippet = json.dumps(body)[:120] if body is not None else "null"
        raise ProviderError(f"anthropic: the reply is not a message: {snippet}")
    model = body.get("model")
    return to_response(
        body["content"],
        stop_reason=body.get("stop_reason"),
        usage=body.get("usage"),
        model=model if isinstance(model, str) else default_model,
    )


def _tool_call(block: Mapping[str, Any], index: int) -> ToolCall:
    call_id = block.get("id")
    if not isinstance(call_id, str) or not call_id:
        call_id = f"toolu_koboi_{index}"
    name = block.get("name")
    name = name if isinstance(name, str) else ""
    # Text when streamed; an object decoded by the provider (which marks repeated keys).
    arguments, raw = decode_tool_arguments(block.get("input"))
    return ToolCall(id=call_id, name=name, arguments=arguments, raw_arguments=raw)


def error_text(body: Any) -> str | None:
    """``type: message`` from the API's error envelope ``{"type": "error", "error": {...}}``."""
    if not isinstance(body, Mapping):
        return None
    error = body.get("error")
    if not isinstance(error, Mapping):
        return None
    kind, message = error.get("type"), error.get("message")
    if isinstance(kind, str) and isinstance(message, str):
        return f"{kind}: {message}"
    if isinstance(message, str):
        return message
    return kind if isinstance(kind, str) else None


def stream_error(body: Any) -> ProviderError:
    """The ``ProviderError`` for an error the API sent instead of (or inside) a reply."""
    error = body.get("error") if isinstance(body, Mapping) else None
    kind = error.get("type") if isinstance(error, Mapping) else None
    text = error_text(body) or "unknown error"
    status = ERROR_STATUS.get(kind) if isinstance(kind, str) else None
    return ProviderError(
        f"anthropic: the API reported an error: {text}",
        status=status,
        retryable=kind in RETRYABLE_ERRORS,
    )


# -- streaming -------------------------------------------------------------------------


@dataclass
class StreamState:
    """Accumulates the events of one streamed reply into the final response.

    :meth:`feed` takes each event's JSON and returns the text to show, if
    any; after ``message_stop`` :attr:`done` is true and :meth:`response`
    gives the same response the non-streamed call would have.
    """

    default_model: str
    model: str = ""
    usage: dict[str, Any] = field(default_factory=dict)
    stop_reason: Any = None
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    partial_json: dict[int, list[str]] = field(default_factory=dict)
    started: bool = False
    done: bool = False

    def feed(self, data: Any) -> str | None:
        if not isinstance(data, Mapping):
            raise ProviderError("anthropic: the stream sent an event that is not a JSON object")
        kind = data.get("type")
        if kind == "message_start":
            message = data.get("message")
            message = message if isinstance(message, Mapping) else {}
            model = message.get("model")
            self.model = model if isinstance(model, str) else ""
            self._add_usage(message.get("usage"))
            self.started = True
        elif kind == "content_block_start":
            return self._start_block(data)
        elif kind == "content_block_delta":
            return self._delta(data)
        elif kind == "content_block_stop":
            self._stop_block(self._index(data))
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, Mapping) and "stop_reason" in delta:
                self.stop_reason = delta.get("stop_reason")
            # Counts here are cumulative: they replace those of message_start.
            self._add_usage(data.get("usage"))
        elif kind == "message_stop":
            if not self.started:
                raise ProviderError("anthropic: the stream ended a message it never started")
            self.done = True
        elif kind == "error":
            raise stream_error(data)
        # "ping" and event types added later are ignored.
        return None

    def response(self) -> ModelResponse:
        for index in list(self.partial_json):
            self._stop_block(index)
        blocks = [self.blocks[i] for i in sorted(self.blocks)]
        return to_response(
            blocks,
            stop_reason=self.stop_reason,
            usage=self.usage,
            model=self.model or self.default_model,
        )

    def _add_usage(self, usage: Any) -> None:
        if isinstance(usage, Mapping):
            self.usage.update({k: v for k, v in usage.items() if v is not None})

    @staticmethod
    def _index(data: Mapping[str, Any]) -> int:
        index = data.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise ProviderError(f"anthropic: the stream sent {data.get('type')} without an index")
        return index

    def _start_block(self, data: Mapping[str, Any]) -> str | None:
        index = self._index(data)
        block = data.get("content_block")
        if not isinstance(block, Mapping):
            raise ProviderError("anthropic: the stream started a content block without one")
        self.blocks[index] = copy.deepcopy(dict(block))
        if "input" in block:
            # tool_use (and server tool) input arrives as input_json_delta pieces.
            self.partial_json[index] = []
        text = block.get("text")
        return text if block.get("type") == "text" and isinstance(text, str) and text else None

    def _delta(self, data: Mapping[str, Any]) -> str | None:
        index = self._index(data)
        block = self.blocks.get(index)
        if block is None:
            raise ProviderError(
                f"anthropic: the stream sent a delta for content block {index}, "
                "which it never started"
            )
        delta = data.get("delta")
        if not isinstance(delta, Mapping):
            return None
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if isinstance(text, str) and text:
                block["text"] = str(block.get("text") or "") + text
                return text
        elif kind == "input_json_delta":
            piece = delta.get("partial_json")
            if isinstance(piece, str):
                self.partial_json.setdefault(index, []).append(piece)
        elif kind == "thinking_delta":
            thinking = delta.get("thinking")
            if isinstance(thinking, str):
                block["thinking"] = str(block.get("thinking") or "") + thinking
        elif kind == "signature_delta":
            signature = delta.get("signature")
            if isinstance(signature, str):
                block["signature"] = str(block.get("signature") or "") + signature
        elif kind == "citations_delta":
            citation = delta.get("citation")
            if citation is not None:
                block.setdefault("citations", []).append(citation)
        return None

    def _stop_block(self, index: int) -> None:
        pieces = self.partial_json.pop(index, None)
        block = self.blocks.get(index)
        if pieces is None or block is None:
            return
        text = "".join(pieces)
        if not text.strip():
            # No delta: the input given at the start stands ({} for a call without arguments).
            return
        try:
            block["input"] = json.loads(text)
        except ValueError:
            # Kept as text; a tool_use block becomes a call with raw_arguments.
            block["input"] = text
