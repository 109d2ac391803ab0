"""Folding a journal into a Trace, through the journal's typed event kinds."""

from __future__ import annotations

from typing import Any

import pytest

from koboi import journal as J
from koboi.store import JournalEvent
from koboi_eval import ended_with
from koboi_eval.errors import EvalDefinitionError
from koboi_eval.trace import trace_from_journal


def journal(*events: tuple[str, dict[str, Any]]) -> list[JournalEvent]:
    return [JournalEvent("s", n, kind, data, 0.0) for n, (kind, data) in enumerate(events, 1)]


def finished(outcome: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    data = {"outcome": outcome, "output": "", "steps": 1, "usage": {}, "cost_usd": 0.0}
    return J.RUN_FINISHED, {"error": None, **data, **extra}


STARTED = (J.RUN_STARTED, {"input": "hi", "agent": "a", "config_hash": "h", "autonomous": False})


def test_a_crash_resume_and_a_reply_to_a_suspension_are_told_apart() -> None:
    trace = trace_from_journal(
        journal(
            STARTED,
            (J.RUN_RESUMED, {"after_seq": 1, "step": 0, "holder": None}),
            finished("suspended", suspension={"reason": "?", "kind": "input", "data": {}}),
            (J.RUN_RESUMED, {"after_seq": 3, "step": 1, "holder": None, "reply": "yes"}),
            finished("completed", output="done"),
        )
    )
    assert (trace.resumes, trace.replies) == (1, 1)
    assert [r.outcome for r in trace.runs] == ["suspended", "completed"]
    assert trace.outcome == "completed" and trace.output == "done"


def test_a_refused_run_says_by_whom() -> None:
    trace = trace_from_journal(
        journal(STARTED, finished("refused", error="not today", refused_by="policy"))
    )
    assert trace.refused_by == "policy"
    result = ended_with("completed").check(trace)
    assert result.actual == "outcome refused by policy: not today"
    assert ended_with("refused").check(trace).status == "passed"
    with pytest.raises(EvalDefinitionError, match=r"one of completed, .*refused, suspended"):
        ended_with("rejected")


def test_tool_calls_are_read_from_the_model_response_and_the_tool_events() -> None:
    call = {"id": "c1", "name": "calculator", "arguments": {"expression": "1 + 1"}}
    response = {"message": {"role": "assistant", "content": "", "tool_calls": [call]}}
    trace = trace_from_journal(
        journal(
            STARTED,
            (J.MODEL_CALL_FINISHED, {"step": 1, "response": response}),
            (
                J.TOOL_CALL_STARTED,
                {
                    "step": 1,
                    "call_id": "c1",
                    "name": "calculator",
                    "arguments": {"expression": "1 + 1"},
                    "idempotent": True,
                    "decision": [],
                },
            ),
            (
                J.TOOL_CALL_FINISHED,
                {
                    "step": 1,
                    "call_id": "c1",
                    "name": "calculator",
                    "content": "2",
                    "is_error": False,
                },
            ),
            finished("completed", output="2"),
        )
    )
    [request] = trace.requests
    assert (request.name, dict(request.arguments), request.call_id, request.step) == (
        "calculator",
        {"expression": "1 + 1"},
        "c1",
        1,
    )
    [execution] = trace.executions
    assert (execution.content, execution.is_error, execution.interrupted) == ("2", False, False)
    assert trace.model_calls == 1


def test_a_plugins_own_events_are_there_for_its_checks() -> None:
    trace = trace_from_journal(
        journal(STARTED, ("notes.saved", {"text": "a"}), ("notes.saved", {"text": "b"}))
    )
    assert [e["text"] for e in trace.plugin_events("notes.saved")] == ["a", "b"]
    assert trace.plugin_events("rag.retrieved") == []
    with pytest.raises(ValueError, match=r"must be '<plugin id>\.<name>'"):
        trace.plugin_events("run_started")
