"""What the journal carries and what is served from it: compactions handed back to later
runs, a replay that sends the same requests, pre-compaction hooks, the calibration,
and context other plugins add for one call."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from koboi import Interceptor, KoboiAgent, PluginHost, RunInfo, hookimpl
from koboi import journal as J
from koboi.messages import ModelRequest
from koboi.store import InMemoryStore, JournalEvent

pytestmark = pytest.mark.anyio


def requests_of(events: list[JournalEvent]) -> list[Any]:
    """What was sent, call by call: each rewrite as the kernel journaled it."""
    return [e.data.get("request") for e in events if e.type == J.MODEL_CALL_STARTED]


async def test_later_runs_reuse_the_journaled_summaries(
    host: PluginHost, testkit: ModuleType
) -> None:
    """One run per turn: each run restores the compactions instead of asking again."""
    config = testkit.session_config("summarise", turns=1, window=1500)
    config["agent"].pop("runner")
    model = testkit.WindowedModel(1500)
    async with KoboiAgent.from_dict(config, provider=model, store=InMemoryStore()) as agent:
        session = None
        for turn in range(1, 61):
            result = await agent.run(testkit.turn_text(turn), session_id=session)
            assert result.outcome == "completed", result.error
            session = result.session_id
        assert session is not None
        events = await agent.store.read(session)
    compactions = [e for e in events if e.type == "context.compacted"]
    assert len(compactions) >= 3
    # The model is asked for a summary only when a compaction drops turns (one call per
    # chunk of them), never again by a later run: each run restores the summaries.
    asked_for = []
    for event in events:
        if event.type == J.SIDE_CALL_STARTED:
            asked_for.append(None)
        elif event.type == "context.compacted" and asked_for and asked_for[-1] is None:
            asked_for = [c for c in asked_for if c is not None] + [event.seq]
        elif event.type == J.MODEL_CALL_STARTED:
            assert None not in asked_for, "a summary was asked for without a compaction"
    assert len(asked_for) == len(compactions)
    assert max(size for _, size in model.sizes) <= 1500


async def _capture_and_replay(
    tmp_path: Path, host: PluginHost, testkit: ModuleType, config: dict[str, Any]
) -> tuple[Any, list[JournalEvent]]:
    from koboi_replay import capture_session, replay_bundle

    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    store = InMemoryStore()
    agent = KoboiAgent.from_config(path, host=host, store=store)
    async with agent:
        result = await agent.run(testkit.turn_text(1))
        events = await store.read(result.session_id)
        captured = await capture_session(store, result.session_id, config_path=path, host=host)
    report = await replay_bundle(captured.bundle, host=host, base_dir=tmp_path)
    return report, events


@pytest.mark.parametrize(
    "strategy", ["truncation", "smart_truncation", "sliding_window", "key_facts", "summarise"]
)
async def test_a_replay_sends_the_same_requests_event_for_event(
    tmp_path: Path, host: PluginHost, testkit: ModuleType, strategy: str
) -> None:
    import koboi_replay.plugin

    host.add_plugin(koboi_replay.plugin, "replay", dist="koboi-replay")
    config = testkit.session_config(strategy, turns=45, window=1500)
    report, events = await _capture_and_replay(tmp_path, host, testkit, config)
    assert any(e.type == J.MODEL_CALL_STARTED and "request" in e.data for e in events)
    assert report.identical, report.divergence
    assert report.replayed_events == report.expected_events == len(events)


class Noter:
    """A pre-compaction hook: asks the summary to keep the keys, and remembers the calls."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def before_compaction(self, run: RunInfo, details: Mapping[str, Any]) -> str | None:
        self.calls.append(dict(details))
        return "Always keep every key-<number> you see."


class Broken:
    async def before_compaction(self, run: RunInfo, details: Mapping[str, Any]) -> str | None:
        raise RuntimeError("the hook's command failed")


