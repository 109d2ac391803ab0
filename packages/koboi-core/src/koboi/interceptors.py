"""Per-step seams: interceptors around runs, model calls and tool calls, and observers.

pluggy has no async, so per-step behaviour is not a pluggy hook: plugins
register :class:`Interceptor` objects (through ``koboi_register_interceptors``)
and the kernel awaits their methods in a fixed order: ascending ``priority``,
then registration order. Only methods a subclass overrides are called.

Order of a run (documented in docs/architecture.md)::

    run_started -> restore (plugin events handed back) -> on_run_start (context, or
    refuse) -> [before_model_call -> model -> after_model_call -> tool calls]*
    -> before_finish (accept, replace, or continue with a message) -> run_finished

Order of a tool call::

    exact lookup -> strict argument validation -> before_tool_call (mode, policy,
    guardrails, trust; may rewrite the arguments) -> approval (after_approval)
    -> admit_tool_call (rate limits) -> journal "started" + audit "before"
    -> sandbox.run_tool -> after_tool_call -> journal "finished" + audit "after"

``after_tool_call`` runs before the result is journaled, so a redacting
interceptor keeps secrets out of the journal too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from koboi.errors import KoboiError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from koboi.approval import ApprovalDecision, ApprovalRequest
    from koboi.config import AgentConfig
    from koboi.messages import ModelRequest, ModelResponse, ToolCall
    from koboi.plugins import PluginHost
    from koboi.sandbox import Sandbox
    from koboi.sidecalls import RunModel
    from koboi.store import JournalEvent, Store
    from koboi.tools import Tool, ToolResult
    from koboi.tracing import TraceContext

VerdictAction = Literal["allow", "deny", "ask"]


@dataclass(frozen=True)
class Verdict:
    """An interceptor's decision on a tool call.

    ``deny`` refuses the call (the model is told ``reason``); ``ask`` sends it to
    the approver even if its risk would not; ``allow`` lets it pass this stage
    (and skips approval when every verdict is ``allow`` and the
    interceptor sets ``skip_approval``).

    ``arguments``, with ``allow`` or ``ask`` in ``before_tool_call``, rewrites the
    call's arguments (a path made relative, a default filled in): they are
    validated against the tool's schema again, and every later stage, the approver,
    the journal and the tool see them. A rewrite that does not validate refuses the
    call.
    """

    action: VerdictAction
    reason: str = ""
    stage: str = ""
    skip_approval: bool = False
    arguments: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Refusal:
    """``on_run_start``'s answer when the run must not begin: the run ends ``refused``
    with ``reason`` (shown to whoever sent the message), before any model call."""

    reason: str
    stage: str = ""


@dataclass(frozen=True)
class FinishDecision:
    """``before_finish``'s answer about the final answer.

    - ``accept``: the answer stands (the same as returning None);
    - ``replace``: ``text`` is the answer instead (journaled as ``answer_replaced``);
    - ``continue``: the run goes on: ``text`` is added as a user message and the
      model is asked again (journaled as ``run_continued``). At most
      ``agent.max_continuations`` times per run; after that the answer is accepted
      and the refusal is audited, so a plugin cannot loop forever.
    """

    action: Literal["accept", "replace", "continue"]
    text: str = ""
    reason: str = ""

    @classmethod
    def replace(cls, text: str, reason: str = "") -> FinishDecision:
        return cls("replace", text, reason)

    @classmethod
    def continue_with(cls, message: str, reason: str = "") -> FinishDecision:
        return cls("continue", message, reason)


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


class RunControl(Protocol):
    """What :class:`RunInfo` asks of the run it describes (implemented by the loop)."""

    def record_plugin_event(self, event_type: str, data: Mapping[str, Any]) -> int: ...

    def emit(self, event_type: str, data: Mapping[str, Any], call_id: str | None) -> None: ...

    def add_context(self, text: str, scope: Literal["call", "session"], source: str) -> None: ...

    def pending_context(self) -> Sequence[str]: ...

    @property
    def model(self) -> RunModel: ...


#: Who is running in this task: the interceptor whose method runs, or the tool
#: being called, with the plugin-event namespace it may write (("", "") outside
#: both). ``add_context`` credits the name when not told its source; ``record`` and
#: ``emit`` refuse a type outside the namespace. A context variable, not an
#: attribute of the run, because tool calls run side by side in tasks of their own.
_SPEAKING: ContextVar[tuple[str, str]] = ContextVar("koboi_speaking", default=("", ""))


class speaking:  # lower case: used as a function, `with speaking(name, namespace):`
    """Mark ``name`` (writing ``<namespace>.*`` events; "" = any) as running here.

    A small class rather than a ``contextlib.contextmanager``: the loop enters it around
    every interceptor method and tool call, several times per step."""

    __slots__ = ("_token", "_who")

    def __init__(self, name: str, namespace: str = "") -> None:
        self._who = (name, namespace)

    def __enter__(self) -> None:
        self._token = _SPEAKING.set(self._who)

    def __exit__(self, *exc: object) -> None:
        _SPEAKING.reset(self._token)


def speaker() -> tuple[str, str]:
    """``(name, namespace)`` of what runs in this task (see :func:`speaking`)."""
    return _SPEAKING.get()


def namespace_of(icp: Interceptor) -> str:
    """The plugin events ``icp`` may write: ``<plugin id>.*`` (its ``event_namespace``
    when the application gave it directly, and then "" = any, when it has none)."""
    return icp.plugin or icp.event_namespace or ""


def check_namespace(event_type: str) -> None:
    """Refuse a plugin event outside the namespace of what runs in this task."""
    name, namespace = _SPEAKING.get()
    if namespace and not event_type.startswith(f"{namespace}."):
        raise KoboiError(
            f"{name!r} may journal and stream only its own plugin's events "
            f"('{namespace}.<name>'), not {event_type!r}"
        )


@dataclass
class RunInfo:
    """What an interceptor knows about the run it is in, and what it may ask of it."""

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
    #: Who the session belongs to (a server principal), None when nobody in particular.
    owner: str | None = None
    #: The user message the run answers: a resume's is the interrupted run's message,
    #: a direct tool call's is "".
    input: str = ""
    #: True when the run continues an interrupted or suspended one.
    resumed: bool = False
    #: The W3C trace context the run belongs to.
    trace: TraceContext | None = None
    #: The tools the model is offered now, by name (read-only).
    tools: Mapping[str, Tool] = field(default_factory=dict, repr=False)
    #: The plugin host the agent was assembled from.
    host: PluginHost | None = field(default=None, repr=False)
    #: The run's sandbox: a process an interceptor starts (a command hook, a checker)
    #: goes through it, confined like a tool's (``run_process(..., session_id=...)``).
    sandbox: Sandbox | None = field(default=None, repr=False)
    #: For a child run (a sub-agent, a runner's node): the run that started it; None
    #: for a run nobody started from inside another.
    parent: RunInfo | None = field(default=None, repr=False)
    #: The seq of this run's ``run_started``: the same when the run is resumed, and
    #: different for each run of a session (what a runner or a tool derives the ids
    #: of its children from, so a later message does not find the earlier run's).
    started_seq: int = 0
    _control: RunControl | None = field(default=None, repr=False)

    @property
    def root(self) -> RunInfo:
        """The run at the top of this run's tree (itself when it has no parent)."""
        run = self
        while run.parent is not None:
            run = run.parent
        return run

    def audit(self, record: Mapping[str, Any]) -> None:
        """Add a record to the audit trail.

        It is committed with the run's next journal events, in the same
        transaction, so it is durable before the action that follows begins.
        """
        self.pending_audit.append({**record, "session_id": self.session_id})

    def record(self, event_type: str, data: Mapping[str, Any]) -> int:
        """Journal a plugin event ``"<plugin id>.<name>"`` (JSON ``data``); return its seq.

        It is committed with the run's next batch (before the next model or tool call
        begins), redacted like every event, shown by ``koboi show``, carried by bundles
        and the server's event stream, and handed back to interceptors whose
        ``event_namespace`` is ``<plugin id>`` (:meth:`Interceptor.restore`) whenever
        the session continues, so the plugin can rebuild its state.
        """
        return self._require().record_plugin_event(event_type, data)

    def emit(self, event_type: str, data: Mapping[str, Any]) -> None:
        """Stream a plugin event (progress) to whoever follows the run; not journaled."""
        self._require().emit(event_type, data, None)

    def add_context(
        self, text: str, *, scope: Literal["call", "session"] = "call", source: str = ""
    ) -> None:
        """Add ``text`` as a system message for the model.

        ``scope="call"``: for the next model call only (the request rewrite is
        journaled with that call). ``scope="session"``: kept in the conversation from
        now on, journaled as ``context_added`` so resume and replay see it too.
        """
        self._require().add_context(text, scope, source)

    @property
    def call_context(self) -> tuple[str, ...]:
        """The texts added with ``add_context(scope="call")`` so far for the model call
        being prepared, in order: the kernel appends them after every
        ``before_model_call`` has run. Read-only; an interceptor that budgets the
        request (a context strategy) counts them. Empty outside a running loop."""
        if self._control is None:
            return ()
        return tuple(self._control.pending_context())

    @property
    def model(self) -> RunModel:
        """The run's own model stack for side calls (``await run.model.complete(...)``)."""
        return self._require().model

    def _require(self) -> RunControl:
        if self._control is None:
            raise RuntimeError("this RunInfo is not attached to a running loop")
        return self._control


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
    #: The id of the plugin that registered it (set by the kernel).
    plugin: str = ""
    #: The plugin events handed back to :meth:`restore`: types ``"<namespace>.*"``.
    event_namespace: str | None = None
    #: Optional store capabilities it needs, as ``(capability class, what for)``; an
    #: agent whose store lacks one is refused when it opens, in one line.
    store_needs: Sequence[tuple[type[Any], str]] = ()

    def redaction(self) -> Redaction | None:
        """A :class:`Redaction` the kernel applies to journal, audit trail and events."""
        return None

    async def restore(self, events: Sequence[JournalEvent], run: RunInfo) -> None:
        """Rebuild state from this plugin's own journaled events of the session.

        Called at the start of every run in a session that has events typed
        ``"<event_namespace>.*"`` (a new message, a resume, a replay), before
        :meth:`on_run_start`.
        """
        return None

    async def on_run_start(self, run: RunInfo) -> Refusal | None:
        """A run begins (``run.input``, ``run.resumed``): add context
        (``run.add_context``), or return a :class:`Refusal` to refuse it."""
        return None

    async def before_model_call(self, request: ModelRequest, run: RunInfo) -> ModelRequest | None:
        """Return a replacement request (e.g. a trimmed context) or None to keep it.

        A replacement is journaled with the call (which interceptor, the request's
        key and how it differs), so resume, replay and the response cache see the
        request that was actually sent.
        """
        return None

    async def after_model_call(self, response: ModelResponse, run: RunInfo) -> ModelResponse | None:
        """Return a replacement response or None to keep it."""
        return None

    async def before_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
        """Decide before approval: deny, ask, allow (maybe rewriting the arguments),
        or None for no opinion."""
        return None

    async def after_approval(
        self,
        pending: PendingToolCall,
        request: ApprovalRequest,
        decision: ApprovalDecision,
        run: RunInfo,
    ) -> None:
        """Learn an approver's decision (e.g. turn an 'always' into a trust rule).

        An exception here does not change the decision: it is logged and audited.
        """
        return None

    async def admit_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
        """Decide after approval, just before the call runs (rate limits, quotas)."""
        return None

    async def after_tool_call(
        self, pending: PendingToolCall, result: ToolResult, run: RunInfo
    ) -> ToolResult | None:
        """Return a replacement result (e.g. redacted) or None to keep it."""
        return None

    async def before_finish(self, answer: str, run: RunInfo) -> FinishDecision | None:
        """The model gave its final answer: accept it (None), replace it, or continue."""
        return None

    async def on_event(self, event: JournalEvent, run: RunInfo) -> None:
        """Observe every journal event after it is committed.

        An exception here is logged (with the redacting filter) and changes nothing.
        """
        return None


def overrides(obj: Interceptor, method: str) -> bool:
    """True when ``obj`` overrides ``method`` of :class:`Interceptor`."""
    return getattr(type(obj), method) is not getattr(Interceptor, method)
