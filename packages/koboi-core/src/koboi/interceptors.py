"""Per-step seams: interceptors around model and tool calls, and event observers.

pluggy has no async, so per-step behaviour is not a pluggy hook: plugins
register :class:`Interceptor` objects (through ``koboi_register_interceptors``)
and the kernel awaits their methods in a fixed order: ascending ``priority``,
then registration order. Only methods a subclass overrides are called.

Order of a tool call (documented in docs/architecture.md)::

    exact lookup -> strict argument validation -> before_tool_call (mode, policy,
    guardrails, trust) -> approval (after_approval) -> admit_tool_call (rate limits)
    -> journal "started" + audit "before" -> sandbox.run_tool -> after_tool_call
    -> journal "finished" + audit "after"

``after_tool_call`` runs before the result is journaled, so a redacting
interceptor keeps secrets out of the journal too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from pydantic import BaseModel

    from koboi.approval import ApprovalDecision, ApprovalRequest
    from koboi.config import AgentConfig
    from koboi.messages import ModelRequest, ModelResponse, ToolCall
    from koboi.store import JournalEvent, Store
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


class StreamRedaction(Protocol):
    """Redacts a text that arrives in pieces (a streamed answer)."""

    def feed(self, text: str) -> str:
        """Take the next piece; return what is safe to show now (may hold some back)."""

    def flush(self) -> str:
        """The end of the text: return what was held back, redacted."""


class Redaction(Protocol):
    """Masks secrets. The kernel applies it to every journal event and audit record,
    and to every event a run yields (streamed text included)."""

    @property
    def active(self) -> bool:
        """False when there is nothing to mask (the kernel then skips the work)."""

    def redact(self, text: str) -> str:
        """``text`` with each secret masked."""

    def redact_data(self, data: Any) -> Any:
        """JSON-like ``data`` with every string (keys too) redacted: a new object when
        something was masked, possibly ``data`` itself when nothing was (the kernel never
        changes what it gets back)."""

    def stream(self) -> StreamRedaction:
        """A redactor for one streamed text: what it emits, joined, equals ``redact(text)``."""


@dataclass
class RunInfo:
    """What an interceptor knows about the run it is in."""

    session_id: str
    step: int
    config: AgentConfig
    state: dict[str, Any] = field(default_factory=dict)
    #: Audit records waiting for the run's next journal commit (see :meth:`audit`).
    pending_audit: list[dict[str, Any]] = field(default_factory=list, repr=False)
    #: False when nobody can approve anything (a job, a schedule, an A2A call).
    interactive: bool = True
    #: The run's store, for state that must outlive the process (trust, rate counters).
    store: Store | None = field(default=None, repr=False)
    #: True when the run's sandbox isolates its tools (see :attr:`koboi.Sandbox.isolated`).
    sandbox_isolated: bool = False

    def audit(self, record: Mapping[str, Any]) -> None:
        """Add a record to the audit trail.

        It is committed with the run's next journal events, in the same
        transaction, so it is durable before the action that follows begins.
        """
        self.pending_audit.append({**record, "session_id": self.session_id})


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
    #: Lower runs first. Kernel convention: 50 mode, 100 policy, 200 guardrails, 300 trust,
    #: 500 admission.
    priority: int = 100
    #: Stages of the pipeline this interceptor enforces; the kernel refuses to open an
    #: agent whose ``agent.mode`` needs a ``"mode"`` stage that nothing enforces.
    enforces: frozenset[str] = frozenset()

    def redaction(self) -> Redaction | None:
        """A :class:`Redaction` the kernel applies to journal, audit trail and events."""
        return None

    async def before_model_call(self, request: ModelRequest, run: RunInfo) -> ModelRequest | None:
        """Return a replacement request (e.g. a trimmed context) or None to keep it."""
        return None

    async def after_model_call(self, response: ModelResponse, run: RunInfo) -> ModelResponse | None:
        """Return a replacement response or None to keep it."""
        return None

    async def before_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
        """Decide before approval: deny, ask, allow, or None for no opinion."""
        return None

    async def after_approval(
        self,
        pending: PendingToolCall,
        request: ApprovalRequest,
        decision: ApprovalDecision,
        run: RunInfo,
    ) -> None:
        """Learn an approver's decision (e.g. turn an 'always' into a trust rule)."""
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
