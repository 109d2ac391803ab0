"""Replaying captured sessions in-process: identical when nothing changed, the first
divergence at the right event when something did."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from koboi.approval import ApprovalRequest, CallbackApprover
from koboi.tools import Risk, tool
from koboi_replay import bundle as B
from koboi_replay.errors import ReplayError
from koboi_replay.replayer import replay_bundle

pytestmark = pytest.mark.anyio

Record = Callable[..., Awaitable[Any]]
Write = Callable[..., Path]


def _reseal(bundle: B.Bundle, name: str, records: list[dict[str, Any]]) -> B.Bundle:
    """A copy of ``bundle`` with one file's records replaced and its checksum fixed."""
    copy = B.parse_bundle(bundle.to_bytes())
    copy.files[name] = B.jsonl(records)
    copy.seal()
    return B.parse_bundle(copy.to_bytes())


def _seq_of(bundle: B.Bundle, type_: str, **match: Any) -> int:
    for event in bundle.events():
        if event.type == type_ and all(event.data.get(k) == v for k, v in match.items()):
            return event.seq
    raise AssertionError(f"no {type_} {match}")


async def test_a_session_that_used_tools_replays_identically(
    write_config: Write, record_session: Record
) -> None:
    captured = await record_session(write_config())
    bundle = B.parse_bundle(captured.bundle.to_bytes())
    types = [e.type for e in bundle.events()]
    assert types.count("tool_call_finished") == 3 and types.count("approval_decided") == 3
    report = await replay_bundle(bundle)
    assert report.identical, report.divergence
    assert report.replayed_events == report.expected_events == len(types)
    assert report.replayed_audit == report.expected_audit
    assert report.runs == 1 and report.tools == "recorded"


async def test_a_changed_tool_result_is_the_divergence(
    write_config: Write, record_session: Record
) -> None:
    bundle = (await record_session(write_config())).bundle
    results = bundle.records(B.TOOL_RESULTS)
    changed = next(r for r in results if r["call_id"] == "call_1_0")
    assert changed["content"] == "2"
    changed["content"] = "3"
    report = await replay_bundle(_reseal(bundle, B.TOOL_RESULTS, results))
    divergence = report.divergence
    assert divergence is not None and divergence.stream == "events"
    assert divergence.index == _seq_of(bundle, "tool_call_finished", call_id="call_1_0")
    assert divergence.path == "data.content"
    assert divergence.values() == ("2", "3")
    # The replay stopped at the divergence: nothing after it was journaled.
    assert report.replayed_events == divergence.index - 1


async def test_a_changed_recorded_event_is_the_divergence(
    write_config: Write, record_session: Record
) -> None:
    bundle = (await record_session(write_config())).bundle
    events = bundle.records(B.EVENTS)
    index = _seq_of(bundle, "model_call_finished", step=2)
    events[index - 1]["data"]["response"]["usage"]["output_tokens"] += 1
    report = await replay_bundle(_reseal(bundle, B.EVENTS, events))
    assert report.divergence is not None
    assert report.divergence.index == index
    assert report.divergence.path == "data.response.usage.output_tokens"


async def test_several_runs_and_denied_approvals(
    write_config: Write, record_session: Record
) -> None:
    """Two messages in one session; the approver says no to current_time. The replay asks
    nobody: every decision comes from the bundle."""

    def decide(request: ApprovalRequest) -> bool:
        return request.tool_name != "current_time"

    config = write_config()
    bundle = (await record_session(config, "go", "again", approver=CallbackApprover(decide))).bundle
    types = [e.type for e in bundle.events()]
    assert types.count("run_started") == 2 and "tool_call_refused" in types
    report = await replay_bundle(bundle)
    assert report.identical, report.divergence
    assert report.runs == 2


