"""Message contents on spans (``telemetry.capture_content``): the GenAI conventions'
JSON shapes, every string masked by the kernel's secret rules, then cut to size.

Contents reach a span only through :func:`masked_json`: the text is masked after it
is serialized, so a secret anywhere in it (a key, a value, an argument) is masked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from koboi.messages import Message
from koboi.secrets import mask_secrets

#: What a cut attribute ends with.
CUT = "…[cut]"


def masked_json(value: Any, limit: int) -> str:
    """``value`` as JSON, secrets masked, at most ``limit`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return masked_text(text, limit)


def masked_text(text: str, limit: int) -> str:
    masked = mask_secrets(text)
    if len(masked) > limit:
        return masked[: max(0, limit - len(CUT))] + CUT
    return masked


def message_parts(message: Message) -> dict[str, Any]:
    """One message in the conventions' shape: ``{"role", "parts": [...]}``."""
    parts: list[dict[str, Any]] = []
    if message.role == "tool":
        parts.append(
            {"type": "tool_call_response", "id": message.tool_call_id, "result": message.content}
        )
    elif message.content:
        parts.append({"type": "text", "content": message.content})
    for call in message.tool_calls:
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        )
    return {"role": message.role, "parts": parts}


def input_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    return [message_parts(m) for m in messages]


def output_messages(response: Mapping[str, Any] | Any) -> list[dict[str, Any]]:
    """The conventions' output messages of a ``ModelResponse`` (or its journaled dump)."""
    if isinstance(response, Mapping):
        message = Message.model_validate(response.get("message") or {"role": "assistant"})
        reason = str(response.get("finish_reason", "stop"))
    else:
        message, reason = response.message, str(response.finish_reason)
    return [{**message_parts(message), "finish_reason": reason}]
