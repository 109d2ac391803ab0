"""Runners: strategies that run an agent as something other than the single loop.

A config picks one with ``agent.runner`` (default ``loop``, the kernel's own).
Whatever the runner, the kernel journals the run's start (``run_started``) and
end (``run_finished``) around it, so ``agent.stream()``, ``agent.run()``,
``koboi run``, ``koboi serve`` chats and jobs and resume all work the same. A
runner drives the run through a :class:`RunHandle`: the standard loop on the
run's conversation (:meth:`RunHandle.loop`), child runs whose events stream into
the parent's (:meth:`RunHandle.child`), plugin events it records to rebuild
its state on resume, side model calls, and finally :meth:`RunHandle.finish`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Unpack

from koboi.errors import KoboiError

if TYPE_CHECKING:
    from koboi.events import AgentEvent, Outcome, RunResult, ToolResultEvent
    from koboi.interceptors import RunInfo
    from koboi.loop import AgentRun
    from koboi.sidecalls import RunModel
    from koboi.store import JournalEvent
    from koboi.subagents import ChildOptions


@dataclass(frozen=True)
class Ending:
    """How a run ends: what ``run_finished`` will say."""

    outcome: Outcome
    output: str
    error: str | None = None
    suspension: dict[str, Any] | None = None
    refused_by: str | None = None


class Runner(ABC):
    """A run strategy. Implement :meth:`run`; call ``run.finish(...)`` before it returns."""

    #: Shown in ``run_started.runner`` and errors.
    name: str = "runner"

    @abstractmethod
    def run(self, run: RunHandle) -> AsyncIterator[AgentEvent]:
        """Run (``run.resumed`` False) or continue after a crash (True), yielding events.

        An async generator. On resume the journal's plugin events of the session are in
        :meth:`RunHandle.plugin_events`: skip what is already done.
        """


class LoopRunner(Runner):
    """The kernel's runner: model call -> tool calls -> results, until a final answer."""

    name = "loop"

    async def run(self, run: RunHandle) -> AsyncIterator[AgentEvent]:
        async for event in run.loop():
            yield event


class RunHandle:
    """What a runner may do with the run it drives (made by the kernel)."""

    def __init__(self, agent_run: AgentRun) -> None:
        self._run = agent_run

    @property
    def session_id(self) -> str:
        return self._run.session_id

    @property
    def input(self) -> str:
        """The user message this run answers."""
        return self._run.info.input

    @property
    def resumed(self) -> bool:
        """True when the run continues after its process died (or after a suspension)."""
        return self._run.info.resumed

    @property
    def started_seq(self) -> int:
        """The seq of this run's ``run_started`` (the same after a resume): the run's own
        plugin events are those after it, and ids derived from it are this run's."""
        return self._run.info.started_seq

    @property
    def info(self) -> RunInfo:
        """The run's :class:`~koboi.interceptors.RunInfo` (record, emit, context, model)."""
        return self._run.info

    @property
    def model(self) -> RunModel:
        return self._run.model

    def plugin_events(self, namespace: str | None = None) -> list[JournalEvent]:
        """The session's plugin events (of ``namespace``, ``"<namespace>.*"``), in order."""
        events = self._run.state.plugin_events
        if namespace is None:
            return list(events)
        prefix = f"{namespace}."
        return [e for e in events if e.type.startswith(prefix)]

    async def commit(self) -> None:
        """Commit what the run recorded so far (plugin events included) now, instead of
        with its next model or tool call: a runner makes its progress durable this way
        (a node finished) before it starts the next piece of work."""
        await self._run.flush()

    def loop(self) -> AsyncIterator[AgentEvent]:
        """The standard loop on the run's conversation (finishing pending work first on a
        resume). When it ends, :attr:`ending` says how; a runner may :meth:`add_message`
        and loop again, or :meth:`finish` with that ending or another."""
        return self._run.loop()

    def add_message(self, text: str) -> None:
        """Add a user message to the run's conversation (journaled as ``run_continued``,
        by this runner) before the next :meth:`loop`."""
        self._run.queue_continuation(text, by=self._run.runner.name)

    async def child(
        self, message: str, *, tag: str | None = None, **options: Unpack[ChildOptions]
    ) -> RunResult:
        """Run a child agent (a sub-agent in a session of its own, under this run's whole
        pipeline, with at most this run's tools) to its end; its events stream into this
        run's, tagged ``tag``.

        ``options`` (:class:`koboi.subagents.ChildOptions`): ``tools``, ``system_prompt``,
        ``name``; ``session_id`` names the child's session (derive it with
        :func:`koboi.subagents.child_session_id`): after a crash the same call resumes an
        interrupted child and answers a finished one from its journal; ``model`` names
        an entry of the ``providers`` section to call instead of this run's model;
        ``mode`` and ``max_iterations`` may only be narrower than this run's (a wider
        mode is refused); ``max_total_tokens`` / ``max_cost_usd`` cap the child alone.
        Whatever the child uses counts against this run's budgets as it happens.
        """
        from koboi.subagents import run_subagent

        return await run_subagent(self._run, message, parent_call_id=None, tag=tag, **options)

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any], *, call_id: str | None = None
    ) -> ToolResultEvent:
        """Call one of the run's tools as the runner, through the whole pipeline (mode,
        policy, guardrails, approval, rate limits, sandbox, journal, audit) and return its
        result (``content``, ``is_error``, ``refused_by``).

        Give a ``call_id`` stable across a crash (unique within the run): a call the
        journal already settled is then answered from it, and one the crash left in
        doubt follows ``agent.on_interrupted_tool`` (an idempotent tool runs again).
        Its events reach the stream; it is not added to the conversation.
        """
        return await self._run.runner_tool_call(name, arguments, call_id)

    @property
    def ending(self) -> Ending | None:
        """How the run would end now (set by :meth:`loop` or :meth:`finish`)."""
        return self._run.ending

    def finish(
        self, output: str, *, outcome: Outcome = "completed", error: str | None = None
    ) -> None:
        """Say how the run ends: the kernel journals it when the runner returns."""
        if outcome in ("suspended", "refused"):
            raise KoboiError(f"a runner cannot finish a run as {outcome!r}")
        self._run.ending = Ending(outcome, output, error)
