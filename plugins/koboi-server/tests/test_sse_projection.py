"""The SSE projection knows every kernel event kind (read through its typed schema), gives a
plugin's event its own name, and keeps ``journal`` for what a newer kernel may add."""

from __future__ import annotations

import json
import types
import typing
from typing import Any, Literal, get_args, get_origin, get_type_hints

import pytest

from koboi import journal as J
from koboi.events import ChildEvent, FinalEvent, PluginEvent, RunResult, TextDeltaEvent
from koboi.messages import Usage
from koboi.store import JournalEvent
from koboi_server.sse import EVENT_NAMES, agent_event_data, live_event, project


def _sample(annotation: Any) -> Any:
    """A value of ``annotation`` (the schemas' types: scalars, lists, dicts, TypedDicts)."""
    origin = get_origin(annotation)
    if origin is typing.NotRequired or origin is typing.Required:
        return _sample(get_args(annotation)[0])
    if origin is Literal:
        return get_args(annotation)[0]
    if origin in (typing.Union, types.UnionType):
        return _sample(next(a for a in get_args(annotation) if a is not type(None)))
    if origin is list:
        return []
    if origin is dict or annotation is dict:
        return {}
    if annotation is Any:
        return "any"
    if isinstance(annotation, type) and hasattr(annotation, "__required_keys__"):
        return _data(annotation)
    return {int: 1, str: "x", bool: True, float: 1.5}[annotation]


def _data(schema: Any) -> dict[str, Any]:
    hints = get_type_hints(schema)
    return {key: _sample(hints[key]) for key in schema.__required_keys__}


def _event(kind: str, data: dict[str, Any], seq: int = 3) -> JournalEvent:
    return JournalEvent("s1", seq, kind, data, 10.0)


@pytest.mark.parametrize("kind", J.EVENT_KINDS, ids=str)
def test_every_kernel_event_kind_has_an_sse_event_of_its_own(kind: J.EventKind[Any]) -> None:
    data = _data(kind.schema)
    if kind == J.MODEL_CALL_FINISHED:
        data["response"] = {"message": {"role": "assistant", "content": "hi"}}
    name, projected = project(_event(kind, data), {})
    assert name != "journal" and name in EVENT_NAMES, kind
    assert projected["event_id"] == 3 and projected["session_id"] == "s1"
    json.dumps(projected)  # what a frame sends


def test_final_carries_the_suspension_and_who_refused() -> None:
    suspension = {"reason": "who?", "kind": "input", "data": {"room": "1"}, "call_id": "c1"}
    data = {**_data(J.RunFinishedData), "outcome": "suspended", "suspension": suspension}
    name, projected = project(_event(J.RUN_FINISHED, data), {})
    assert name == "final" and projected["suspension"] == suspension
    refused = {**_data(J.RunFinishedData), "outcome": "refused", "refused_by": "policy"}
    assert project(_event(J.RUN_FINISHED, refused), {})[1]["refused_by"] == "policy"


def test_plugin_events_are_plugin_events_and_unknown_kernel_events_journal_ones() -> None:
    name, data = project(_event("rag.retrieved", {"hits": 2}), {})
    assert (name, data["type"], data["data"]) == ("plugin_event", "rag.retrieved", {"hits": 2})
    assert data["event_id"] == 3
    name, data = project(_event("future_kernel_event", {"x": 1}), {})
    assert (name, data["type"]) == ("journal", "future_kernel_event")


def test_live_events_have_no_id_and_say_what_they_are() -> None:
    progress = PluginEvent("demo.progress", {"done": 1}, 2, None, "c7")
    assert live_event(progress) == (
        "plugin_event",
        {"type": "demo.progress", "data": {"done": 1}, "step": 2, "call_id": "c7"},
    )
    result = RunResult("child", "completed", "meow", Usage(), 1)
    inner = ChildEvent(TextDeltaEvent("me", 1), "grandchild", "c9", "node")
    child = ChildEvent(inner, "child", "c1", None)
    name, data = live_event(child)
    assert name == "child_event" and data["parent_call_id"] == "c1"
    assert data["child_session_id"] == "child"
    assert data["event"] == {
        "kind": "child",
        "parent_call_id": "c9",
        "tag": "node",
        "child_session_id": "grandchild",
        "event": {"kind": "text_delta", "step": 1, "text": "me"},
    }
    final = agent_event_data(FinalEvent(result, 5))
    assert (final["kind"], final["output"], final["event_id"]) == ("final", "meow", 5)
    json.dumps(data)


def test_the_hub_ties_a_live_event_to_the_last_commit_and_never_replays_it() -> None:
    import anyio

    from koboi_server.hub import Committed, Hub, Live

    async def main() -> None:
        hub = Hub()
        hub.live("s", "plugin_event", {"type": "demo.x"})  # no local run: nothing to tie it to
        early = hub.subscribe("s")
        hub.run_started("s")
        hub.committed("s", 4)
        hub.live("s", "plugin_event", {"type": "demo.progress"})
        hub.committed("s", 6, model_call_step=2)
        hub.live("s", "child_event", {"tag": "n1"})
        late = hub.subscribe("s")
        assert early.take() == [
            Committed(4),
            Live(4, "plugin_event", {"type": "demo.progress"}),
            Committed(6),
            Live(6, "child_event", {"tag": "n1"}),
        ]
        assert late.take() == []  # progress, not history: a later subscriber starts empty
        hub.run_ended("s")
        early.close()
        late.close()

    anyio.run(main)
