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


@dataclass(frozen=True)
class Trace:
    """A case's session, folded for checks."""

    inputs: tuple[str, ...]
    events: tuple[Any, ...]
    requests: tuple[ToolRequest, ...]
    refusals: tuple[ToolRefusal, ...]
    executions: tuple[ToolExecution, ...]
    runs: tuple[RunRecord, ...]
    #: How many times an interrupted run was resumed.
    resumes: int
    #: Model calls that finished (a call cut short by a crash and asked again counts once).
    model_calls: int
    #: True when the last run started (or resumed) and never finished.
    unfinished: bool
    #: The working directory the case's tools used (for file checks).
    workdir: Path | None = None

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

    def requested(self, name: str) -> list[ToolRequest]:
        return [r for r in self.requests if r.name == name]

    def refused(self, name: str) -> list[ToolRefusal]:
        return [r for r in self.refusals if r.name == name]

    def executed(self, name: str) -> list[ToolExecution]:
        return [e for e in self.executions if e.name == name]


def trace_from_journal(
    events: Iterable[Any], *, inputs: Iterable[str] = (), workdir: Path | None = None
) -> Trace:
    """Fold a session's journal events into a :class:`Trace`."""
    kept = tuple(events)
    requests: list[ToolRequest] = []
    refusals: list[ToolRefusal] = []
    executions: list[ToolExecution] = []
    latest: dict[str, ToolExecution] = {}
    runs: list[RunRecord] = []
    resumes = model_calls = 0
    unfinished = False
    for event in kept:
        kind, data = event.type, event.data
        if kind == J.RUN_STARTED:
            unfinished = True
        elif kind == J.RUN_RESUMED:
            resumes += 1
            unfinished = True
        elif kind == J.MODEL_CALL_FINISHED:
            model_calls += 1
            step = int(data.get("step", 0))
            message = data.get("response", {}).get("message", {})
            for call in message.get("tool_calls", []) or []:
                requests.append(
                    ToolRequest(
                        name=str(call.get("name", "")),
                        arguments=dict(call.get("arguments") or {}),
                        call_id=str(call.get("id", "")),
                        step=step,
                    )
                )
        elif kind == J.TOOL_CALL_REFUSED:
            refusals.append(
                ToolRefusal(
                    name=str(data.get("name", "")),
                    call_id=str(data.get("call_id", "")),
                    stage=str(data.get("stage", "")),
                    reason=str(data.get("reason", "")),
                    step=int(data.get("step", 0)),
                )
            )
        elif kind == J.TOOL_CALL_STARTED:
            execution = ToolExecution(
                name=str(data.get("name", "")),
                arguments=dict(data.get("arguments") or {}),
                call_id=str(data.get("call_id", "")),
                step=int(data.get("step", 0)),
            )
            executions.append(execution)
            latest[execution.call_id] = execution
        elif kind == J.TOOL_CALL_FINISHED:
            found = latest.get(str(data.get("call_id", "")))
            if found is not None:
                found.content = str(data.get("content", ""))
                found.is_error = bool(data.get("is_error"))
        elif kind == J.TOOL_CALL_INTERRUPTED:
            found = latest.get(str(data.get("call_id", "")))
            if found is not None:
                found.interrupted = True
        elif kind == J.RUN_FINISHED:
            unfinished = False
            runs.append(
                RunRecord(
                    outcome=str(data.get("outcome", "")),
                    output=str(data.get("output") or ""),
                    steps=int(data.get("steps") or 0),
                    cost_usd=float(data.get("cost_usd") or 0.0),
                    error=data.get("error"),
                    usage=dict(data.get("usage") or {}),
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
    )