async def test_a_failed_model_call_replays_as_it_failed(
    write_config: Write, record_session: Record
) -> None:
    config = write_config(
        """
        agent: {name: short, mode: act}
        llm:
          provider: scripted
          on_exhausted: error
          script:
            - tool_calls: [{name: calculator, arguments: {expression: "1 + 2"}}]
        tools: {builtin: [calculator]}
        store: {url: "memory://"}
        """
    )
    bundle = (await record_session(config)).bundle
    failed = [e for e in bundle.events() if e.type == "model_call_failed"]
    assert failed and "script" in failed[0].data["error"]
    report = await replay_bundle(bundle)
    assert report.identical, report.divergence


async def test_provider_events_and_the_response_cache(
    write_config: Write, record_session: Record
) -> None:
    """A session answered from the response cache journaled cache hits; the replay
    reports them again. --with-cache takes only this session's cache entries."""
    config = write_config(
        """
        agent: {name: cached, mode: act}
        llm:
          provider: scripted
          script:
            - tool_calls: [{name: calculator, arguments: {expression: "6 * 7"}}]
            - reply: "42"
        tools: {builtin: [calculator]}
        cache: {mode: cache}
        store: {url: "memory://"}
        """
    )
    captured = await record_session(config, sessions=2, with_cache=True)
    bundle = captured.bundle
    hits = [e for e in bundle.events() if e.type == "provider_event"]
    assert [e.data["kind"] for e in hits] == ["cache_hit", "cache_hit"]
    cache = bundle.records(B.CACHE)
    assert len(cache) == 2 and all(item["key"] and item["entry"]["response"] for item in cache)
    report = await replay_bundle(bundle)
    assert report.identical, report.divergence


@tool(risk=Risk.SAFE, idempotent=True)
async def pause(seconds: float, label: str) -> str:
    """Wait, then answer with the label.

    Args:
        seconds: How long to wait.
        label: What to answer.
    """
    await anyio.sleep(seconds)
    return label


async def test_parallel_calls_replay_in_their_recorded_order(
    write_config: Write, record_session: Record
) -> None:
    """The first call is slow and the second fast, so the second finished first; served
    at once, they would journal in the other order."""
    config = write_config(
        """
        agent: {name: parallel, mode: act, parallel_tool_calls: true}
        llm:
          provider: scripted
          script:
            - tool_calls:
                - {name: pause, arguments: {seconds: 0.3, label: slow}}
                - {name: pause, arguments: {seconds: 0.0, label: fast}}
            - reply: done
        store: {url: "memory://"}
        """
    )
    bundle = (await record_session(config, extra_tools=[pause])).bundle
    finished = [e.data["content"] for e in bundle.events() if e.type == "tool_call_finished"]
    assert finished == ["fast", "slow"]
    started = time.perf_counter()
    report = await replay_bundle(bundle, extra_tools=[pause])
    assert report.identical, report.divergence
    assert time.perf_counter() - started < 0.3  # served, not slept through


async def test_live_tools_run_and_are_compared(write_config: Write, record_session: Record) -> None:
    bundle = (await record_session(write_config())).bundle
    await anyio.sleep(1.1)  # current_time answers to the second: let it move on
    report = await replay_bundle(bundle, tools="live")
    divergence = report.divergence
    assert divergence is not None and report.tools == "live"
    # The calculator's results were the same live; the clock's was not.
    assert divergence.index == _seq_of(bundle, "tool_call_finished", call_id="call_1_1")
    assert divergence.path == "data.content"


async def test_recorded_tools_touch_nothing_live_tools_do(
    write_config: Write, record_session: Record, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "0")
    config = write_config(
        """
        agent: {name: writer, mode: act}
        llm:
          provider: scripted
          script:
            - tool_calls: [{name: append_log, arguments: {line: once}}]
            - reply: written
        tools: {builtin: [append_log]}
        sandbox: {backend: passthrough, workdir: work}
        store: {url: "memory://"}
        """
    )
    bundle = (await record_session(config)).bundle
    replay_dir = tmp_path / "elsewhere"
    replay_dir.mkdir()
    report = await replay_bundle(bundle, base_dir=replay_dir)
    assert report.identical, report.divergence
    assert list(replay_dir.iterdir()) == []
    # Control: live, the tool really runs (in the config's workdir, under base_dir).
    report = await replay_bundle(bundle, base_dir=replay_dir, tools="live")
    assert report.identical, report.divergence
    assert (replay_dir / "work" / "crash_demo.log").read_text() == "once\n"


