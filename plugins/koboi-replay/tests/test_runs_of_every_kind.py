"""What the kernel journals beyond a plain message run, captured and replayed byte-identical
offline: side calls (and a plugin that asks another one), plugin events (and one of a
plugin not installed here), direct tool calls, suspended runs continued with a reply,
and the W3C trace context of every run. Each has its positive control: a change the
replay must catch."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from koboi import hookimpl
from koboi.approval import AllowAllApprover
from koboi.interceptors import Interceptor, Refusal, RunInfo
from koboi.plugins import PluginHost
from koboi.store import InMemoryStore, NewEvent
from koboi.tools import Risk, ToolContext, tool
from koboi.tracing import TraceContext
from koboi_replay import bundle as B
from koboi_replay.capture import capture_session
from koboi_replay.replayer import replay_bundle

pytestmark = pytest.mark.anyio

Write = Callable[..., Path]
Drive = Callable[[Any], Awaitable[None]]

#: Rules, not a script: a scripted script answers by the number of assistant messages,
#: so a side call (a fresh request) would be given the loop's first turn.
SIDE_CALL_CONFIG = r"""
    agent: {name: summarised, mode: act, approval_risk: safe}
    llm:
      provider: scripted
      rules:
        - match: '^Summarise (?P<what>.+)'
          reply: "summary of {what}"
        - match: '^Plan (?P<what>.+)'
          reply: "plan for {what}"
        - match: '(?P<expr>\d+ [*+] \d+)'
          tool: calculator
          arguments: {expression: "{expr}"}
          reply: "{expr} = {result}"
    tools: {builtin: [calculator]}
    store: {url: "memory://"}
"""

GREETING_CONFIG = """
    agent: {name: greeter, mode: act}
    llm:
      provider: scripted
      on_exhausted: error
      script:
        - tool_calls: [{name: greet, arguments: {}}]
        - reply: "Greeted."
    store: {url: "memory://"}
