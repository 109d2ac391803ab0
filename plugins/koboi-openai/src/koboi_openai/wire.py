"""Translation between koboi's types and the Chat Completions wire format.

Pure functions, no I/O: the provider module does the HTTP, the stream module
the reassembly of chunks; both use these.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from koboi.messages import (
    FinishReason,
    Message,
    ToolCall,
    ToolSpec,
    Usage,
    decode_tool_arguments,
)

#: Prefix of a failed tool result: the API has no error flag, so the model reads it.
ERROR_PREFIX = "Error: "

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}

# Words in an error event's type or code that mean "try again later".
_TRANSIENT = ("server_error", "rate_limit", "overloaded", "timeout", "unavailable")


# -- requests -------------------------------------------------------------------


def messages_to_wire(messages: Iterable[Message], *, system_role: str = "system") -> list[Any]:
    """The ``messages`` array of a request."""
    wire: list[Any] = []
    for message in messages:
        if message.role == "system":
            wire.append({"role": system_role, "content": message.content})
        elif message.role == "user":
            wire.append({"role": "user", "content": message.content})
        elif message.role == "assistant":
            wire.append(_assistant_to_wire(message))
        else:
            wire.append(
                {
                    "role": "tool",
                    "tool_call_id": message.tool_call_id or "",
                    "content": _tool_result_text(message),
                }
            )
    return wire


def _assistant_to_wire(message: Message) -> dict[str, Any]:
    item: dict[str, Any] = {"role": "assistant"}
    if message.tool_calls:
        # The API's own replies carry null content beside tool calls.
        item["content"] = message.content or None
        item["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": arguments_to_wire(call)},
            }
            for call in message.tool_calls
        ]
    else:
        item["content"] = message.content
    return item


def arguments_to_wire(call: ToolCall) -> str:
    """The call's arguments as the JSON string the API expects.

    Text the model sent that was not a JSON object is sent back as it was, so
    the history shows the model what it actually wrote.
    """
    if call.raw_arguments is not None:
        return call.raw_arguments
    return json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))


def _tool_result_text(message: Message) -> str:
    if message.is_error and not message.content.startswith(ERROR_PREFIX):
        return ERROR_PREFIX + message.content
    return message.content


def tools_to_wire(tools: Sequence[ToolSpec]) -> list[Any]:
    """The ``tools`` array of a request."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters,
            },
        }
        for spec in tools
    ]


# -- responses -------------------------------------------------------------------


def new_call_id() -> str:
    """An id for a call the server sent without one (some compatible servers do)."""
    return f"call_{uuid.uuid4().hex[:24]}"


def make_tool_call(call_id: Any, name: Any, arguments: Any) -> ToolCall:
    """A :class:`ToolCall` from the wire's id, name and arguments (string or object)."""
    # Text, as the API sends it; some servers send the object itself.
    decoded, raw = decode_tool_arguments(arguments)
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else new_call_id(),
        name=name if isinstance(name, str) else "",
        arguments=decoded,
        raw_arguments=raw,
    )


def tool_calls_from_wire(message: Mapping[str, Any]) -> tuple[ToolCall, ...]:
    """The tool calls of a non-streamed assistant message (``tool_calls``, or legacy ``function_call``)."""
    calls: list[ToolCall] = []
    raw_calls = message.get("tool_calls")
    if isinstance(raw_calls, list):
        for raw in raw_calls:
            if not isinstance(raw, Mapping):
                continue
            function = raw.get("function")
            function = function if isinstance(function, Mapping) else {}
            calls.append(
                make_tool_call(raw.get("id"), function.get("name"), function.get("arguments"))
            )
    legacy = message.get("function_call")
    if not calls and isinstance(legacy, Mapping):
        calls.append(make_tool_call(None, legacy.get("name"), legacy.get("arguments")))
    return tuple(calls)


def text_from_wire(content: Any) -> str:
    """Message text: a string, null, or (some servers) a list of ``{"type": "text"}`` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def finish_from_wire(reason: Any, *, has_tool_calls: bool) -> FinishReason:
    """koboi's finish reason for the API's.

    Unknown or missing reasons are ``stop``; a reply that carries tool calls
    but says ``stop`` (Ollama does) or nothing is ``tool_calls``.
    """
    mapped = _FINISH.get(reason, "stop") if isinstance(reason, str) else "stop"
    if has_tool_calls and mapped == "stop":
        return "tool_calls"
    return mapped


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, int(value))


def usage_from_wire(raw: Any) -> Usage:
    """Token usage of one call; missing fields (or a missing ``usage``) count zero."""
    usage = raw if isinstance(raw, Mapping) else {}
    prompt_details = usage.get("prompt_tokens_details")
    prompt_details = prompt_details if isinstance(prompt_details, Mapping) else {}
    completion_details = usage.get("completion_tokens_details")
    completion_details = completion_details if isinstance(completion_details, Mapping) else {}
    return Usage(
        input_tokens=_count(usage.get("prompt_tokens")),
        output_tokens=_count(usage.get("completion_tokens")),
        reasoning_tokens=_count(completion_details.get("reasoning_tokens")),
        cache_read_tokens=_count(prompt_details.get("cached_tokens")),
        requests=1,
    )


# -- errors ------------------------------------------------------------------------


def error_text(error: Any) -> str | None:
    """The readable text of an ``{"error": ...}`` envelope's value: message, then type and code."""
    if isinstance(error, str):
        return error or None
    if not isinstance(error, Mapping):
        return None
    message = error.get("message")
    text = message if isinstance(message, str) and message else "unknown error"
    details = [
        f"{key}: {error[key]}"
        for key in ("type", "code")
        if isinstance(error.get(key), str | int)
        and not isinstance(error.get(key), bool)
        and error.get(key) != ""
    ]
    return f"{text} ({', '.join(details)})" if details else text


def error_is_transient(error: Any) -> bool:
    """Whether an error sent inside a reply (not as an HTTP status) may pass on a retry."""
    if not isinstance(error, Mapping):
        return False
    code = error.get("code")
    if isinstance(code, int) and not isinstance(code, bool):
        return code in (408, 429) or code >= 500
    words = " ".join(str(error.get(key) or "") for key in ("type", "code")).lower()
    return any(word in words for word in _TRANSIENT)
