"""Typed events an agent yields while it runs (``agent.stream(...)``).

These are for callers (the CLI, the server, applications). The journal keeps
its own, more detailed events; ``event_id`` links a caller event to the journal
event that recorded it, when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from koboi.messages import Message, ToolCall, Usage

Outcome = Literal["completed", "max_iterations", "budget_exceeded", "failed", "cancelled"]


@dataclass(frozen=True, slots=True)
class TextDeltaEvent:
    """A piece of the assistant's text as the model produces it."""

    text: str
    step: int
    kind: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """The model asked for a tool call (before any decision on it)."""

    call: ToolCall
    step: int
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class ToolResultEvent:
    """A tool call ended: its result, or why it was refused (``refused_by`` names the stage)."""

    call_id: str
    name: str
    content: str
    is_error: bool
    step: int
    refused_by: str | None = None
    event_id: int | None = None
    kind: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, slots=True)
class StepEvent:
    """A model call finished: its step number, usage, and how many tool calls it asked for."""

    step: int
    usage: Usage
    tool_calls: int
    event_id: int | None = None
    kind: Literal["step"] = "step"


@dataclass(frozen=True)
class RunResult:
    """How a run ended."""

    session_id: str
    outcome: Outcome
    output: str
    usage: Usage
    steps: int
    messages: list[Message] = field(default_factory=list, repr=False)
    error: str | None = None
    #: Cost of the run's model calls at the configured prices (0.0 when none are set).
    cost_usd: float = 0.0

    @property
    def ok(self) -> bool:
        return self.outcome == "completed"


@dataclass(frozen=True, slots=True)
class FinalEvent:
    """The last event of every run, whatever its outcome."""

    result: RunResult
    event_id: int | None = None
    kind: Literal["final"] = "final"


AgentEvent = TextDeltaEvent | ToolCallEvent | ToolResultEvent | StepEvent | FinalEvent