"""

TRACEPARENT = f"00-{'4bf92f3577b34da6a3ce929d0e0e4736'}-{'00f067aa0ba902b7'}-01"


class Summariser(Interceptor):
    """Asks the run's model a side call before the run starts, keeps the answer as
    session context, and journals a plugin event of its own."""

    name = "summariser"

    def __init__(self, purpose: str = "summary", prompt: str = "Summarise") -> None:
        self.purpose = purpose
        self.prompt = prompt

    async def on_run_start(self, run: RunInfo) -> Refusal | None:
        if run.resumed:
            return None
        text = await run.model.ask(f"{self.prompt} {run.input}", purpose=self.purpose)
        run.add_context(f"Context: {text}", scope="session")
        run.record("summariser.noted", {"summary": text, "chars": len(text)})
        return None


def host_with(*interceptors: Interceptor, plugin: str = "summariser") -> PluginHost:
    """The installed plugins, and one more registering ``interceptors``."""

    class Plugin:
        @hookimpl
        def koboi_register_interceptors(self, register: Callable[[object], None]) -> None:
            for interceptor in interceptors:
                register(interceptor)

    host = PluginHost(strict=True)
    host.load()
    if interceptors:
        host.add_plugin(Plugin(), plugin)
    return host


async def record(
    config: Path,
    drive: Drive,
    *,
    host: PluginHost | None = None,
    extra_tools: Any = (),
) -> B.Bundle:
    """Open the config's agent, let ``drive`` run it, capture its last session (as bytes
    and back, as a file would)."""
    from koboi.agent import KoboiAgent

    host = host or host_with()
    agent = KoboiAgent.from_config(
        config, host=host, approver=AllowAllApprover(), extra_tools=extra_tools
    )
    async with agent:
        await drive(agent)
        captured = await capture_session(agent.store, "last", config_path=config, host=host)
    return B.parse_bundle(captured.bundle.to_bytes())


def reseal(bundle: B.Bundle, name: str, records: list[dict[str, Any]]) -> B.Bundle:
    copy = B.parse_bundle(bundle.to_bytes())
    copy.files[name] = B.jsonl(records)
    copy.seal()
    return B.parse_bundle(copy.to_bytes())


def types_of(bundle: B.Bundle) -> list[str]:
    return [e.type for e in bundle.events()]


def seq_of(bundle: B.Bundle, type_: str) -> int:
    return next(e.seq for e in bundle.events() if e.type == type_)


# -- side calls ------------------------------------------------------------------------


async def _ask_twice(agent: Any) -> None:
    first = await agent.run("what is 6 * 7")
    assert first.outcome == "completed" and first.output == "6 * 7 = 42"
    await agent.run("and 2 + 2", session_id=first.session_id)


async def test_a_side_call_is_captured_and_replayed_offline(write_config: Write) -> None:
    config = write_config(SIDE_CALL_CONFIG)
    bundle = await record(config, _ask_twice, host=host_with(Summariser()))
    types = types_of(bundle)
    assert types.count("side_call_started") == types.count("side_call_finished") == 2
    assert types.count("summariser.noted") == 2 and types.count("context_added") == 2
    side = [c for c in bundle.records(B.MODEL_CALLS) if c.get("purpose") is not None]
    # Numbered per (run, purpose): each run made its first "summary" call.
    assert [(c["run"], c["purpose"], c["call"]) for c in side] == [
        (1, "summary", 1),
        (2, "summary", 1),
    ]
    assert side[0]["response"]["message"]["content"] == "summary of what is 6 * 7"
    started = next(e for e in bundle.events() if e.type == "side_call_started")
    assert side[0]["key"] == started.data["key"]
    assert bundle.manifest["contents"]["side_calls"] == 2
    assert bundle.manifest["model"]["identity"]["provider"] == "scripted"
    # The loop's own calls keep their numbering, without a purpose (as in old bundles).
    loop = [c for c in bundle.records(B.MODEL_CALLS) if "purpose" not in c]
    assert [(c["run"], c["call"]) for c in loop] == [(1, 1), (1, 2), (2, 1), (2, 2)]

    report = await replay_bundle(bundle, host=host_with(Summariser()))
    assert report.identical, report.divergence
    assert report.replayed_events == report.expected_events == len(types)

    # Positive control: a side call answered otherwise in the bundle is journaled otherwise.
    calls = bundle.records(B.MODEL_CALLS)
    changed = next(c for c in calls if c.get("purpose") == "summary")
    changed["response"]["message"]["content"] = "a different summary"
    report = await replay_bundle(reseal(bundle, B.MODEL_CALLS, calls), host=host_with(Summariser()))
    divergence = report.divergence
    assert divergence is not None
    assert divergence.index == seq_of(bundle, "side_call_finished")
    assert divergence.path == "data.response.message.content"


async def test_a_plugin_that_asks_another_side_call_diverges(write_config: Write) -> None:
    config = write_config(SIDE_CALL_CONFIG)
    bundle = await record(config, _ask_twice, host=host_with(Summariser()))
    at = seq_of(bundle, "side_call_started")

    # Another purpose.
    report = await replay_bundle(bundle, host=host_with(Summariser(purpose="plan")))
    divergence = report.divergence
    assert divergence is not None and divergence.index == at
    assert divergence.path == "data.purpose"
    assert divergence.values() == ("summary", "plan")
    assert "different side call" in divergence.reason
    # Stopped there: the batch holding it was refused, nothing after it was journaled.
    assert report.replayed_events < at

    # The same purpose, another question: the request key differs.
    report = await replay_bundle(bundle, host=host_with(Summariser(prompt="Plan")))
    divergence = report.divergence
    assert divergence is not None and divergence.index == at
    assert divergence.path == "data.key"

    # No side call at all: the plugin is gone.
    report = await replay_bundle(bundle, host=host_with())
    divergence = report.divergence
    assert divergence is not None and divergence.index == at
    assert "side call here that the replay did not make" in divergence.reason


async def test_bundles_without_side_call_records_or_identity_still_replay(
    write_config: Write,
) -> None:
    """A format-1 bundle (written before side calls: no ``purpose``, no recorded model
    identity) replays; a bundle without the identity takes it from the config here."""
    config = write_config(SIDE_CALL_CONFIG)

    def older(bundle: B.Bundle, version: int) -> B.Bundle:
        copy = B.parse_bundle(bundle.to_bytes())
        copy.manifest["format_version"] = version
        del copy.manifest["model"]
        copy.seal()
        return B.parse_bundle(copy.to_bytes())

    async def once(agent: Any) -> None:
        await agent.run("what is 6 * 7")

    plain = older(await record(config, once), 1)
    assert all("purpose" not in c for c in plain.records(B.MODEL_CALLS))
    report = await replay_bundle(plain)
    assert report.identical, report.divergence

    summarised = older(await record(config, _ask_twice, host=host_with(Summariser())), 2)
    report = await replay_bundle(summarised, host=host_with(Summariser()))
    assert report.identical, report.divergence


async def test_the_provider_names_a_side_call_the_recording_never_made() -> None:
    """Behind the comparison (which catches it first), the replay's provider itself
    answers no side call the bundle does not hold, and says which."""
    from koboi.errors import KoboiError
    from koboi.messages import Message, ModelRequest
    from koboi.models import request_key
    from koboi.sidecalls import purpose_of_call
    from koboi_replay.recording import RecordedRun, index_model_calls
    from koboi_replay.served import Cursor, ReplayProvider

    identity = {"provider": "scripted", "model": "m"}
    asked = ModelRequest(messages=[Message.user("Summarise it")])
    answer = {"message": {"role": "assistant", "content": "short"}}
    calls = index_model_calls(
        [
            {
                "run": 1,
                "purpose": "summary",
                "call": 1,
                "step": 0,
                "key": request_key(identity, asked),
                "reports": [],
                "outcome": "finished",
                "response": answer,
            }
        ]
    )
    cursor = Cursor()
    cursor.start(RecordedRun(1, "run_started", 1))
    provider = ReplayProvider(calls, cursor, identity=identity)
    assert provider.cache_identity() == identity
    with purpose_of_call("summary"):
        assert (await provider.complete(asked)).message.content == "short"
    with purpose_of_call("summary"), pytest.raises(KoboiError, match="never made"):
        await provider.complete(asked)  # the recording made one, it was served
    cursor.start(RecordedRun(1, "run_started", 1))
    other = ModelRequest(messages=[Message.user("Summarise something else")])
    with purpose_of_call("summary"), pytest.raises(KoboiError, match="something other than"):
        await provider.complete(other)
    with purpose_of_call("plan"), pytest.raises(KoboiError, match=r"'plan'.*never made"):
        await provider.complete(asked)


@tool(risk=Risk.SAFE, idempotent=True)
async def brief(topic: str, ctx: ToolContext) -> str:
    """Summarise a topic with the run's model.

    Args:
        topic: What to summarise.
    """
    return await ctx.model.ask(f"Summarise {topic}", purpose="summary")


async def test_a_tool_that_asks_a_side_call_replays_with_live_tools(write_config: Write) -> None:
    """A side call made by a tool itself happens only when the tool runs: under --tools
    live the replay is identical; under --tools recorded (the tool does not run) the
    divergence is that side call, and says to replay with --tools live."""
    config = write_config(
        SIDE_CALL_CONFIG.replace("name: summarised", "name: briefed").replace(
            "- match: '(?P<expr>",
            "- match: '^brief (?P<topic>.+)'\n          tool: brief\n"
            '          arguments: {topic: "{topic}"}\n          reply: "{result}"\n'
            "        - match: '(?P<expr>",
        )
    )

    async def drive(agent: Any) -> None:
        result = await agent.run("brief the moon")
        assert result.output == "summary of the moon", result

    bundle = await record(config, drive, extra_tools=[brief])
    assert "side_call_started" in types_of(bundle)
    report = await replay_bundle(bundle, extra_tools=[brief], tools="live")
    assert report.identical, report.divergence
    report = await replay_bundle(bundle, extra_tools=[brief])
    divergence = report.divergence
    assert divergence is not None and divergence.index == seq_of(bundle, "side_call_started")
    assert "replay with --tools live" in divergence.reason


# -- plugin events ------------------------------------------------------------------------


GHOST = {
    "note": "kept as written",
    # Fields a kernel event has, with values no kernel event would: never read as one.
    "step": "not a number",
    "response": {"message": "not a model message"},
    "nested": {"list": [1, 1.0, True, None]},
}


async def test_an_event_of_a_plugin_not_installed_survives_untouched(
    write_config: Write,
) -> None:
    """A session a plugin wrote events into (plugin ``ghost``, not installed here): capture
    carries them byte for byte, the replay compares them like any event and says why it
    diverges, and what it prints shows the event as it is."""
    from koboi_replay.run_source import render

    config = write_config(SIDE_CALL_CONFIG)

    class Ghost(Interceptor):
        name = "ghost"

        async def on_run_start(self, run: RunInfo) -> Refusal | None:
            run.record("ghost.seen", GHOST)
            return None

    ghost_host = host_with(Ghost(), plugin="ghost")

    async def drive(agent: Any) -> None:
        await agent.run("what is 6 * 7")

    from koboi.agent import KoboiAgent

    agent = KoboiAgent.from_config(config, host=ghost_host, approver=AllowAllApprover())
    async with agent:
        await drive(agent)
        stored = await agent.store.read((await agent.store.resolve_session("last")).id)
        # Captured where the plugin is not installed.
        captured = await capture_session(agent.store, "last", config_path=config, host=host_with())
    bundle = B.parse_bundle(captured.bundle.to_bytes())
    line = next(r for r in bundle.records(B.EVENTS) if r["type"] == "ghost.seen")
    original = next(e for e in stored if e.type == "ghost.seen")
    assert line["data"] == GHOST == original.data
    assert json.dumps(line["data"], sort_keys=True) == json.dumps(GHOST, sort_keys=True)

    # Where the plugin is installed, the replay writes it again: identical.
    report = await replay_bundle(bundle, host=ghost_host)
    assert report.identical, report.divergence

    # Where it is not, nothing writes it: the divergence is that event, and says why.
    report = await replay_bundle(bundle, host=host_with())
    divergence = report.divergence
    assert divergence is not None and divergence.index == original.seq
    assert divergence.expected is not None and divergence.expected["data"] == GHOST
    assert "plugin 'ghost', which is not installed" in divergence.reason
    printed = render(report)
    assert "(ghost.seen)" in printed and '"not a model message"' in printed
    assert '"step":"not a number"' in printed


async def test_an_unknown_event_in_a_stored_journal_is_captured_as_it_is(
    write_config: Write,
) -> None:
    """A journal written elsewhere (another plugin set, a newer kernel): capture keeps
    every event it cannot read — plugin or not — in place and unchanged."""
    config = write_config(SIDE_CALL_CONFIG)
    host = host_with()
    from koboi.agent import KoboiAgent

    agent = KoboiAgent.from_config(config, host=host, approver=AllowAllApprover())
    async with agent:
        session = (await agent.run("what is 6 * 7")).session_id
        events = await agent.store.read(session)
    store = InMemoryStore()
    await store.create_session(session)
    foreign = [NewEvent("ghost.seen", GHOST), NewEvent("ghost.seen", {"again": [GHOST]})]
    await store.append(session, [NewEvent(e.type, e.data) for e in events[:1]])
    await store.append(session, foreign)
    await store.append(session, [NewEvent(e.type, e.data) for e in events[1:]])
    captured = await capture_session(store, session, config_path=config, host=host)
    lines = B.parse_bundle(captured.bundle.to_bytes()).records(B.EVENTS)
    assert [(r["seq"], r["type"]) for r in lines[:4]] == [
        (1, "run_started"),
        (2, "ghost.seen"),
        (3, "ghost.seen"),
        (4, events[1].type),
    ]
    assert lines[1]["data"] == GHOST and lines[2]["data"] == {"again": [GHOST]}
    assert len(lines) == len(events) + 2


# -- direct tool calls ----------------------------------------------------------------------


async def test_a_direct_tool_call_run_replays_identically(write_config: Write) -> None:
    config = write_config(SIDE_CALL_CONFIG)

    async def drive(agent: Any) -> None:
        result = await agent.run("what is 6 * 7")
        called = await agent.call_tool(
            "calculator",
            {"expression": "2 + 3"},
            session_id=result.session_id,
            call_id="direct_given",
        )
        assert called.ok and called.content == "5"
        generated = await agent.call_tool(
            "calculator", {"expression": "1 + 1"}, session_id=result.session_id
        )
        assert generated.call_id.startswith("direct_")

    bundle = await record(config, drive)
    direct = [e for e in bundle.events() if e.type == "run_started" and e.data.get("kind")]
    assert [e.data["kind"] for e in direct] == ["tool_call", "tool_call"]
    assert direct[0].data["call"]["id"] == "direct_given"
    report = await replay_bundle(bundle)
    assert report.identical, report.divergence
    assert report.runs == 3

    # Positive control: the direct call really goes through the replayed tool pipeline.
    results = bundle.records(B.TOOL_RESULTS)
    changed = next(r for r in results if r["call_id"] == "direct_given")
    changed["content"] = "6"
    report = await replay_bundle(reseal(bundle, B.TOOL_RESULTS, results))
    divergence = report.divergence
    assert divergence is not None and divergence.path == "data.content"
    assert divergence.values() == ("5", "6")


# -- suspended runs ---------------------------------------------------------------------------


@tool(risk=Risk.SAFE)
async def greet(ctx: ToolContext) -> str:
    """Greet someone by name, asking for the name first."""
    if ctx.reply is None:
        ctx.suspend("need a name", kind="input", data={"field": "name"})
    return f"Hello, {ctx.reply}!"


async def _suspend_then_continue(agent: Any) -> None:
    first = await agent.run("greet someone")
    assert first.outcome == "suspended"
    again = await agent.resume_run(
        first.session_id,
        reply="Ada",
        trace=TraceContext.parse(TRACEPARENT, "koboi=resumed"),
    )
    assert again.outcome == "completed" and again.output == "Greeted."


async def test_a_suspended_run_continued_with_a_reply_replays_identically(
    write_config: Write,
) -> None:
    config = write_config(GREETING_CONFIG)
    bundle = await record(config, _suspend_then_continue, extra_tools=[greet])
    events = bundle.events()
    finished = [e for e in events if e.type == "run_finished"]
    assert [e.data["outcome"] for e in finished] == ["suspended", "completed"]
    resumed = next(e for e in events if e.type == "run_resumed")
    assert resumed.data["reply"] == "Ada"
    assert resumed.data["trace"] == {"traceparent": TRACEPARENT, "tracestate": "koboi=resumed"}
    results = bundle.records(B.TOOL_RESULTS)
    assert [(r["run"], r["outcome"]) for r in results] == [(1, "suspended"), (2, "finished")]
    assert results[0]["reason"] == "need a name" and results[0]["data"] == {"field": "name"}

    report = await replay_bundle(bundle, extra_tools=[greet])
    assert report.identical, report.divergence
    assert report.runs == 2
    # Live, the tool really runs: it suspends, then greets with the recorded reply.
    report = await replay_bundle(bundle, extra_tools=[greet], tools="live")
    assert report.identical, report.divergence

    # Positive controls. The recorded suspension is what the replayed tool suspends with:
    results[0]["reason"] = "need a surname"
    report = await replay_bundle(reseal(bundle, B.TOOL_RESULTS, results), extra_tools=[greet])
    divergence = report.divergence
    # (Caught where the suspension is first journaled: the call's tool_call_suspended.)
    assert divergence is not None and divergence.path == "data.reason"
    assert divergence.expected is not None and divergence.expected["type"] == "tool_call_suspended"
    # and the recorded reply is what the continued call is given (live, the tool reads it).
    lines = bundle.records(B.EVENTS)
    next(r for r in lines if r["type"] == "run_resumed")["data"]["reply"] = "Bob"
    report = await replay_bundle(reseal(bundle, B.EVENTS, lines), extra_tools=[greet], tools="live")
    divergence = report.divergence
    assert divergence is not None and divergence.expected is not None
    assert divergence.expected["type"] == "tool_call_finished"
    assert divergence.values() == ("Hello, Ada!", "Hello, Bob!")


async def test_a_suspended_run_continued_by_the_next_message_replays_identically(
    write_config: Write,
) -> None:
    """``agent.stream(message)`` on a suspended session continues it with the message as
    the reply: the same ``run_resumed`` as ``agent.resume(reply=...)``."""
    config = write_config(GREETING_CONFIG)

    async def drive(agent: Any) -> None:
        first = await agent.run("greet someone")
        assert first.outcome == "suspended"
        again = await agent.run("Grace", session_id=first.session_id)
        assert again.outcome == "completed"

    bundle = await record(config, drive, extra_tools=[greet])
    resumed = next(e for e in bundle.events() if e.type == "run_resumed")
    assert resumed.data["reply"] == "Grace" and "trace" not in resumed.data
    report = await replay_bundle(bundle, extra_tools=[greet])
    assert report.identical, report.divergence


@tool(risk=Risk.SAFE)
async def introduce(who: str, ctx: ToolContext) -> str:
    """Introduce someone, asking for their name first.

    Args:
        who: Whom to introduce.
    """
    if ctx.reply is None:
        ctx.suspend(f"need the name of the {who}")
    return f"This is {ctx.reply}, the {who}."


async def test_parallel_calls_that_each_suspend_the_run_replay_identically(
    write_config: Write,
) -> None:
    """The run's suspension names the first call's reason; each other call's comes from the
    audit trail, so every call suspends again with its own."""
    config = write_config(
        """
        agent: {name: introducer, mode: act, parallel_tool_calls: true}
        llm:
          provider: scripted
          on_exhausted: error
          script:
            - tool_calls:
                - {name: introduce, arguments: {who: host}}
                - {name: introduce, arguments: {who: guest}}
            - reply: "Introduced."
        store: {url: "memory://"}
        """
    )

    async def drive(agent: Any) -> None:
        first = await agent.run("introduce them")
        assert first.outcome == "suspended"
        assert (await agent.resume_run(first.session_id, reply="Kim")).outcome == "completed"

    bundle = await record(config, drive, extra_tools=[introduce])
    suspended = [r for r in bundle.records(B.TOOL_RESULTS) if r["outcome"] == "suspended"]
    assert sorted(r["reason"] for r in suspended) == [
        "need the name of the guest",
        "need the name of the host",
    ]
    report = await replay_bundle(bundle, extra_tools=[introduce])
    assert report.identical, report.divergence
    # Control: the second call's own reason is what its tool_call_suspended is compared with.
    results = bundle.records(B.TOOL_RESULTS)
    second = next(r for r in results if r["reason"] == "need the name of the guest")
    second["reason"] = "need the name of someone"
    report = await replay_bundle(reseal(bundle, B.TOOL_RESULTS, results), extra_tools=[introduce])
    divergence = report.divergence
    assert divergence is not None and divergence.stream == "events"
    assert divergence.path == "data.reason" and divergence.expected is not None
    assert divergence.expected["type"] == "tool_call_suspended"


# -- trace context ----------------------------------------------------------------------------


async def test_trace_ids_are_replayed_exactly(write_config: Write) -> None:
    config = write_config(SIDE_CALL_CONFIG)

    async def drive(agent: Any) -> None:
        given = TraceContext.parse(TRACEPARENT, "vendor=1,koboi=2")
        first = await agent.run("what is 6 * 7", trace=given)
        await agent.run("and 2 + 2", session_id=first.session_id)  # a new random trace

    bundle = await record(config, drive)
    traces = [e.data["trace"] for e in bundle.events() if e.type == "run_started"]
    assert traces[0] == {"traceparent": TRACEPARENT, "tracestate": "vendor=1,koboi=2"}
    assert traces[1]["traceparent"] != TRACEPARENT and "tracestate" not in traces[1]
    report = await replay_bundle(bundle)
    assert report.identical, report.divergence

    # The trace is compared exactly, not normalised like an id: the replay journals the
    # recorded one (here edited into another valid trace, replayed as edited)...
    lines = bundle.records(B.EVENTS)
    started = [r for r in lines if r["type"] == "run_started"]
    started[1]["data"]["trace"] = {"traceparent": f"00-{'1' * 32}-{'2' * 16}-00"}
    assert (await replay_bundle(reseal(bundle, B.EVENTS, lines))).identical
    # ...and one it cannot give (not a valid traceparent) is a divergence at that field.
    started[1]["data"]["trace"] = {"traceparent": "garbage"}
    report = await replay_bundle(reseal(bundle, B.EVENTS, lines))
    divergence = report.divergence
    assert divergence is not None and divergence.path == "data.trace.traceparent"
    assert divergence.index == started[1]["seq"]