class HookPlugin:
    def __init__(self) -> None:
        self.noter = Noter()

    @hookimpl
    def koboi_context_register_compaction_hooks(self, register: Any) -> None:
        register("noter", self.noter)
        register("broken", Broken())


async def test_pre_compaction_hooks_are_asked_journaled_and_never_stop_a_compaction(
    host: PluginHost, testkit: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    hooks = HookPlugin()
    host.add_plugin(hooks, "hooksy", dist="hooksy")
    model = testkit.WindowedModel(1500)
    config = testkit.session_config("summarise", turns=40, window=1500)
    with caplog.at_level(logging.WARNING, logger="koboi.context"):
        async with KoboiAgent.from_dict(config, provider=model, store=InMemoryStore()) as agent:
            result = await agent.run(testkit.turn_text(1))
            events = await agent.store.read(result.session_id)
    assert result.outcome == "completed", result.error
    compactions = [e for e in events if e.type == "context.compacted"]
    asked = [e for e in events if e.type == "context.hook"]
    assert len(asked) == 2 * len(compactions) > 0
    first = compactions[0].data
    assert hooks.noter.calls[0] == {
        "strategy": "summarise",
        "tokens_before": first["tokens_before"],
        "budget": 1313,
        "messages_dropped": first["messages_dropped"],
    }
    assert hooks.noter.calls[0]["tokens_before"] > 1313
    noted = next(e.data for e in asked if e.data["hook"] == "noter")
    assert noted["plugin"] == "hooksy" and noted["instructions"].startswith("Always keep")
    failed = next(e.data for e in asked if e.data["hook"] == "broken")
    assert failed["error"] == "RuntimeError: the hook's command failed"
    assert "compaction hook 'broken' (plugin 'hooksy') failed" in caplog.text
    # The instructions reached the summary call.
    started = [e for e in events if e.type == J.SIDE_CALL_STARTED]
    assert started and model.sizes  # asked, and answered within the window
    assert all(c["strategy"] == "summarise" for c in hooks.noter.calls)


async def test_a_heuristic_count_is_corrected_by_the_usage_the_provider_reports(
    host: PluginHost, testkit: ModuleType
) -> None:
    """The strategy estimates; the model reports its exact count; the factor is journaled
    before it is used, and the requests still fit."""
    model = testkit.WindowedModel(1500)
    config = testkit.session_config("truncation", turns=60, window=1500, tokenizer="heuristic")
    async with KoboiAgent.from_dict(config, provider=model, store=InMemoryStore()) as agent:
        result = await agent.run(testkit.turn_text(1))
        events = await agent.store.read(result.session_id)
    assert result.outcome == "completed", result.error
    calibrated = [e.data for e in events if e.type == "context.calibrated"]
    assert calibrated and calibrated[0]["counter"] == "heuristic"
    # The heuristic counts these words longer than o200k does: the factor is below 1.
    assert 0.5 <= calibrated[-1]["factor"] < 1.0
    assert max(size for _, size in model.sizes) <= 1500


class Recall(Interceptor):
    """Adds ~300 tokens of call-scope context to every call, as a memory plugin would."""

    name = "recall"
    priority = 800

    async def before_model_call(self, request: ModelRequest, run: RunInfo) -> ModelRequest | None:
        run.add_context("Remembered: " + "violet harbor " * 150, scope="call")
        return None


async def test_context_added_for_one_call_is_counted(host: PluginHost, testkit: ModuleType) -> None:
    model = testkit.WindowedModel(1500)
    config = testkit.session_config("truncation", turns=40, window=1500)
    agent = KoboiAgent.from_dict(
        config, provider=model, store=InMemoryStore(), interceptors=[Recall()]
    )
    async with agent:
        result = await agent.run(testkit.turn_text(1))
    assert result.outcome == "completed", result.error
    assert max(size for _, size in model.sizes) <= 1500
    assert max(size for _, size in model.sizes) > 1200  # the room was used, not wasted
