"""Reading a recorded journal: its runs, and what each model call, tool call and approval gave.

A session's journal is a sequence of *runs*: each starts with ``run_started``
(a new user message, or one direct tool call: ``kind: tool_call``) or
``run_resumed`` (the continuation of a run whose process died, or of a
suspended run, with its ``reply``), and ends with ``run_finished`` — or with
nothing, when the process was killed: the next run (a resume) or the end of
the journal follows.

From the journal, capture extracts what a replay serves, keyed so that a
replayed run asks for exactly these:

- model calls by (run, purpose, n): the n-th call of the run for that purpose —
  the loop's own calls have no purpose, a plugin's side calls
  (``side_call_started``) have theirs — with the provider events reported
  during it and its outcome (``finished`` with the response, ``failed`` with
  the error, or ``interrupted`` when the process died during it); a side call
  keeps its request ``key``;
- tool calls by (run, step, call id): ``finished`` with the result,
  ``suspended`` (the tool suspended the run: ``ctx.suspend``) with what it waits
  for, or ``interrupted`` (started, never finished: the process died during it);
- approvals by (run, step, call id): ``decided`` with the decision, or
  ``interrupted`` (asked, never answered).

Every event is read through its kernel kind (``J.<KIND>.of(event)``); plugin
events (``"<plugin>.<name>"``) and types this kernel does not know are left as
they are: a bundle carries them and a replay compares them, nothing here reads
them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from koboi import journal as J
from koboi.store import JournalEvent
from koboi_replay.errors import BundleError

RunKind = Literal["run_started", "run_resumed"]
CallKey = tuple[int, int, str]
#: A served model call: (run, purpose — None for the loop's own calls —, n).
ModelCallKey = tuple[int, str | None, int]


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
    #: The trace context the run was given, as journaled: ``run_started.trace``, or
    #: ``run_resumed.trace`` when the continuation was given one (else None: it went on
    #: in the trace of the run it continued).
    trace: J.TraceData | None = None
    #: For a direct tool call (``agent.call_tool``): the call the run made.
    call: J.DirectCallData | None = None
    #: For a continued suspended run: the reply it was continued with.
    reply: Any = None
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

    @property
    def side_calls(self) -> int:
        return sum(1 for call in self.model_calls if call.get("purpose") is not None)


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
            if event.type == J.RUN_STARTED:
                started = J.RUN_STARTED.of(event)
                run = RecordedRun(len(runs) + 1, "run_started", event.seq)
                run.input = str(started.get("input", ""))
                run.trace = started.get("trace")
                made = started.get("call")
                if started.get("kind") == "tool_call" and isinstance(made, Mapping):
                    run.call = made
            else:
                resumed = J.RUN_RESUMED.of(event)
                run = RecordedRun(len(runs) + 1, "run_resumed", event.seq)
                run.holder = str(resumed.get("holder") or "")
                run.trace = resumed.get("trace")
                run.reply = resumed.get("reply")
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
            run.outcome_order.append((_call_of(J.TOOL_CALL_FINISHED.of(event)), last_started_at))
    if runs:
        runs[-1].last_seq = events[-1].seq
    if runs and runs[0].kind != J.RUN_STARTED:
        raise BundleError("the journal's first run is a resumption of nothing (run_resumed)")
    return runs


def _suspension_reasons(audit: Iterable[Mapping[str, Any]]) -> dict[tuple[int, str], deque[str]]:
    """For each (step, call id): the reasons it suspended a run, in order (audit trail).

    ``run_finished.suspension`` holds the reason of the first call that suspended
    the run; the audit trail has each call's own (parallel calls may each suspend).
    """
    reasons: dict[tuple[int, str], deque[str]] = {}
    for record in audit:
        data = mapping(record.get("data", record))
        if data.get("action") == "tool_call" and data.get("phase") == "suspended":
            reasons.setdefault(_call_of(data), deque()).append(str(data.get("reason", "")))
    return reasons


def _call_of(data: Mapping[str, object]) -> tuple[int, str]:
    """The (step, call id) an event of a tool call or an approval is about."""
    return _int(data.get("step")), str(data.get("call_id", ""))


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


class _RunExtractor:
    """What one run served: its model calls, tool results and approvals."""

    def __init__(self, run: RecordedRun, reasons: dict[tuple[int, str], deque[str]]) -> None:
        self.run = run
        self.reasons = reasons
        self.model_calls: list[dict[str, Any]] = []
        self.tool_results: list[dict[str, Any]] = []
        self.approvals: list[dict[str, Any]] = []
        self.loop_calls = 0
        self.loop_call: dict[str, Any] | None = None
        #: Side calls by purpose: how many started, those in flight, reports waiting.
        self.side_numbers: dict[str, int] = {}
        self.side_in_flight: list[dict[str, Any]] = []
        self.side_reports: dict[str, list[dict[str, Any]]] = {}
        self.started: dict[tuple[int, str], str] = {}
        self.asked: dict[tuple[int, str], str] = {}

    def feed(self, event: JournalEvent) -> None:
        """Take the run's next event; kinds that serve nothing (plugin events...) pass."""
        handler = self._handlers.get(event.type)
        if handler is not None:
            handler(self, event)

    # -- the loop's model calls ---------------------------------------------------------

    def _model_call_started(self, event: JournalEvent) -> None:
        self.loop_calls += 1
        step = int(J.MODEL_CALL_STARTED.of(event).get("step", 0))
        self.loop_call = self._new_call(None, self.loop_calls, step)

    def _model_call_finished(self, event: JournalEvent) -> None:
        if self.loop_call is not None:
            finished = J.MODEL_CALL_FINISHED.of(event)
            self.loop_call.update(outcome="finished", response=finished["response"])
            self.loop_call = None

    def _model_call_failed(self, event: JournalEvent) -> None:
        if self.loop_call is not None:
            failed = J.MODEL_CALL_FAILED.of(event)
            self.loop_call.update(outcome="failed", error=str(failed.get("error", "")))
            if "streamed" in failed:
                self.loop_call["streamed"] = str(failed["streamed"])
            self.loop_call = None

    def _provider_event(self, event: JournalEvent) -> None:
        data = J.PROVIDER_EVENT.of(event)
        details = {k: v for k, v in data.items() if k not in ("step", "kind", "purpose")}
        item = {"kind": str(data.get("kind", "")), "data": details}
        purpose = data.get("purpose")
        if purpose is not None:
            # Journaled just before its side call's outcome: kept for the call that ends next.
            self.side_reports.setdefault(str(purpose), []).append(item)
        elif self.loop_call is not None:
            self.loop_call["reports"].append(item)

    # -- side calls -----------------------------------------------------------------------

    def _side_call_started(self, event: JournalEvent) -> None:
        side = J.SIDE_CALL_STARTED.of(event)
        purpose = str(side.get("purpose", ""))
        number = self.side_numbers[purpose] = self.side_numbers.get(purpose, 0) + 1
        opened = self._new_call(purpose, number, int(side.get("step", 0)))
        opened["key"] = str(side.get("key", ""))
        self.side_in_flight.append(opened)

    def _side_call_finished(self, event: JournalEvent) -> None:
        answered = J.SIDE_CALL_FINISHED.of(event)
        call = self._side_ended(str(answered.get("purpose", "")), str(answered.get("key", "")))
        if call is not None:
            call.update(outcome="finished", response=answered["response"])

    def _side_call_failed(self, event: JournalEvent) -> None:
        failed = J.SIDE_CALL_FAILED.of(event)
        call = self._side_ended(str(failed.get("purpose", "")), str(failed.get("key", "")))
        if call is not None:
            call.update(outcome="failed", error=str(failed.get("error", "")))

    def _side_ended(self, purpose: str, key: str) -> dict[str, Any] | None:
        """The side call in flight that just ended (the first of its purpose and key)."""
        same = [c for c in self.side_in_flight if c["purpose"] == purpose]
        call = next((c for c in same if c["key"] == key), same[0] if same else None)
        if call is None:
            return None
        self.side_in_flight.remove(call)
        call["reports"] = self.side_reports.pop(purpose, [])
        return call

    # -- tool calls and approvals -----------------------------------------------------------

    def _tool_call_started(self, event: JournalEvent) -> None:
        started = J.TOOL_CALL_STARTED.of(event)
        self.started[_call_of(started)] = str(started.get("name", ""))

    def _tool_call_finished(self, event: JournalEvent) -> None:
        finished = J.TOOL_CALL_FINISHED.of(event)
        key = _call_of(finished)
        self.started.pop(key, None)
        self.tool_results.append(
            {
                **self._call_key(key),
                "name": str(finished.get("name", "")),
                "outcome": "finished",
                "content": str(finished.get("content", "")),
                "is_error": bool(finished.get("is_error")),
            }
        )

    def _tool_call_suspended(self, event: JournalEvent) -> None:
        """A call suspended the run: in a replay it suspends again, as journaled."""
        waiting = J.TOOL_CALL_SUSPENDED.of(event)
        key = _call_of(waiting)
        name = self.started.pop(key, str(waiting.get("name", "")))
        self.tool_results.append(
            {
                **self._call_key(key),
                "name": name,
                "outcome": "suspended",
                "reason": str(waiting.get("reason", "")),
                "kind": str(waiting.get("kind", "input")),
                "data": mapping(waiting.get("data")),
            }
        )

    def _approval_requested(self, event: JournalEvent) -> None:
        requested = J.APPROVAL_REQUESTED.of(event)
        self.asked[_call_of(requested)] = str(requested.get("name", ""))

    def _approval_decided(self, event: JournalEvent) -> None:
        decided = J.APPROVAL_DECIDED.of(event)
        key = _call_of(decided)
        self.asked.pop(key, None)
        decision = {k: v for k, v in decided.items() if k not in ("step", "call_id")}
        self.approvals.append({**self._call_key(key), "outcome": "decided", "decision": decision})

    def _run_finished(self, event: JournalEvent) -> None:
        ended = J.RUN_FINISHED.of(event)
        suspension = ended.get("suspension")
        if ended.get("outcome") == "suspended" and suspension is not None:
            self._suspended(suspension)

    _handlers: ClassVar[dict[str, Callable[[_RunExtractor, JournalEvent], None]]] = {
        J.MODEL_CALL_STARTED: _model_call_started,
        J.MODEL_CALL_FINISHED: _model_call_finished,
        J.MODEL_CALL_FAILED: _model_call_failed,
        J.PROVIDER_EVENT: _provider_event,
        J.SIDE_CALL_STARTED: _side_call_started,
        J.SIDE_CALL_FINISHED: _side_call_finished,
        J.SIDE_CALL_FAILED: _side_call_failed,
        J.TOOL_CALL_STARTED: _tool_call_started,
        J.TOOL_CALL_FINISHED: _tool_call_finished,
        J.TOOL_CALL_SUSPENDED: _tool_call_suspended,
        J.APPROVAL_REQUESTED: _approval_requested,
        J.APPROVAL_DECIDED: _approval_decided,
        J.RUN_FINISHED: _run_finished,
    }

    def _new_call(self, purpose: str | None, number: int, step: int) -> dict[str, Any]:
        call: dict[str, Any] = {"run": self.run.index, "call": number, "step": step}
        if purpose is not None:
            call["purpose"] = purpose
        call["reports"] = []
        # Listed when it starts (so the file keeps the journal's order); its outcome is
        # filled in when it ends, and "interrupted" when the journal ends first.
        self.model_calls.append(call)
        return call

    def _suspended(self, suspension: J.SuspensionData) -> None:
        """The run ended suspended: each call that suspended it suspends again in a replay.

        Journals written before ``tool_call_suspended`` existed say only this; a call
        its own event already settled is not in ``started`` any more."""
        first = str(suspension.get("call_id", ""))
        calls = suspension.get("calls") or ([first] if first else [])
        for call_id in calls:
            key = next((k for k in self.started if k[1] == call_id), None)
            if key is None:
                continue
            name = self.started.pop(key)
            queued = self.reasons.get(key)
            own = queued.popleft() if queued else ""
            is_first = call_id == first
            self.tool_results.append(
                {
                    **self._call_key(key),
                    "name": name,
                    "outcome": "suspended",
                    "reason": str(suspension.get("reason", "")) if is_first else own,
                    # Only the first call's kind and data are journaled; the others' are
                    # seen by no one (the run's suspension is the first call's).
                    "kind": str(suspension.get("kind", "input")) if is_first else "input",
                    "data": mapping(suspension.get("data")) if is_first else {},
                }
            )

    def _call_key(self, key: tuple[int, str]) -> dict[str, Any]:
        return {"run": self.run.index, "step": key[0], "call_id": key[1]}

    def close(self) -> None:
        """What was in flight when the process died: asked for, never answered."""
        for call in self.model_calls:
            call.setdefault("outcome", "interrupted")
        for key, name in self.started.items():
            self.tool_results.append(
                {**self._call_key(key), "name": name, "outcome": "interrupted"}
            )
        for key, name in self.asked.items():
            self.approvals.append({**self._call_key(key), "name": name, "outcome": "interrupted"})


