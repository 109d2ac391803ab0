"""What a case's run left behind, read from its session's journal.

The journal is the truth (koboi/journal.py lists its events), so checks read
it rather than the events a caller saw: a run that was killed and resumed in
other processes is judged exactly like one that ran here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from koboi import journal as J
from koboi_eval.matching import MadeCall


@dataclass(frozen=True)
class ToolRequest:
    """A tool call the model asked for (whatever became of it)."""

    name: str
    arguments: Mapping[str, Any]
    call_id: str
    step: int

    def as_call(self) -> MadeCall:
        return MadeCall(self.name, self.arguments, self.step)


@dataclass(frozen=True)
class ToolRefusal:
    """A tool call the kernel refused, and the stage that refused it."""

    name: str
    call_id: str
    stage: str
    reason: str
    step: int


@dataclass
class ToolExecution:
    """A tool call that started (its ``tool_call_started`` event), and how it ended."""

    name: str
    arguments: Mapping[str, Any]
    call_id: str
    step: int
    #: The result the tool returned; None when it never reported one.
    content: str | None = None
    is_error: bool = False
    #: Resume found it started and never finished: whether it took effect is unknown.
    interrupted: bool = False

    def as_call(self) -> MadeCall:
        return MadeCall(self.name, self.arguments, self.step)


@dataclass(frozen=True)
class RunRecord:
    """One finished run (``run_finished``): a user message, or the resumption of one."""

    outcome: str
    output: str
    steps: int
    cost_usd: float
    error: str | None
    usage: Mapping[str, Any] = field(default_factory=dict)
    #: For outcome ``refused``: the stage (interceptor) that refused the run.
    refused_by: str | None = None


@dataclass(frozen=True)
class Trace:
    """A case's session, folded for checks."""

    inputs: tuple[str, ...]
    events: tuple[Any, ...]
    requests: tuple[ToolRequest, ...]
    refusals: tuple[ToolRefusal, ...]
    executions: tuple[ToolExecution, ...]
    runs: tuple[RunRecord, ...]
    #: How many times a run interrupted by a crash was resumed from the journal.
    resumes: int
    #: Model calls that finished (a call cut short by a crash and asked again counts once).
    model_calls: int
    #: True when the last run started (or resumed) and never finished.
    unfinished: bool
    #: The working directory the case's tools used (for file checks).
    workdir: Path | None = None
    #: How many times a suspended run was continued with a reply.
    replies: int = 0

    @property
    def outcome(self) -> str:
        """The last run's outcome; ``interrupted`` when it never finished."""
        if self.unfinished:
            return "interrupted"
        return self.runs[-1].outcome if self.runs else "never ran"

    @property
    def output(self) -> str:
        return self.runs[-1].output if self.runs and not self.unfinished else ""

    @property
    def error(self) -> str | None:
        return self.runs[-1].error if self.runs and not self.unfinished else None

    @property
    def cost_usd(self) -> float:
        return sum(run.cost_usd for run in self.runs)

    @property
    def refused_by(self) -> str | None:
        """For a last run ``refused``: the stage (interceptor) that refused it."""
        return self.runs[-1].refused_by if self.runs and not self.unfinished else None

    def plugin_events(self, event_type: str) -> list[Mapping[str, Any]]:
        """The data of the plugin events of ``event_type`` (``"<plugin>.<name>"``, such as
        ``"rag.retrieved"``), in journal order: what a plugin's own check reads."""
        J.check_plugin_event_type(event_type)
        return [event.data for event in self.events if event.type == event_type]

    def requested(self, name: str) -> list[ToolRequest]:
        return [r for r in self.requests if r.name == name]

    def refused(self, name: str) -> list[ToolRefusal]:
        return [r for r in self.refusals if r.name == name]

    def executed(self, name: str) -> list[ToolExecution]:
        return [e for e in self.executions if e.name == name]


def trace_from_journal(
    events: Iterable[Any], *, inputs: Iterable[str] = (), workdir: Path | None = None
) -> Trace:
    """Fold a session's journal events into a :class:`Trace`.

    Each event is read through its kind (``J.<KIND>.of(event)``), the journal's typed
    schemas: the fields read here are the ones koboi/journal.py declares.
    """
    from koboi.messages import ModelResponse

    kept = tuple(events)
    requests: list[ToolRequest] = []
    refusals: list[ToolRefusal] = []
    executions: list[ToolExecution] = []
    latest: dict[str, ToolExecution] = {}
    runs: list[RunRecord] = []
    resumes = replies = model_calls = 0
    unfinished = False
    for event in kept:
        kind = event.type
        if kind == J.RUN_STARTED:
            unfinished = True
        elif kind == J.RUN_RESUMED:
            # A reply continues a suspended run; anything else is recovery after a crash.
            if "reply" in J.RUN_RESUMED.of(event):
                replies += 1
            else:
                resumes += 1
            unfinished = True
        elif kind == J.MODEL_CALL_FINISHED:
            answered = J.MODEL_CALL_FINISHED.of(event)
            model_calls += 1
            response = ModelResponse.model_validate(answered["response"])
            requests += [
                ToolRequest(call.name, dict(call.arguments), call.id, answered["step"])
                for call in response.message.tool_calls
            ]
        elif kind == J.TOOL_CALL_REFUSED:
            refused = J.TOOL_CALL_REFUSED.of(event)
            refusals.append(
                ToolRefusal(
                    name=refused["name"],
                    call_id=refused["call_id"],
                    stage=refused["stage"],
                    reason=refused["reason"],
                    step=refused["step"],
                )
            )
        elif kind == J.TOOL_CALL_STARTED:
            started = J.TOOL_CALL_STARTED.of(event)
            execution = ToolExecution(
                name=started["name"],
                arguments=dict(started["arguments"]),
                call_id=started["call_id"],
                step=started["step"],
            )
            executions.append(execution)
            latest[execution.call_id] = execution
        elif kind == J.TOOL_CALL_FINISHED:
            finished = J.TOOL_CALL_FINISHED.of(event)
            found = latest.get(finished["call_id"])
            if found is not None:
                found.content = finished["content"]
                found.is_error = finished["is_error"]
        elif kind == J.TOOL_CALL_INTERRUPTED:
            found = latest.get(J.TOOL_CALL_INTERRUPTED.of(event)["call_id"])
            if found is not None:
                found.interrupted = True
        elif kind == J.RUN_FINISHED:
            ended = J.RUN_FINISHED.of(event)
            unfinished = False
            runs.append(
                RunRecord(
                    outcome=ended["outcome"],
                    output=ended["output"] or "",
                    steps=ended["steps"],
                    cost_usd=ended["cost_usd"] or 0.0,
                    error=ended["error"],
                    usage=dict(ended["usage"] or {}),
                    refused_by=ended.get("refused_by"),
                )
            )
    return Trace(
        inputs=tuple(inputs),
        events=kept,
        requests=tuple(requests),
        refusals=tuple(refusals),
        executions=tuple(executions),
        runs=tuple(runs),
        resumes=resumes,
        model_calls=model_calls,
        unfinished=unfinished,
        workdir=workdir,
        replies=replies,
    )
