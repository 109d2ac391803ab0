"""Message, tool-call and model request/response types shared by every plugin.

These are the wire-neutral types of koboi: a provider plugin translates them to
and from its API's format; the loop, the journal and the tools only ever see
these.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant", "tool"]


class DuplicateKeyObject(dict[str, Any]):
    """A JSON object that named a key more than once (what :func:`loads_json` makes of it).

    ``json.loads`` silently keeps the last value of a repeated key, so an
    argument could be checked by one reader and used by another with a
    different value. Providers decode with :func:`loads_json`; the loop
    refuses tool arguments that contain one of these.
    """

    duplicate_key: str = ""


def _object_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    duplicate = None
    for key, value in pairs:
        if key in result and duplicate is None:
            duplicate = key
        result[key] = value
    if duplicate is None:
        return result
    marked = DuplicateKeyObject(result)
    marked.duplicate_key = duplicate
    return marked


def loads_json(text: str | bytes) -> Any:
    """``json.loads``, except that an object repeating a key becomes a DuplicateKeyObject."""
    return json.loads(text, object_pairs_hook=_object_pairs)


def duplicate_key(value: Any) -> str | None:
    """The first repeated key anywhere in ``value`` (decoded by :func:`loads_json`), or None."""
    if isinstance(value, DuplicateKeyObject):
        return value.duplicate_key
    if isinstance(value, Mapping):
        items: Any = value.values()
    elif isinstance(value, list | tuple):
        items = value
    else:
        return None
    for item in items:
        found = duplicate_key(item)
        if found is not None:
            return found
    return None


def decode_tool_arguments(value: Any) -> tuple[dict[str, Any], str | None]:
    """``(arguments, raw_arguments)`` of a tool call, from argument text or a decoded object.

    Empty text or None is a call without arguments. Text that is not a JSON
    object, or an object that repeats a key at any depth, is kept as raw text
    (``arguments`` empty) so the loop refuses the call and tells the model why
    (see :func:`argument_problem`).
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}, None
    if isinstance(value, str):
        try:
            decoded = loads_json(value)
        except ValueError:
            return {}, value
    else:
        decoded = value
    if not isinstance(decoded, Mapping):
        return {}, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if duplicate_key(decoded) is not None:
        if isinstance(value, str):
            return {}, value
        return {}, _dump_pairs(decoded)
    return dict(decoded), None


def _dump_pairs(value: Any) -> str:
    """JSON text of a decoded value, with a repeated key written out (marked)."""
    text = json.dumps(value, ensure_ascii=False)
    key = duplicate_key(value)
    return f"{text} (the key {key!r} appeared more than once)"


def argument_problem(raw: str) -> str:
    """Why ``raw`` argument text was not accepted: what the model should fix."""
    try:
        decoded = loads_json(raw)
    except json.JSONDecodeError as exc:
        return f"not valid JSON ({exc.msg} at position {exc.pos}): {raw[:200]!r}"
    except ValueError:
        return f"not valid JSON: {raw[:200]!r}"
    key = duplicate_key(decoded)
    if key is not None:
        return f"the key {key!r} appears more than once; send each argument once"
    return f"not a JSON object: {raw[:200]!r}"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """A model's request to call one tool.

    ``arguments`` holds the decoded JSON object. When the model produced text
    that is not a JSON object, ``arguments`` is empty and ``raw_arguments``
    keeps the text, so the loop can tell the model what was wrong.
    """

    id: str = Field(description="Identifier the provider gave this call; echoed in the result.")
    name: str = Field(description="Name of the tool to call, exactly as registered.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Decoded JSON arguments.")
    raw_arguments: str | None = Field(
        default=None, description="Undecodable argument text, when the model sent invalid JSON."
    )


class Message(_Frozen):
    """One message of a conversation."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = Field(
        default=None, description="For role 'tool': the call answered."
    )
    name: str | None = Field(default=None, description="For role 'tool': the tool's name.")
    is_error: bool = Field(default=False, description="For role 'tool': the call failed.")
    provider_data: dict[str, Any] | None = Field(
        default=None,
        description="Opaque data a provider must see again on the next turn (e.g. thinking blocks).",
    )

    @classmethod
    def system(cls, content: str) -> Message:
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str) -> Message:
        return cls(role="user", content=content)

    @classmethod
    def assistant(cls, content: str = "", tool_calls: tuple[ToolCall, ...] = ()) -> Message:
        return cls(role="assistant", content=content, tool_calls=tool_calls)

    @classmethod
    def tool_result(cls, call: ToolCall, content: str, *, is_error: bool = False) -> Message:
        return cls(
            role="tool", content=content, tool_call_id=call.id, name=call.name, is_error=is_error
        )


class Usage(_Frozen):
    """Token usage of one model call, or the sum of several.

    ``input_tokens`` counts every input token, cached or not;
    ``cache_read_tokens`` and ``cache_write_tokens`` say how many of them were
    read from or written to the provider's prompt cache. ``output_tokens``
    includes ``reasoning_tokens``. Providers whose APIs count differently
    convert to this, so cost accounting is the same everywhere.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    requests: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        # Sums of valid counts are valid: skip validation, this runs every step.
        return Usage.model_construct(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            requests=self.requests + other.requests,
        )


FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "error"]


class ModelResponse(_Frozen):
    """What a provider returns for one call: an assistant message and its usage."""

    message: Message
    usage: Usage = Usage()
    finish_reason: FinishReason = "stop"
    model: str = ""
    cost_usd: float | None = Field(
        default=None,
        description="What the call cost at the prices configured for its provider; set by the "
        "kernel, None when no prices are configured.",
    )


class ToolSpec(_Frozen):
    """What a model is told about a tool: name, description, JSON schema of the arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


class ModelRequest(_Frozen):
    """One request to a model provider."""

    messages: Sequence[Message]
    tools: Sequence[ToolSpec] = ()
    options: dict[str, Any] = Field(default_factory=dict)
    response_format: dict[str, Any] | None = None


class TextDelta(_Frozen):
    """A piece of assistant text, streamed as the model produces it."""

    kind: Literal["text_delta"] = "text_delta"
    text: str


class ResponseDone(_Frozen):
    """The last event of a provider stream: the complete response."""

    kind: Literal["done"] = "done"
    response: ModelResponse


ModelStreamEvent = TextDelta | ResponseDone