def extract(events: Sequence[JournalEvent], audit: Iterable[Mapping[str, Any]] = ()) -> Recording:
    """What a replay serves, taken from a journal (see the module docstring).

    ``audit`` (the session's audit records) gives the reason of each call that
    suspended a run beside the first.
    """
    runs = split_runs(events)
    reasons = _suspension_reasons(audit)
    recording = Recording(runs, [], [], [])
    by_run = _group(events, runs)
    for run in runs:
        extractor = _RunExtractor(run, reasons)
        for event in by_run[run.index]:
            extractor.feed(event)
        extractor.close()
        recording.model_calls += extractor.model_calls
        recording.tool_results += extractor.tool_results
        recording.approvals += extractor.approvals
    return recording


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
) -> dict[ModelCallKey, Mapping[str, Any]]:
    """Served model calls by (run, purpose, n). A record without ``purpose`` (every
    record of a bundle written before side calls existed) is one of the loop's calls."""
    indexed: dict[ModelCallKey, Mapping[str, Any]] = {}
    for r in records:
        purpose = r.get("purpose")
        indexed[(int(r["run"]), None if purpose is None else str(purpose), int(r["call"]))] = r
    return indexed


def index_calls(records: Iterable[Mapping[str, Any]]) -> dict[CallKey, Mapping[str, Any]]:
    """Served tool results or approvals by (run, step, call id)."""
    return {(int(r["run"]), int(r["step"]), str(r["call_id"])): r for r in records}


def mapping(value: Any) -> dict[str, Any]:
    """``value`` as a dict when it is a mapping, else an empty one (for optional fields)."""
    return dict(value) if isinstance(value, Mapping) else {}
