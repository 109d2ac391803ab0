"""Stateful property test: the journal survives crashes at any point, on the SQLite store.

A hypothesis state machine plays the agent loop against koboi-store-sql's
SQLite store (the in-memory store when koboi-store-sql is not installed): it
appends events with the loop's batching (an event that ends work waits, uncommitted,
for the commit that announces the next work), "crashes" at any point (the
uncommitted events are lost, the store is closed and reopened as a new process
would), and resumes by folding the stored journal and settling in-doubt calls as
``AgentRun.resume`` does. After every step it checks that

* the stored journal is exactly what was committed, with contiguous ``seq`` from 1;
* ``fold_state`` of it is consistent: every tool call of every assistant message is
  answered exactly once, right after it, except the calls of an interrupted run's
  last response, which are listed in ``pending`` (with the outcome the journal has);
* a call that completed (or was reported interrupted) is never started again, and
  a non-idempotent call is never started twice.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from koboi import journal as J
from koboi.messages import Message, ModelResponse, ToolCall, Usage
from koboi.store import InMemoryStore, NewEvent, Store

try:
    from koboi_store_sql.plugin import create_store
except ImportError:  # pragma: no cover - koboi-agent installs it
    create_store = None

pytestmark = pytest.mark.slow


@dataclass
class Call:
    id: str
    idempotent: bool
    #: "asked" (not started), "started", "settled"
    status: str = "asked"


class JournalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="koboi-journal-"))
        self.portal_cm = anyio.from_thread.start_blocking_portal()
        self.portal = self.portal_cm.__enter__()
        self.store = self._open()
        self.session = self.portal.call(self._create)
        #: What was committed, as (type, data), in order: the store must hold exactly this.
        self.committed: list[tuple[str, dict[str, Any]]] = []
        self.started: dict[str, int] = {}
        self.settled: set[str] = set()
        self._reset_process()
        self.counter = 0

    # -- plumbing ---------------------------------------------------------------

    def _open(self) -> Store:
        if create_store is None:
            store: Store = getattr(self, "store", None) or InMemoryStore()
        else:
            store = create_store("sqlite:///journal.db?durability=process", self.directory)
        self.portal.call(store.open)
        return store

    async def _create(self) -> str:
        info = await self.store.create_session(config_name="stateful")
        return info.id

    def _reset_process(self) -> None:
        """A new process: nothing in memory, nothing buffered."""
        self.buffer: list[NewEvent] = []
        self.in_run = False
        self.phase = "idle"  # idle | model | tools | next_model
        self.calls: list[Call] = []
        self.step = 0

    def _record(self, type_: str, data: dict[str, Any], *, commit: bool = True) -> None:
        self.buffer.append(NewEvent(type_, data))
        if commit:
            self._flush()

    def _flush(self) -> None:
        batch, self.buffer = self.buffer, []
        if not batch:
            return
        stored = self.portal.call(self.store.append, self.session, batch)
        assert [e.type for e in stored] == [e.type for e in batch]
        self.committed.extend((e.type, dict(e.data)) for e in batch)
        for event in batch:
            if event.type == J.TOOL_CALL_STARTED:
                call_id = event.data["call_id"]
                self.started[call_id] = self.started.get(call_id, 0) + 1
            elif event.type in (J.TOOL_CALL_FINISHED, J.TOOL_CALL_INTERRUPTED, J.TOOL_CALL_REFUSED):
                self.settled.add(event.data["call_id"])

    def _events(self) -> list[Any]:
        return self.portal.call(self.store.read, self.session)

    def _next_call(self) -> Call | None:
        return next((c for c in self.calls if c.status != "settled"), None)

    def teardown(self) -> None:
        try:
            self.portal.call(self.store.close)
        finally:
            self.portal_cm.__exit__(None, None, None)
            shutil.rmtree(self.directory, ignore_errors=True)

    # -- the loop: one operation per step -------------------------------------------

    @rule(choice=st.integers(0, 9), flags=st.lists(st.booleans(), max_size=3))
    def advance(self, choice: int, flags: list[bool]) -> None:
        """Do what the loop (or a new process) would do next; ``choice`` picks among options."""
        if self.phase == "idle":
            if self._interrupted():
                self.resume()
            else:
                self.start_run()
        elif self.phase in ("model", "next_model"):
            self.model_call_started()
        elif self.phase == "answer":
            if choice == 0:
                self._finish("max_iterations", "")  # or failed: ends with what is buffered
            else:
                self.model_call_finished(flags)
        else:
            call = self._next_call()
            assert call is not None
            if call.status == "started":
                self.tool_call_finished(call, is_error=choice == 1)
            elif choice == 0:
                self.tool_call_refused(call)
            else:
                self.tool_call_started(call)

    def start_run(self) -> None:
        self._record(J.RUN_STARTED, {"input": "go", "agent": "a", "config_hash": ""}, commit=False)
        self.in_run, self.phase, self.step = True, "model", 0

    def model_call_started(self) -> None:
        self.step += 1
        self._record(J.MODEL_CALL_STARTED, {"step": self.step})
        self.phase = "answer"

    def model_call_finished(self, idempotent: Sequence[bool]) -> None:
        calls = []
        for flag in idempotent:
            self.counter += 1
            calls.append(Call(f"c{self.counter}", flag))
        message = Message.assistant(
            "" if calls else "done",
            tuple(ToolCall(id=c.id, name="t", arguments={"i": c.idempotent}) for c in calls),
        )
        response = ModelResponse(message=message, usage=Usage(requests=1))
        self._record(
            J.MODEL_CALL_FINISHED,
            {
                "step": self.step,
                "response": response.model_dump(mode="json", exclude_defaults=True),
            },
            commit=False,
        )
        if not calls:
            self._finish("completed", "done")
            return
        self.calls, self.phase = calls, "tools"

    def _finish(self, outcome: str, output: str) -> None:
        self._record(
            J.RUN_FINISHED,
            {"outcome": outcome, "output": output, "steps": self.step, "error": None, "usage": {}},
        )
        self._reset_process()

    def tool_call_started(self, call: Call) -> None:
        # Committed at once: the effect begins right after.
        self._record(
            J.TOOL_CALL_STARTED,
            {
                "step": self.step,
                "call_id": call.id,
                "name": "t",
                "arguments": {},
                "idempotent": call.idempotent,
            },
        )
        call.status = "started"

    def tool_call_finished(self, call: Call, *, is_error: bool) -> None:
        data = {"step": self.step, "call_id": call.id, "name": "t", "content": "ok"}
        self._record(J.TOOL_CALL_FINISHED, {**data, "is_error": is_error}, commit=False)
        self._settled(call)

    def tool_call_refused(self, call: Call) -> None:
        data = {"step": self.step, "call_id": call.id, "name": "t", "stage": "approval"}
        self._record(J.TOOL_CALL_REFUSED, {**data, "reason": "no"}, commit=False)
        self._settled(call)

    def _settled(self, call: Call) -> None:
        call.status = "settled"
        if self._next_call() is None:
            self.phase = "next_model"

    # -- crash and resume ---------------------------------------------------------------

    @rule()
    def crash(self) -> None:
        """SIGKILL: the buffer is lost; a new process opens the store."""
        self.portal.call(self.store.close)
        self._reset_process()
        self.store = self._open()

    def _interrupted(self) -> bool:
        return J.fold_state(self._events()).interrupted

    def resume(self) -> None:
        """What AgentRun.resume does, from the folded journal alone."""
        state = J.fold_state(self._events())
        data = {"after_seq": state.last_seq, "step": state.step, "holder": "h"}
        self._record(J.RUN_RESUMED, data, commit=False)
        self.in_run, self.step = True, state.step
        last = state.messages[-1] if state.messages else None
        if not state.pending and last is not None and last.role == "assistant":
            self._finish("completed", last.content)
            return
        calls = []
        for pending in state.pending:
            call = Call(pending.call.id, bool(pending.call.arguments.get("i")))
            if pending.outcome is not None:
                call.status = "settled"  # done before the crash: never run again
            elif pending.started and not pending.idempotent:
                data = {"step": pending.step, "call_id": call.id, "name": "t"}
                self._record(
                    J.TOOL_CALL_INTERRUPTED, {**data, "policy": "tell_model"}, commit=False
                )
                call.status = "settled"
            calls.append(call)
        self.calls = calls
        self.phase = "tools" if self._next_call() is not None else "next_model"

    # -- invariants ---------------------------------------------------------------

    @invariant()
    def journal_is_what_was_committed(self) -> None:
        events = self._events()
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert [(e.type, dict(e.data)) for e in events] == self.committed

    @invariant()
    def fold_is_consistent(self) -> None:
        events = self._events()
        state = J.fold_state(events)
        assert state.last_seq == len(events)
        messages = state.messages
        answered: dict[str, int] = {}
        i = 0
        while i < len(messages):
            message = messages[i]
            i += 1
            assert message.role != "tool", f"a tool result without its call at {i - 1}"
            if message.role != "assistant" or not message.tool_calls:
                continue
            ids = [c.id for c in message.tool_calls]
            results = []
            while i < len(messages) and messages[i].role == "tool":
                results.append(messages[i].tool_call_id)
                i += 1
            if results:
                assert results == ids, (results, ids)
                for call_id in ids:
                    answered[call_id] = answered.get(call_id, 0) + 1
            else:
                # Only the last response of an interrupted run may wait for its results.
                assert i == len(messages) and state.interrupted, "calls left unanswered"
                assert [p.call.id for p in state.pending] == ids
        assert all(n == 1 for n in answered.values()), answered
        if not state.interrupted:
            assert state.pending == []
            assert J.fold_messages(events) == messages
        for pending in state.pending:
            assert pending.call.id not in answered
            has_outcome = pending.call.id in self.settled
            assert (pending.outcome is not None) == has_outcome, pending
            assert pending.started == (pending.call.id in self.started), pending

    @invariant()
    def no_call_runs_twice(self) -> None:
        for call_id, times in self.started.items():
            idempotent = any(
                t == J.TOOL_CALL_STARTED and d["call_id"] == call_id and d["idempotent"]
                for t, d in self.committed
            )
            assert times == 1 or idempotent, f"non-idempotent call {call_id} started {times} times"


JournalMachine.TestCase.settings = settings(
    max_examples=20,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.timeout(120)
def test_journal_survives_crashes_at_any_point() -> None:
    JournalMachine.TestCase().runTest()
