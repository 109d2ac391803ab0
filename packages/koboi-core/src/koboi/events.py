"""Typed events an agent yields while it runs (``agent.stream(...)``).

These are for callers (the CLI, the server, applications). The journal keeps
its own, more detailed events; ``event_id`` links a caller event to the journal
event that recorded it, when there is one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from koboi.messages import Message, ToolCall, Usage

Outcome = Literal[
    "completed", "max_iterations", "budget_exceeded", "failed", "cancelled", "refused", "suspended"
]
"""How a run ended. ``refused``: an interceptor refused it before it began
(``on_run_start``); ``suspended``: it waits for input (a tool called
``ctx.suspend``) and continues with ``agent.resume(session_id, reply=...)``."""


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
    #: For ``suspended``: what the run waits for (``reason``, ``kind``, ``data``...).
    suspension: Mapping[str, Any] | None = None
    #: For ``refused``: the stage that refused the run.
    refused_by: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "completed"

    @property
    def content(self) -> str:
        """The final answer: another name of :attr:`output` (koboi-agent's)."""
        return self.output


@dataclass(frozen=True, slots=True)
class FinalEvent:
    """The last event of every run, whatever its outcome."""

    result: RunResult
    event_id: int | None = None
    kind: Literal["final"] = "final"


@dataclass(frozen=True, slots=True)
class PluginEvent:
    """Something a plugin reported: recorded in the journal (``event_id`` set) with
    ``run.record(...)``, or progress that is only streamed (``run.emit(...)``)."""

    type: str
    data: Mapping[str, Any]
    step: int
    event_id: int | None = None
    #: The tool call the event belongs to, when a tool reported it.
    call_id: str | None = None
    kind: Literal["plugin"] = "plugin"


@dataclass(frozen=True, slots=True)
class ChildEvent:
    """An event of a child run (a sub-agent, a runner's node), as it happens.

    ``parent_call_id`` is the parent's tool call that started the child (None for a
    child a runner started), ``tag`` what the starter named it (a node id), and
    ``session_id`` the child's own session.
    """

    event: AgentEvent
    session_id: str
    parent_call_id: str | None = None
    tag: str | None = None
    kind: Literal["child"] = "child"


AgentEvent = (
    TextDeltaEvent
    | ToolCallEvent
    | ToolResultEvent
    | StepEvent
    | PluginEvent
    | ChildEvent
    | FinalEvent
)
