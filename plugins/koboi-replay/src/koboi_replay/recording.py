"""Reading a recorded journal: its runs, and what each model call, tool call and approval gave.

A session's journal is a sequence of *runs*: each starts with ``run_started``
(a new user message) or ``run_resumed`` (the continuation of a run whose
process died), and ends with ``run_finished`` — or with nothing, when the
process was killed: the next run (a resume) or the end of the journal follows.

From the journal, capture extracts what a replay serves, keyed so that a
replayed run asks for exactly these:

- model calls by (run, n): the n-th model call of the run, with the provider
  events reported during it and its outcome (``finished`` with the response,
  ``failed`` with the error, or ``interrupted`` when the process died during it);
- tool calls by (run, step, call id): ``finished`` with the result, or
  ``interrupted`` (started, never finished: the process died during it);
- approvals by (run, step, call id): ``decided`` with the decision, or
  ``interrupted`` (asked, never answered).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from koboi import journal as J
from koboi.store import JournalEvent
from koboi_replay.errors import BundleError

RunKind = Literal["run_started", "run_resumed"]
CallKey = tuple[int, int, str]


@dataclass
class RecordedRun:
    """One run of the recorded session: events ``first_seq`` to ``last_seq``."""

    index: int
    kind: RunKind
    first_seq: int
    last_seq: int = 0
    input: str = ""
    #: For a resumed run: the lease holder of the process that resumed it.
    holder: str = ""
    #: The run ended with ``run_finished``; otherwise its process was killed.
    finished: bool = False
    #: Tool calls by the recorded order of their outcomes: the key of each
    #: ``tool_call_finished`` (in journal order) and the seq of the last event before
    #: it that was committed on its own (a call's "started", an approval request):
    #: a replay hands results out in this order, so parallel calls journal alike.
    outcome_order: list[tuple[tuple[int, str], int]] = field(default_factory=list)

    @property
    def events(self) -> int:
        return self.last_seq - self.first_seq + 1


@dataclass
class Recording:
    """Everything a replay needs from a journal, extracted once."""

    runs: list[RecordedRun]
    model_calls: list[dict[str, Any]]
    tool_results: list[dict[str, Any]]
    approvals: list[dict[str, Any]]


#: Events committed on their own when the loop records them (``commit=True``):
#: while a tool call runs, everything before it of these kinds is already stored.
_COMMITTED_AT_ONCE = frozenset({J.TOOL_CALL_STARTED, J.APPROVAL_REQUESTED})


def split_runs(events: Sequence[JournalEvent]) -> list[RecordedRun]:
    """The runs of a journal, in order. A journal that does not start a run is refused."""
    runs: list[RecordedRun] = []
    last_started_at = 0
    for event in events:
        if event.type in (J.RUN_STARTED, J.RUN_RESUMED):
            if runs:
                runs[-1].last_seq = event.seq - 1
            kind: RunKind = "run_started" if event.type == J.RUN_STARTED else "run_resumed"
            run = RecordedRun(len(runs) + 1, kind, event.seq)
            if kind == "run_started":
                run.input = str(event.data.get("input", ""))
            else:
                run.holder = str(event.data.get("holder") or "")
            runs.append(run)
            continue
        if not runs:
            raise BundleError(
                f"the journal does not start with a run: its first event is {event.type!r}"
            )
        run = runs[-1]
        if event.type == J.RUN_FINISHED:
            run.finished = True
        elif event.type in _COMMITTED_AT_ONCE:
            last_started_at = event.seq
        elif event.type == J.TOOL_CALL_FINISHED:
            key = (int(event.data.get("step", 0)), str(event.data.get("call_id", "")))
            run.outcome_order.append((key, last_started_at))
    if runs:
        runs[-1].last_seq = events[-1].seq
    if runs and runs[0].kind != "run_started":
        raise BundleError("the journal's first run is a resumption of nothing (run_resumed)")
    return runs


def extract(events: Sequence[JournalEvent]) -> Recording:
    """What a replay serves, taken from a journal (see the module docstring)."""
    runs = split_runs(events)
    model_calls: list[dict[str, Any]] = []
    tool_results: list[dict[str, Any]] = []
    approvals: list[dict[str, Any]] = []
    by_run = _group(events, runs)
    for run in runs:
        call_number = 0
        model: dict[str, Any] | None = None
        started: dict[tuple[int, str], dict[str, Any]] = {}
        asked: dict[tuple[int, str], dict[str, Any]] = {}
        for event in by_run[run.index]:
            kind, data = event.type, event.data
            step = int(data.get("step", 0))
            if kind == J.MODEL_CALL_STARTED:
                call_number += 1
                model = {"run": run.index, "call": call_number, "step": step, "reports": []}
            elif kind == J.PROVIDER_EVENT and model is not None:
                details = {k: v for k, v in data.items() if k not in ("step", "kind")}
                model["reports"].append({"kind": str(data.get("kind", "")), "data": details})
            elif kind == J.MODEL_CALL_FINISHED and model is not None:
                model_calls.append({**model, "outcome": "finished", "response": data["response"]})
                model = None
            elif kind == J.MODEL_CALL_FAILED and model is not None:
                failed = {**model, "outcome": "failed", "error": str(data.get("error", ""))}
                if "streamed" in data:
                    failed["streamed"] = str(data["streamed"])
                model_calls.append(failed)
                model = None
            elif kind == J.TOOL_CALL_STARTED:
                key = (step, str(data.get("call_id", "")))
                started[key] = {"name": str(data.get("name", ""))}
            elif kind == J.TOOL_CALL_FINISHED:
                key = (step, str(data.get("call_id", "")))
                started.pop(key, None)
                tool_results.append(
                    {
                        "run": run.index,
                        "step": step,
                        "call_id": key[1],
                        "name": str(data.get("name", "")),
                        "outcome": "finished",
                        "content": str(data.get("content", "")),
                        "is_error": bool(data.get("is_error")),
                    }
                )
            elif kind == J.APPROVAL_REQUESTED:
                asked[(step, str(data.get("call_id", "")))] = {"name": str(data.get("name", ""))}
            elif kind == J.APPROVAL_DECIDED:
                key = (step, str(data.get("call_id", "")))
                asked.pop(key, None)
                decision = {k: v for k, v in data.items() if k not in ("step", "call_id")}
                approvals.append(
                    {
                        "run": run.index,
                        "step": step,
                        "call_id": key[1],
                        "outcome": "decided",
                        "decision": decision,
                    }
                )
        # What was in flight when the process died: asked for, never answered.
        if model is not None:
            model_calls.append({**model, "outcome": "interrupted"})
        for (step, call_id), info in started.items():
            tool_results.append(
                {
                    "run": run.index,
                    "step": step,
                    "call_id": call_id,
                    **info,
                    "outcome": "interrupted",
                }
            )
        for (step, call_id), info in asked.items():
            approvals.append(
                {
                    "run": run.index,
                    "step": step,
                    "call_id": call_id,
                    **info,
                    "outcome": "interrupted",
                }
            )
    return Recording(runs, model_calls, tool_results, approvals)


def _group(
    events: Iterable[JournalEvent], runs: Sequence[RecordedRun]
) -> dict[int, list[JournalEvent]]:
    grouped: dict[int, list[JournalEvent]] = {run.index: [] for run in runs}
    bounds = [(run.first_seq, run.last_seq, run.index) for run in runs]
    position = 0
    for event in events:
        while position < len(bounds) and event.seq > bounds[position][1]:
            position += 1
        if position < len(bounds) and bounds[position][0] <= event.seq:
            grouped[bounds[position][2]].append(event)
    return grouped


def index_model_calls(
    records: Iterable[Mapping[str, Any]],
) -> dict[tuple[int, int], Mapping[str, Any]]:
    """Served model calls by (run, n)."""
    return {(int(r["run"]), int(r["call"])): r for r in records}


def index_calls(records: Iterable[Mapping[str, Any]]) -> dict[CallKey, Mapping[str, Any]]:
    """Served tool results or approvals by (run, step, call id)."""
    return {(int(r["run"]), int(r["step"]), str(r["call_id"])): r for r in records}


def mapping(value: Any) -> dict[str, Any]:
    """``value`` as a dict when it is a mapping, else an empty one (for optional fields)."""
    return dict(value) if isinstance(value, Mapping) else {}
