"""Every strategy through a real agent: a long scripted session against a model that
refuses what a real one would (a request over its window, a tool call without its
result), with the journal as the witness."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from koboi import KoboiAgent, PluginHost
from koboi import journal as J
from koboi.store import InMemoryStore, JournalEvent

pytestmark = pytest.mark.anyio

COMPACTING = ["truncation", "smart_truncation", "sliding_window", "key_facts", "summarise"]
SYSTEM = "You are a careful assistant. Use lookup for keys."


async def play(
    testkit: ModuleType,
    strategy: str,
    *,
    turns: int,
    window: int,
    store: InMemoryStore | None = None,
    **context: Any,
) -> tuple[Any, list[JournalEvent], Any]:
    model = testkit.WindowedModel(window)
    config = testkit.session_config(strategy, turns=turns, window=window, **context)
    async with KoboiAgent.from_dict(
        config, provider=model, store=store or InMemoryStore()
    ) as agent:
        result = await agent.run(testkit.turn_text(1))
        events = await agent.store.read(result.session_id)
    return result, events, model


def assert_the_journal_keeps_everything(
    testkit: ModuleType, events: list[JournalEvent], turns: int
) -> None:
    """Only the requests changed: the session's own conversation still has every turn."""
    users = [m.content for m in J.fold_messages(events) if m.role == "user"]
    assert users == [testkit.turn_text(t) for t in range(1, turns + 1)]


@pytest.mark.parametrize("strategy", COMPACTING)
async def test_a_long_session_runs_to_the_end_inside_the_window(
    host: PluginHost, testkit: ModuleType, strategy: str
) -> None:
    turns, window = 120, 1500
    result, events, model = await play(testkit, strategy, turns=turns, window=window)
    assert result.outcome == "completed", result.error
    assert result.output.startswith(("Answer to turn 120", "Done with key-120"))
    # The model refused nothing: no request over its window, no call without its result.
    assert not [e for e in events if e.type == J.MODEL_CALL_FAILED]
    loop_sizes = [size for purpose, size in model.sizes if purpose is None]
    assert len(loop_sizes) == turns + turns // 3
    assert max(loop_sizes) <= window
    # The history did outgrow the window: the strategy had work to do.
    assert (
        sum(
            testkit.WindowedModel(window).counter.count(testkit.turn_text(t))
            for t in range(1, turns)
        )
        > 3 * window
    )
    assert set(model.firsts) == {SYSTEM}  # the system prompt is never dropped
    assert all(users and users[-1] == f"Turn {i}:" for i, users in _latest(model))
    assert_the_journal_keeps_everything(testkit, events, turns)
    rewritten = [e for e in events if e.type == J.MODEL_CALL_STARTED and e.data.get("rewritten_by")]
    assert rewritten and all(e.data["rewritten_by"] == ["context"] for e in rewritten)


def _latest(model: Any) -> list[tuple[int, list[str]]]:
    """(turn, user messages) of each loop request: the newest user message is its turn's."""
    out = []
    for users in model.user_messages:
        turn = int(users[-1].split()[1].rstrip(":"))
        out.append((turn, users))
    return out


async def test_sliding_window_sends_the_last_turns_only(
    host: PluginHost, testkit: ModuleType
) -> None:
    result, _, model = await play(testkit, "sliding_window", turns=60, window=4000, keep_last=3)
    assert result.outcome == "completed", result.error
    assert max(len(users) for users in model.user_messages) == 3
    assert model.user_messages[-1] == ["Turn 58:", "Turn 59:", "Turn 60:"]


async def test_smart_truncation_keeps_the_first_user_message(
    host: PluginHost, testkit: ModuleType
) -> None:
    result, events, model = await play(testkit, "smart_truncation", turns=80, window=1500)
    assert result.outcome == "completed", result.error
    assert all(users[0] == "Turn 1:" for users in model.user_messages)
    assert any(e.type == "context.compacted" for e in events)


