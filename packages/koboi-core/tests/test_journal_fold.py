"""Property: folding a session's journal gives back exactly the conversation the loop had."""

from __future__ import annotations

from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koboi import KoboiAgent, tool
from koboi.journal import INTERRUPTED_RESULT, fold_messages
from koboi.store import InMemoryStore, NewEvent
from koboi_scripted import ScriptedProvider


@tool(thread=False)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


small = st.integers(min_value=-50, max_value=50)
good_call = st.builds(lambda a, b: {"name": "add", "arguments": {"a": a, "b": b}}, small, small)
bad_call = st.sampled_from(
    [
        {"name": "add", "arguments": {"a": "x", "b": 1}},
        {"name": "nope", "arguments": {}},
    ]
)
tool_turn = st.lists(st.one_of(good_call, bad_call), min_size=1, max_size=3)
# One run: some tool turns, then a text answer.
run_script = st.tuples(st.lists(tool_turn, max_size=3), st.text(min_size=1, max_size=20))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.lists(run_script, min_size=1, max_size=3), parallel=st.booleans())
def test_fold_of_the_journal_equals_the_conversation(runs: list[Any], parallel: bool) -> None:
    turns: list[Any] = []
    for tool_turns, answer in runs:
        turns.extend(tool_turns)
        turns.append(answer)

    async def main() -> None:
        store = InMemoryStore()
        provider = ScriptedProvider.from_turns(turns)
        config = {
            "llm": {"provider": "scripted"},
            "agent": {"parallel_tool_calls": parallel, "max_iterations": 50},
        }
        async with KoboiAgent.from_dict(
            config, provider=provider, store=store, extra_tools=[add]
        ) as agent:
            session: str | None = None
            for index in range(len(runs)):
                result = await agent.run(f"question {index}", session_id=session)
                assert result.outcome == "completed"
                session = result.session_id
            assert session is not None
            folded = fold_messages(await store.read(session))
            assert folded == result.messages

    anyio.run(main)


def test_a_tool_call_without_an_outcome_folds_to_interrupted() -> None:
    async def main() -> None:
        store = InMemoryStore()
        session = (await store.create_session()).id
        response = {
            "message": {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c1", "name": "write", "arguments": {"path": "x"}},
                    {"id": "c2", "name": "write", "arguments": {"path": "y"}},
                ],
            }
        }
        await store.append(
            session,
            [
                NewEvent("run_started", {"input": "go"}),
                NewEvent("model_call_finished", {"step": 1, "response": response}),
                NewEvent("tool_call_started", {"step": 1, "call_id": "c2", "name": "write"}),
                NewEvent(
                    "tool_call_finished",
                    {"step": 1, "call_id": "c2", "name": "write", "content": "ok"},
                ),
                NewEvent("tool_call_started", {"step": 1, "call_id": "c1", "name": "write"}),
            ],
        )
        messages = fold_messages(await store.read(session))
        assert [m.role for m in messages] == ["user", "assistant", "tool", "tool"]
        # Results come back in the order the model asked, whatever order they finished in.
        assert [(m.tool_call_id, m.content, m.is_error) for m in messages[2:]] == [
            ("c1", INTERRUPTED_RESULT, True),
            ("c2", "ok", False),
        ]

    anyio.run(main)
