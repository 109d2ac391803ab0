"""Session totals (what a session's runs used) and where a trace context comes from."""

from __future__ import annotations

import pytest

from koboi.journal import totals_of
from koboi.store import InMemoryStore, NewEvent, SessionTotals
from koboi.tracing import TraceContext


def _finished(input_tokens: int, output_tokens: int, cost: float | None) -> NewEvent:
    response: dict[str, object] = {
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}
    }
    if cost is not None:
        response["cost_usd"] = cost
    return NewEvent("model_call_finished", {"step": 1, "response": response})


def test_totals_count_runs_calls_tokens_and_cost() -> None:
    events = [
        NewEvent("run_started", {"input": "x"}),
        _finished(10, 2, 0.5),
        NewEvent("side_call_finished", {"response": {"usage": {"input_tokens": 3}}}),
        NewEvent("tool_call_finished", {"content": "ignored"}),
        NewEvent("run_started", {"input": "y"}),
        _finished(5, 1, None),
        # Malformed data counts nothing rather than failing an append.
        NewEvent("model_call_finished", {"response": {"usage": {"input_tokens": "many"}}}),
    ]
    assert totals_of(events) == SessionTotals(
        runs=2, model_calls=3, input_tokens=18, output_tokens=3, cost_usd=0.5
    )
    halves = totals_of(events[:3]) + totals_of(events[3:])
    assert halves == totals_of(events)
    assert halves.total_tokens == 21


@pytest.mark.anyio
async def test_memory_store_keeps_totals_as_it_appends() -> None:
    store = InMemoryStore()
    sid = (await store.create_session()).id
    await store.append(sid, [NewEvent("run_started", {}), _finished(100, 20, 0.01)])
    await store.append(sid, [_finished(1, 1, 0.02)])
    info = await store.get_session(sid)
    assert info.totals == totals_of(await store.read(sid))
    assert info.totals is not None and info.totals.cost_usd == pytest.approx(0.03)


def test_a_trace_started_here_says_so_and_a_callers_does_not() -> None:
    new = TraceContext.new()
    assert new.started_here
    given = TraceContext.parse(new.traceparent)
    assert given is not None and not given.started_here
    assert given == new  # the origin is not part of the context's identity
    assert not new.child().started_here
    again = TraceContext.from_data(new.to_data())
    assert again is not None and not again.started_here
    assert "started_here" not in new.to_data()