async def test_key_facts_keeps_a_line_per_dropped_fact(
    host: PluginHost, testkit: ModuleType
) -> None:
    result, events, _ = await play(testkit, "key_facts", turns=80, window=1500)
    assert result.outcome == "completed", result.error
    started = [e for e in events if e.type == J.MODEL_CALL_STARTED and "request" in e.data]
    added = [
        seg[1][0]["content"]
        for e in started
        for seg in e.data["request"]["messages"]
        if seg[0] == "add" and seg[1][0]["content"].startswith("Key facts")
    ]
    assert added, "no request carried the key facts"
    assert "lookup(" in added[-1] and "-> value of key-" in added[-1]
    assert "the user said: Turn " in added[-1]


async def test_summarise_asks_the_model_once_per_compaction_and_journals_the_summary(
    host: PluginHost, testkit: ModuleType
) -> None:
    result, events, model = await play(testkit, "summarise", turns=80, window=1500)
    assert result.outcome == "completed", result.error
    compactions = [e for e in events if e.type == "context.compacted"]
    side = [e for e in events if e.type == J.SIDE_CALL_FINISHED]
    assert compactions and all(e.data["summary"] for e in compactions)
    assert {e.data["purpose"] for e in side} == {"context.summary"}
    assert len(side) >= len(compactions)
    last = compactions[-1].data
    assert last["summary"].startswith("Turns up to ")
    assert last["tokens_after"] <= last["budget"] < last["tokens_before"]
    # Every summary call fitted the window too.
    assert max(size for purpose, size in model.sizes if purpose) <= 1500
    requests = [e for e in events if e.type == J.MODEL_CALL_STARTED and "request" in e.data]
    assert "Summary of the earlier conversation" in str(requests[-1].data["request"])


async def test_noop_stops_with_a_clear_error_instead_of_a_provider_400(
    host: PluginHost, testkit: ModuleType
) -> None:
    result, events, model = await play(testkit, "noop", turns=120, window=1500)
    assert result.outcome == "failed"
    assert result.error.startswith("context: the whole conversation needs ")
    assert "over the 1313 a request may take (strategy noop); choose a strategy" in result.error
    assert not [e for e in events if e.type == J.MODEL_CALL_FAILED]  # the model refused nothing
    assert max(size for _, size in model.sizes) <= 1500


async def test_a_turn_that_can_never_fit_stops_the_run_before_the_model(
    host: PluginHost, testkit: ModuleType
) -> None:
    model = testkit.WindowedModel(1000)
    config = testkit.session_config("truncation", turns=1, window=1000)
    async with KoboiAgent.from_dict(config, provider=model, store=InMemoryStore()) as agent:
        result = await agent.run("Turn 1: " + "word " * 2000)
    assert result.outcome == "failed"
    assert result.error.startswith("context: the newest user message with the newest step")
    assert (
        "shorten the message or the tool results, or raise context.max_context_tokens"
        in result.error
    )
    assert model.sizes == []


async def test_the_window_must_be_known(host: PluginHost, testkit: ModuleType) -> None:
    config = testkit.session_config("truncation", turns=1)
    config["llm"] = {"provider": "windowed"}

    class Unknown(testkit.WindowedModel):  # type: ignore[misc,name-defined]
        def context_window(self) -> int | None:
            return None

    async with KoboiAgent.from_dict(config, provider=Unknown(), store=InMemoryStore()) as agent:
        result = await agent.run(testkit.turn_text(1))
    assert result.outcome == "failed"
    assert result.error == (
        "context: the model's context window is unknown; set context.max_context_tokens or "
        "llm.context_window"
    )
    # With the config's window it runs.
    config["context"]["max_context_tokens"] = 2000
    async with KoboiAgent.from_dict(config, provider=Unknown(), store=InMemoryStore()) as agent:
        assert (await agent.run(testkit.turn_text(1))).outcome == "completed"