async def test_a_missing_answer_names_the_request(
    write_config: Write, record_session: Record
) -> None:
    bundle = (await record_session(write_config())).bundle
    calls = bundle.records(B.MODEL_CALLS)
    report = await replay_bundle(_reseal(bundle, B.MODEL_CALLS, calls[:-1]))
    divergence = report.divergence
    assert divergence is not None and divergence.actual is not None
    assert divergence.index == _seq_of(bundle, "model_call_finished", step=3)
    error = divergence.actual["data"]["error"]
    assert "no recorded answer for model call 3 of run 1" in error
    assert "last user message 'go'" in error and "tools: calculator, current_time" in error


async def test_what_cannot_be_replayed_is_refused(
    write_config: Write, record_session: Record, monkeypatch: pytest.MonkeyPatch
) -> None:
    from koboi.plugins import default_host
    from koboi_replay.capture import export_workflow

    workflow = export_workflow(write_config(), default_host()).bundle
    with pytest.raises(ReplayError, match="workflow bundle"):
        await replay_bundle(workflow, label="flow.koboi")
    bundle = (await record_session(write_config())).bundle
    with pytest.raises(ReplayError, match="--tools must be one of"):
        await replay_bundle(bundle, tools="sometimes")  # type: ignore[arg-type]
    # A user who asks to record or fill a response cache is told a replay does neither...
    for mode in ("record", "cache"):
        monkeypatch.setenv("KOBOI_CACHE_MODE", mode)
        with pytest.raises(ReplayError, match="unset KOBOI_CACHE_MODE"):
            await replay_bundle(bundle)
    # ...while live and replay (offline, which a bundle replay is anyway) change nothing.
    for mode in ("live", "replay"):
        monkeypatch.setenv("KOBOI_CACHE_MODE", mode)
        assert (await replay_bundle(bundle)).identical


async def test_a_session_killed_after_any_commit_replays_identically(write_config: Write) -> None:
    """A process can die between any two commits. Record a session, keeping each commit
    (its events and audit records) apart; then, for every commit but the last, capture the
    session as it was when only the commits up to it had happened: each replays
    identically, the work in flight failing in the replay as the process died in the
    recording."""
    from collections.abc import Mapping, Sequence

    from koboi.agent import KoboiAgent
    from koboi.approval import AllowAllApprover
    from koboi.plugins import default_host
    from koboi.store import InMemoryStore, JournalEvent, NewEvent
    from koboi_replay.capture import capture_session

    commits: list[tuple[list[NewEvent], list[Mapping[str, Any]]]] = []

    class CommitLog(InMemoryStore):
        async def append(
            self,
            session_id: str,
            events: Sequence[NewEvent],
            *,
            fence: int | None = None,
            audit: Sequence[Mapping[str, Any]] = (),
            status: Any = None,
        ) -> list[JournalEvent]:
            stored = await super().append(
                session_id, events, fence=fence, audit=audit, status=status
            )
            commits.append(([NewEvent(e.type, e.data) for e in stored], list(audit)))
            return stored

    config = write_config()
    recorder = KoboiAgent.from_config(config, approver=AllowAllApprover(), store=CommitLog())
    async with recorder:
        session_id = (await recorder.run("go")).session_id
    assert len(commits) >= 8
    for cut in range(1, len(commits)):
        store = InMemoryStore()
        await store.create_session(session_id)
        for events, audit in commits[:cut]:
            await store.append(session_id, events, audit=audit)
        captured = await capture_session(store, session_id, config_path=config, host=default_host())
        assert captured.bundle.manifest["session"]["interrupted"] is True
        report = await replay_bundle(B.parse_bundle(captured.bundle.to_bytes()))
        last = commits[cut - 1][0][-1].type
        assert report.identical, (cut, last, report.divergence)
        assert report.replayed_events == sum(len(events) for events, _ in commits[:cut])
