"""Reassembling a streamed chat completion from its ``chat.completion.chunk`` events.

Text arrives in ``choices[0].delta.content`` pieces; tool calls arrive as
``delta.tool_calls[i]`` entries keyed by ``index``, the id and name on the
first entry of a call and ``function.arguments`` spread over many; the
finish reason on the last content chunk; usage on a final chunk with empty
``choices`` (OpenAI with ``include_usage``), on the last choice chunk (some
compatible servers), or nowhere.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from koboi.messages import Message, ModelResponse, ToolCall

# The chunks are decoded JSON, so objects are always dicts: the checks below test
# against dict, several times cheaper per chunk than the Mapping ABC.
from koboi_openai.wire import (
    finish_from_wire,
    make_tool_call,
    text_from_wire,
    usage_from_wire,
)


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def add_name(self, piece: str) -> None:
        # OpenAI sends the whole name once. Some servers repeat it on every
        # entry, a few send it in pieces: keep one copy either way.
        if not self.name or piece.startswith(self.name):
            self.name = piece
        elif piece != self.name:
            self.name += piece

    def finish(self) -> ToolCall:
        return make_tool_call(self.id, self.name, "".join(self.arguments))


@dataclass
class StreamAssembler:
    """Feed it decoded chunks; it returns the text to deliver and builds the final response."""

    model: str = ""
    text: list[str] = field(default_factory=list)
    calls: list[_PartialCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Mapping[str, Any] | None = None
    _by_index: dict[int, _PartialCall] = field(default_factory=dict)

    def add(self, chunk: Mapping[str, Any]) -> list[str]:
        """Take one chunk; return its non-empty text pieces, in order."""
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            # OpenAI sends "usage": null on every chunk but the last.
            self.usage = chunk["usage"]
        choice = _first_choice(chunk.get("choices"))
        if choice is None:
            return []
        pieces: list[str] = []
        delta = choice.get("delta")
        if isinstance(delta, dict):
            for key in ("content", "refusal"):
                # Ollama sends "content": null, others "": never deliver empty text.
                piece = text_from_wire(delta.get(key))
                if piece:
                    pieces.append(piece)
            tool_calls = delta.get("tool_calls")
            if isinstance(tool_calls, list):
                self._add_calls(tool_calls)
            legacy = delta.get("function_call")
            if isinstance(legacy, dict):
                self._add_call_entry(None, legacy)
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]
        self.text.extend(pieces)
        return pieces

    def _add_calls(self, entries: list[Any]) -> None:
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            index = entry.get("index")
            if isinstance(index, bool) or not isinstance(index, int):
                index = None
            function = entry.get("function")
            function = function if isinstance(function, dict) else {}
            self._add_call_entry(index, function, call_id=entry.get("id"))

    def _add_call_entry(
        self, index: int | None, function: Mapping[str, Any], *, call_id: Any = None
    ) -> None:
        new_id = call_id if isinstance(call_id, str) else ""
        name = function.get("name")
        name = name if isinstance(name, str) else ""
        current = self._by_index.get(index) if index is not None else None
        if index is None:
            # No index (some servers send whole calls without one): an entry that
            # names a call starts one; one that does not continues the last.
            starts = bool(new_id or name) or not self.calls
            current = None if starts else self.calls[-1]
        elif current is not None and new_id and current.id and new_id != current.id:
            # A different id at the same index: a server that numbers every call 0.
            current = None
        if current is None:
            current = _PartialCall()
            self.calls.append(current)
            if index is not None:
                self._by_index[index] = current
        if new_id and not current.id:
            current.id = new_id
        if name:
            current.add_name(name)
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            current.arguments.append(arguments)
        elif isinstance(arguments, dict):
            current.arguments.append(json.dumps(arguments, ensure_ascii=False))

    @property
    def finished(self) -> bool:
        """True once a chunk said why the reply ended (the reply itself is complete)."""
        return self.finish_reason is not None

    def response(self, fallback_model: str) -> ModelResponse:
        calls = tuple(call.finish() for call in self.calls if call.name or call.arguments)
        return ModelResponse(
            message=Message.assistant("".join(self.text), tool_calls=calls),
            usage=usage_from_wire(self.usage),
            finish_reason=finish_from_wire(self.finish_reason, has_tool_calls=bool(calls)),
            model=self.model or fallback_model,
        )


def _first_choice(choices: Any) -> Mapping[str, Any] | None:
    """Choice 0 (koboi asks for one completion; ``n`` > 1 is not supported)."""
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return choice
    return None
