"""Per-step seams: interceptors around model and tool calls, and event observers.

pluggy has no async, so per-step behaviour is not a pluggy hook: plugins
register :class:`Interceptor` objects (through ``koboi_register_interceptors``)
and the kernel awaits their methods in a fixed order: ascending ``priority``,
then registration order. Only methods a subclass overrides are called.

Order of a tool call (documented in docs/architecture.md)::

    exact lookup -> strict argument validation -> before_tool_call (policy stages)
    -> approval -> admit_tool_call (admission: rate limits) -> journal "started"
    -> sandbox.run_tool -> after_tool_call -> journal "finished"

``after_tool_call`` runs before the result is journaled, so a redacting
interceptor keeps secrets out of the journal too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pydantic import BaseModel

    from koboi.config import AgentConfig
    from koboi.messages import ModelRequest, ModelResponse, ToolCall
    from koboi.store import JournalEvent
    from koboi.tools import Tool, ToolResult

VerdictAction = Literal["allow", "deny", "ask"]


@dataclass(frozen=True)
class Verdict:
    """An interceptor's decision on a tool call.

    ``deny`` refuses the call (the model is told ``reason``); ``ask`` sends it to
    the approver even if its risk would not; ``allow`` lets it pass this stage
    (and skips approval when every verdict is ``allow`` and the
    interceptor sets ``skip_approval``).
    """

    action: VerdictAction
    reason: str = ""
    stage: str = ""
    skip_approval: bool = False


@dataclass
class RunInfo:
    """What an interceptor knows about the run it is in."""

    session_id: str
    step: int
    config: AgentConfig
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PendingToolCall:
    """A tool call that passed lookup and argument validation."""

    call: ToolCall
    tool: Tool
    args: BaseModel
    step: int


class Interceptor:
    """Base class of per-step interceptors and observers. Override what you need."""

    #: Shown in journal events and ``koboi plugins inspect``.
    name: str = "interceptor"
    #: Lower runs first. Kernel convention: 100 policy, 200 guardrails, 300 trust, 500 admission.
    priority: int = 100

    async def before_model_call(self, request: ModelRequest, run: RunInfo) -> ModelRequest | None:
        """Return a replacement request (e.g. a trimmed context) or None to keep it."""
        return None

    async def after_model_call(self, response: ModelResponse, run: RunInfo) -> ModelResponse | None:
        """Return a replacement response or None to keep it."""
        return None

    async def before_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
        """Decide before approval: deny, ask, allow, or None for no opinion."""
        return None

    async def admit_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
        """Decide after approval, just before the call runs (rate limits, quotas)."""
        return None

    async def after_tool_call(
        self, pending: PendingToolCall, result: ToolResult, run: RunInfo
    ) -> ToolResult | None:
        """Return a replacement result (e.g. redacted) or None to keep it."""
        return None

    async def on_event(self, event: JournalEvent, run: RunInfo) -> None:
        """Observe every journal event after it is committed. Must not raise."""
        return None


def overrides(obj: Interceptor, method: str) -> bool:
    """True when ``obj`` overrides ``method`` of :class:`Interceptor`."""
    return getattr(type(obj), method) is not getattr(Interceptor, method)
