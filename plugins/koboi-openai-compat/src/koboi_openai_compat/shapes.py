"""koboi's run results as OpenAI objects: ``chat.completion``, ``chat.completion.chunk``,
usage, finish reasons; and the SSE frames of koboi's own stream read back as events."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: How each outcome of a koboi run reads as an OpenAI ``finish_reason`` (``failed`` is an
#: error instead).
FINISH_REASONS = {
    "completed": "stop",
    "suspended": "stop",
    "cancelled": "stop",
    "max_iterations": "length",
    "budget_exceeded": "length",
    "refused": "content_filter",
}

#: The fields of a run's end (koboi's ``final`` event, ``koboi_server.sse.final_data``).
FINAL_KEYS = (
    "outcome",
    "output",
    "steps",
    "error",
    "usage",
    "cost_usd",
    "refused_by",
    "suspension",
)

#: A keepalive comment of koboi's stream (passed on as one).
KEEPALIVE = "keepalive"


def usage_of(usage: Mapping[str, Any] | None) -> dict[str, Any]:
    """koboi's usage (input/output tokens, cache reads, reasoning) as OpenAI's."""
    usage = usage or {}
    prompt = int(usage.get("input_tokens") or 0)
    completion = int(usage.get("output_tokens") or 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": int(usage.get("cache_read_tokens") or 0)},
        "completion_tokens_details": {"reasoning_tokens": int(usage.get("reasoning_tokens") or 0)},
    }


@dataclass
class ToolActivity:
    """The tool calls a run made, by call id, as the journal tells them."""

    calls: dict[str, dict[str, Any]] = field(default_factory=dict)

    def see(self, name: str, data: Mapping[str, Any]) -> dict[str, Any] | None:
        """Take one event of koboi's stream; the call it concerns, when it concerns one.

        The calls a model asked for come with its ``step`` (a call refused before it
        started — denied, say — has no ``tool_call`` event); ``tool_call`` says it runs.
        """
        if name == "step":
            for asked in data.get("tool_calls") or ():
                self.calls.setdefault(
                    str(asked.get("id")),
                    {
                        "id": asked.get("id"),
                        "name": asked.get("name"),
                        "arguments": asked.get("arguments", {}),
                    },
                )
            return None
        call_id = str(data.get("call_id") or "")
        if not call_id:
            return None
        if name == "tool_call":
            started = self.calls.setdefault(call_id, {"id": call_id})
            started.update(name=data.get("name"), arguments=data.get("arguments", {}))
            return started
        call = self.calls.get(call_id)
        if call is None:
            return None
        if name == "tool_result":
            call.update(
                content=data.get("content"),
                is_error=bool(data.get("is_error")),
                refused_by=data.get("refused_by"),
            )
        elif name == "approval_decided":
            call["approval"] = {
                "approved": data.get("approved"),
                "reason": data.get("reason"),
                "decided_by": data.get("decided_by"),
            }
        elif name == "pending_approval":
            call["approval"] = {"approval_id": data.get("approval_id"), "status": "pending"}
        elif name == "tool_suspended":
            call["suspended"] = {"reason": data.get("reason"), "kind": data.get("kind")}
        else:
            return None
        return call

    def listed(self) -> list[dict[str, Any]]:
        return list(self.calls.values())


def koboi_part(session_id: str, final: Mapping[str, Any], tools: ToolActivity) -> dict[str, Any]:
    """What koboi adds to a completion (OpenAI clients keep unknown fields): the session to
    continue, how the run ended, and the tool calls it made on the server."""
    part: dict[str, Any] = {
        "session_id": session_id,
        "outcome": final.get("outcome"),
        "steps": final.get("steps"),
        "cost_usd": final.get("cost_usd"),
        "tool_calls": tools.listed(),
    }
    for optional in ("error", "suspension", "refused_by"):
        if final.get(optional) is not None:
            part[optional] = final[optional]
    return part


def answer_text(final: Mapping[str, Any]) -> str:
    """The assistant's text of a finished run (what a suspended run asks, when it said nothing)."""
    output = str(final.get("output") or "")
    suspension = final.get("suspension")
    if not output and isinstance(suspension, Mapping):
        return str(suspension.get("reason") or "")
    return output


def completion(
    completion_id: str,
    model: str,
    created: int,
    session_id: str,
    final: Mapping[str, Any],
    tools: ToolActivity,
) -> dict[str, Any]:
    """A ``chat.completion`` of a run that ended (not ``failed``)."""
    outcome = str(final.get("outcome"))
    text = answer_text(final)
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if outcome == "refused":
        message = {"role": "assistant", "content": None, "refusal": final.get("error") or text}
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": FINISH_REASONS.get(outcome, "stop"),
                "logprobs": None,
            }
        ],
        "usage": usage_of(final.get("usage")),
        "koboi": koboi_part(session_id, final, tools),
    }


@dataclass
class ChunkMaker:
    """The ``chat.completion.chunk`` objects of one streamed completion."""

    completion_id: str
    model: str
    created: int
    include_usage: bool

    def chunk(
        self,
        delta: Mapping[str, Any],
        finish_reason: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        made: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [
                {"index": 0, "delta": dict(delta), "finish_reason": finish_reason, "logprobs": None}
            ],
        }
        if self.include_usage:
            made["usage"] = None  # as OpenAI does: only the last chunk carries it
        made.update(extra)
        return made

    def usage_chunk(self, usage: Mapping[str, Any] | None) -> dict[str, Any]:
        return {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [],
            "usage": usage_of(usage),
        }


def data_line(payload: Mapping[str, Any]) -> bytes:
    return (
        b"data: "
        + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        + (b"\n\n")
    )


DONE = b"data: [DONE]\n\n"
KEEPALIVE_COMMENT = b": keepalive\n\n"


def read_frame(raw: bytes) -> tuple[str, dict[str, Any]] | str | None:
    """One frame of koboi's SSE stream (``koboi_server.sse.frame``): ``(event, data)``,
    :data:`KEEPALIVE` for a keepalive comment, None for anything else (``retry:``)."""
    text = raw.decode()
    if text.startswith(":"):
        return KEEPALIVE
    name: str | None = None
    data: str | None = None
    for line in text.split("\n"):
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data = line[len("data: ") :]
    if name is None or data is None:
        return None
    loaded = json.loads(data)
    return (name, loaded) if isinstance(loaded, dict) else None
