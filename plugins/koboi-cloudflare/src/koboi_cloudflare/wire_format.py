"""Translation between koboi's types and the Workers AI ``/ai/run`` JSON.

No I/O here: the provider module hands these functions request objects and
decoded JSON, and gets bodies and replies back.

Requests: messages are ``{role, content}``; an assistant turn that called
tools also carries ``tool_calls: [{id, type: "function", function: {name,
arguments}}]`` (arguments as JSON text, OpenAI's form); a tool result is
``{role: "tool", tool_call_id, name, content}``. Tools are sent in the flat
form that Cloudflare's function-calling documentation shows: ``{name,
description, parameters}``.

Replies come in two shapes: the native one (``{response, tool_calls: [{name,
arguments}], usage}``) and, from some newer models, OpenAI's
(``{choices: [{message, finish_reason}], usage}``); both are read, whole or
streamed.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from koboi.errors import ProviderError
from koboi.messages import (
    FinishReason,
    Message,
    ModelRequest,
    ToolCall,
    ToolSpec,
    Usage,
    decode_tool_arguments,
)

# Workers AI validates ``tool_call_id`` against this (unanchored) pattern;
# Mistral models need exactly nine alphanumerics.
_WIRE_ID = re.compile(r"[a-zA-Z0-9]{9}")
_ID_ALPHABET = string.ascii_letters + string.digits
ID_LENGTH = 9
#: What an error result is prefixed with: the API has no error flag for tool results.
ERROR_PREFIX = "Error: "

_LENGTH_REASONS = frozenset({"length", "max_tokens", "model_length"})


def short_id(seed: str) -> str:
    """Nine alphanumeric characters derived from ``seed`` (the form Workers AI accepts)."""
    number = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
    chars = []
    for _ in range(ID_LENGTH):
        number, digit = divmod(number, len(_ID_ALPHABET))
        chars.append(_ID_ALPHABET[digit])
    return "".join(chars)


def wire_call_id(call_id: str) -> str:
    """The id to send for a call: as-is when Workers AI accepts it, else a stable stand-in.

    The same function maps the assistant's call and the tool result that
    answers it, so the two still match on the wire.
    """
    return call_id if _WIRE_ID.search(call_id) else short_id(f"koboi-call:{call_id}")


# -- requests --------------------------------------------------------------------


def tool_to_wire(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "parameters": spec.parameters}


def _call_to_wire(call: ToolCall) -> dict[str, Any]:
    arguments = (
        call.raw_arguments
        if call.raw_arguments is not None
        else json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))
    )
    return {
        "id": wire_call_id(call.id),
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def _calls_as_text(calls: Sequence[ToolCall]) -> str:
    """The calls as the JSON that Llama-style models write when they call a tool.

    Workers AI's chat templates do not all render ``tool_calls`` of past
    assistant turns; with the calls in ``content`` too, the model sees what it
    asked for before it reads the results.
    """
    items = [{"name": c.name, "parameters": c.arguments} for c in calls]
    return json.dumps(items[0] if len(items) == 1 else items, ensure_ascii=False)


def message_to_wire(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        content = message.content
        if message.is_error and not content.startswith(ERROR_PREFIX):
            content = ERROR_PREFIX + content
        wire: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": wire_call_id(message.tool_call_id or ""),
            "content": content,
        }
        if message.name:
            wire["name"] = message.name
        return wire
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content or _calls_as_text(message.tool_calls),
            "tool_calls": [_call_to_wire(c) for c in message.tool_calls],
        }
    return {"role": message.role, "content": message.content}


def build_body(
    request: ModelRequest, configured: Mapping[str, Any], *, stream: bool
) -> dict[str, Any]:
    """The JSON body of one ``/ai/run`` call.

    ``configured`` (the config's ``options``) is overridden by
    ``request.options``; both are sent as-is, except the keys the provider
    writes itself (messages, tools, stream).
    """
    body: dict[str, Any] = {**configured, **request.options}
    body.pop("prompt", None)
    body["messages"] = [message_to_wire(m) for m in request.messages]
    if request.tools:
        body["tools"] = [tool_to_wire(t) for t in request.tools]
    else:
        body.pop("tools", None)
    if request.response_format is not None:
        body["response_format"] = request.response_format
    body["stream"] = stream
    return body


# -- replies -----------------------------------------------------------------------


def errors_text(errors: Any) -> str | None:
    """The message of a Cloudflare ``errors: [{code, message}]`` list, with the code."""
    if not isinstance(errors, list):
        return None
    parts = []
    for error in errors:
        if isinstance(error, Mapping):
            message = error.get("message")
            code = error.get("code")
            if isinstance(message, str) and message:
                parts.append(f"{message} (code {code})" if code is not None else message)
        elif isinstance(error, str) and error:
            parts.append(error)
    return "; ".join(parts) or None


def error_in(payload: Mapping[str, Any]) -> str | None:
    """The error a reply or stream chunk reports, if it reports one."""
    text = errors_text(payload.get("errors"))
    if text:
        return text
    error = payload.get("error")
    if isinstance(error, Mapping):
        message = error.get("message")
        if isinstance(message, str):
            return message
        return json.dumps(error)[:300]
    if isinstance(error, str) and error:
        return error
    if payload.get("success") is False:
        return "the API answered success: false without saying why"
    return None


def error_in_text(data: str) -> str | None:
    """The error in an ``error`` event's data: JSON of an error, or None to use the text."""
    try:
        payload = json.loads(data)
    except ValueError:
        return None
    if isinstance(payload, Mapping):
        return error_in(payload) or (
            payload["message"] if isinstance(payload.get("message"), str) else None
        )
    return payload if isinstance(payload, str) and payload else None


def text_of(value: Any) -> str:
    """Assistant text: a string as-is, JSON mode's object re-encoded, nothing for null."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, int(value))


def usage_of(value: Any) -> Usage:
    if not isinstance(value, Mapping):
        return Usage(requests=1)
    prompt_details = value.get("prompt_tokens_details")
    completion_details = value.get("completion_tokens_details")
    return Usage(
        input_tokens=_count(value.get("prompt_tokens", value.get("input_tokens"))),
        output_tokens=_count(value.get("completion_tokens", value.get("output_tokens"))),
        reasoning_tokens=_count(
            completion_details.get("reasoning_tokens")
            if isinstance(completion_details, Mapping)
            else None
        ),
        cache_read_tokens=_count(
            prompt_details.get("cached_tokens") if isinstance(prompt_details, Mapping) else None
        ),
        requests=1,
    )


@dataclass
class PendingCall:
    """A tool call as read from the reply, before it gets its final id."""

    name: str
    arguments: Any = None
    id: str | None = None


@dataclass
class Reply:
    """One assistant reply, assembled from a whole body or from stream chunks."""

    text: str = ""
    calls: list[PendingCall] = field(default_factory=list)
    raw_finish: str | None = None
    usage: Usage | None = None
    model: str | None = None


def pending_call(item: Any) -> PendingCall | None:
    """A complete call in native (``{name, arguments}``) or OpenAI form; None if empty."""
    if not isinstance(item, Mapping):
        raise ProviderError(f"cloudflare: a tool call is not an object: {str(item)[:120]!r}")
    function = item.get("function")
    function = function if isinstance(function, Mapping) else {}
    name = function.get("name") or item.get("name")
    arguments = function.get("arguments", item.get("arguments", item.get("parameters")))
    call_id = item.get("id")
    if not name:
        if not call_id and arguments in (None, "", {}):
            return None  # a closing chunk some servers send: nothing in it
        raise ProviderError("cloudflare: the model returned a tool call without a tool name")
    return PendingCall(str(name), arguments, call_id if isinstance(call_id, str) else None)


def decode_arguments(value: Any) -> tuple[dict[str, Any], str | None]:
    """``(arguments, raw_arguments)``: an object or JSON text of one; else the text kept raw."""
    return decode_tool_arguments(value)


def finish_calls(reply: Reply) -> list[ToolCall]:
    """The reply's calls with decoded arguments and ids that are present and distinct.

    A call without an id gets one derived from the reply's text, its calls and
    its position, so the same reply always yields the same ids (a replayed
    journal and a retried stream agree) and two calls never share one.
    """
    decoded = [decode_arguments(p.arguments) for p in reply.calls]
    fingerprint = json.dumps(
        [
            reply.text,
            [[p.name, args, raw] for p, (args, raw) in zip(reply.calls, decoded, strict=True)],
        ],
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    seen: set[str] = set()
    calls: list[ToolCall] = []
    for index, (pending, (arguments, raw)) in enumerate(zip(reply.calls, decoded, strict=True)):
        call_id = pending.id or ""
        salt = 0
        while not call_id or call_id in seen:
            call_id = short_id(f"{fingerprint}#{index}#{salt}")
            salt += 1
        seen.add(call_id)
        calls.append(
            ToolCall(id=call_id, name=pending.name, arguments=arguments, raw_arguments=raw)
        )
    return calls


def finish_reason(reply: Reply, calls: Sequence[ToolCall]) -> FinishReason:
    if calls:
        return "tool_calls"
    raw = (reply.raw_finish or "").lower()
    if raw in _LENGTH_REASONS:
        return "length"
    if raw == "content_filter":
        return "content_filter"
    return "stop"


def read_result(result: Mapping[str, Any]) -> Reply:
    """A whole (non-streamed) ``result`` in the native or the OpenAI shape."""
    reply = Reply(usage=usage_of(result.get("usage")))
    if isinstance(result.get("model"), str):
        reply.model = result["model"]
    choices = result.get("choices")
    if isinstance(choices, list) and choices:
        choice = choices[0] if isinstance(choices[0], Mapping) else {}
        message = choice.get("message")
        message = message if isinstance(message, Mapping) else {}
        reply.text = text_of(message.get("content"))
        items = message.get("tool_calls") or []
        finish = choice.get("finish_reason")
        reply.raw_finish = finish if isinstance(finish, str) else None
    else:
        reply.text = text_of(result.get("response"))
        items = result.get("tool_calls") or []
        finish = result.get("finish_reason")
        reply.raw_finish = finish if isinstance(finish, str) else None
    if not isinstance(items, list):
        raise ProviderError("cloudflare: tool_calls in the reply is not a list")
    reply.calls = [c for c in (pending_call(i) for i in items) if c is not None]
    return reply


@dataclass
class _Partial:
    """A call whose pieces arrive in several chunks (OpenAI-style ``index`` deltas)."""

    id: str | None = None
    name: str = ""
    text: str = ""
    value: Any = None


class StreamAssembler:
    """Builds a :class:`Reply` from stream chunks; :meth:`feed` returns new text.

    Chunks are native (``{response, tool_calls, usage}``, ``p`` padding
    ignored) or OpenAI-style (``{choices: [{delta, finish_reason}]}``). A tool
    call item with an ``index`` is a fragment merged with the others of that
    index, its ``arguments`` text concatenated; an item without one is a
    whole call.
    """

    def __init__(self) -> None:
        self.reply = Reply()
        self._texts: list[str] = []
        # Calls in order of first appearance: whole ones, and fragments by index.
        self._order: list[PendingCall | _Partial] = []
        self._by_index: dict[int, _Partial] = {}

    def feed(self, chunk: Mapping[str, Any]) -> str:
        new_text = text_of(chunk.get("response"))
        self._tool_items(chunk.get("tool_calls"))
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            choice = choices[0]
            delta = choice.get("delta")
            if isinstance(delta, Mapping):
                new_text += text_of(delta.get("content"))
                self._tool_items(delta.get("tool_calls"))
            self._finish(choice.get("finish_reason"))
        self._finish(chunk.get("finish_reason"))
        if chunk.get("usage") is not None:
            self.reply.usage = usage_of(chunk["usage"])
        if isinstance(chunk.get("model"), str):
            self.reply.model = chunk["model"]
        if new_text:
            self._texts.append(new_text)
        return new_text

    def _finish(self, value: Any) -> None:
        if isinstance(value, str) and value:
            self.reply.raw_finish = value

    def _tool_items(self, items: Any) -> None:
        if items is None:
            return
        if not isinstance(items, list):
            raise ProviderError("cloudflare: tool_calls in a stream chunk is not a list")
        for item in items:
            index = item.get("index") if isinstance(item, Mapping) else None
            if isinstance(index, int) and not isinstance(index, bool):
                self._fragment(index, item)
            else:
                call = pending_call(item)
                if call is not None:
                    self._order.append(call)

    def _fragment(self, index: int, item: Mapping[str, Any]) -> None:
        partial = self._by_index.get(index)
        if partial is None:
            partial = self._by_index[index] = _Partial()
            self._order.append(partial)
        function = item.get("function")
        function = function if isinstance(function, Mapping) else {}
        if isinstance(item.get("id"), str) and item["id"] and not partial.id:
            partial.id = item["id"]
        name = function.get("name") or item.get("name")
        if isinstance(name, str) and name and not partial.name:
            partial.name = name
        arguments = function.get("arguments", item.get("arguments"))
        if isinstance(arguments, str):
            partial.text += arguments
        elif arguments is not None:
            partial.value = arguments

    def result(self) -> Reply:
        reply = self.reply
        reply.text = "".join(self._texts)
        calls: list[PendingCall] = []
        for entry in self._order:
            if isinstance(entry, PendingCall):
                calls.append(entry)
                continue
            if not entry.name:
                if not entry.id and not entry.text and entry.value is None:
                    continue  # only empty closing fragments were seen for this index
                raise ProviderError("cloudflare: the stream sent a tool call without a tool name")
            arguments = entry.text if entry.text else entry.value
            calls.append(PendingCall(entry.name, arguments, entry.id))
        reply.calls = calls
        if reply.usage is None:
            reply.usage = Usage(requests=1)
        return reply
