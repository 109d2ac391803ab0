"""Run-level seams: on_run_start, before_finish, argument rewrites, context, plugin events,
side model calls, journaled request rewrites, the trace context, and no failure vanishing."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import TypeAdapter

from koboi import (
    AllowAllApprover,
    FinishDecision,
    Interceptor,
    KoboiAgent,
    PendingToolCall,
    PluginEvent,
    Refusal,
    RunInfo,
    ToolContext,
    TraceContext,
    Verdict,
    hookimpl,
    tool,
)
from koboi import journal as J
from koboi.approval import ApprovalDecision, ApprovalRequest
from koboi.errors import BudgetExceeded, KoboiError
from koboi.messages import Message, ModelRequest, ModelResponse, Usage
from koboi.plugins import PluginHost
from koboi.provider import ModelProvider
from koboi.sidecalls import call_purpose
from koboi.store import InMemoryStore, JournalEvent
from koboi.tracing import current_trace
from koboi_testing.models import InOrderModel

pytestmark = pytest.mark.anyio


@tool(risk="safe", idempotent=True, thread=False)
def echo(text: str) -> str:
    """Repeat the text."""
    return text


def make(
    turns: Sequence[Any],
    *interceptors: Interceptor,
    store: InMemoryStore | None = None,
    tools: Sequence[Any] = (echo,),
    model: ModelProvider | None = None,
    **agent: Any,
) -> KoboiAgent:
    return KoboiAgent.from_dict(
        {"llm": {"provider": "scripted"}, "agent": {"stream": False, **agent}},
        provider=model or InOrderModel(list(turns)),
        store=store or InMemoryStore(),
        extra_tools=list(tools),
        interceptors=list(interceptors),
    )


async def journal(agent: KoboiAgent, session_id: str) -> list[JournalEvent]:
    return await agent.store.read(session_id)


# -- on_run_start ----------------------------------------------------------------------


class Gate(Interceptor):
    name = "gate"

    async def on_run_start(self, run: RunInfo) -> Refusal | None:
        if "forbidden" in run.input:
            return Refusal("no forbidden words")
        run.add_context("background: the user likes short answers", scope="session")
        run.add_context("for this call only", scope="call")
        return None


async def test_on_run_start_refuses_before_any_model_call() -> None:
    model = InOrderModel(["never"])
    agent = make([], Gate(), model=model)
    async with agent:
        result = await agent.run("a forbidden question")
        events = await journal(agent, result.session_id)
    assert result.outcome == "refused" and result.refused_by == "gate"
    assert result.error == "no forbidden words"
    assert not model.requests
    assert [e.type for e in events] == ["run_started", "run_finished"]


async def test_context_for_one_call_and_for_the_session() -> None:
    model = InOrderModel(["first", "second"])
    agent = make([], Gate(), model=model)
    async with agent:
        first = await agent.run("hello")
        await agent.run("again", session_id=first.session_id)
        events = await journal(agent, first.session_id)
    sent = [[(m.role, m.content) for m in r.messages] for r in model.requests]
    assert ("system", "for this call only") in sent[0]
    assert sent[0].count(("system", "background: the user likes short answers")) == 1
    # The session context stays (journaled, folded back); the call context does not.
    assert ("system", "background: the user likes short answers") in sent[1]
    assert sent[1].count(("system", "for this call only")) == 1  # only this run's own
    started = [e for e in events if e.type == J.MODEL_CALL_STARTED]
    assert started[0].data["rewritten_by"] == ["context"]
    assert [e.data["source"] for e in events if e.type == J.CONTEXT_ADDED] == ["gate", "gate"]
    folded = J.fold_messages(events)
    assert [m.content for m in folded if m.role == "system"].count(
        "background: the user likes short answers"
    ) == 2


class Budgeter(Interceptor):
    """Sees what the kernel will append to the call, and the window it must fit."""

    name = "budgeter"
    priority = 900

    def __init__(self) -> None:
        self.seen: list[tuple[tuple[str, ...], int | None]] = []

    async def before_model_call(self, request: ModelRequest, run: RunInfo) -> ModelRequest | None:
        self.seen.append((run.call_context, run.model.context_window))
        return None


class Adder(Interceptor):
    name = "adder"
    priority = 10

    async def before_model_call(self, request: ModelRequest, run: RunInfo) -> ModelRequest | None:
        run.add_context(f"recalled for step {run.step}", scope="call")
        return None


async def test_an_interceptor_sees_the_call_context_still_to_come_and_the_window() -> None:
    budgeter = Budgeter()
    model = InOrderModel([{"name": "echo", "arguments": {"text": "x"}}, "done"])
    agent = KoboiAgent.from_dict(
        {"llm": {"provider": "scripted", "context_window": 4096}, "agent": {"stream": False}},
        provider=model,
        store=InMemoryStore(),
        extra_tools=[echo],
        interceptors=[Gate(), Adder(), budgeter],
    )
    async with agent:
        await agent.run("hello")
    # Gate's on_run_start context reaches the first call only; Adder's, every call.
    assert budgeter.seen == [
        (("for this call only", "recalled for step 1"), 4096),
        (("recalled for step 2",), 4096),
    ]
    # What the budgeter saw is what was appended, after the interceptors' request.
    assert [m.content for m in model.requests[0].messages[-2:]] == [
        "for this call only",
        "recalled for step 1",
    ]
    assert RunInfo("s", 0, agent.config).call_context == ()


# -- before_finish -------------------------------------------------------------------------


class Editor(Interceptor):
    name = "editor"

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.asked = 0

    async def before_finish(self, answer: str, run: RunInfo) -> FinishDecision | None:
        self.asked += 1
        if self.mode == "replace":
            return FinishDecision.replace(answer.upper())
        return FinishDecision.continue_with("check again")


async def test_before_finish_replaces_the_answer_in_the_journal_and_the_conversation() -> None:
    agent = make(["quiet answer"], Editor("replace"))
    async with agent:
        result = await agent.run("go")
        events = await journal(agent, result.session_id)
    assert result.output == "QUIET ANSWER"
    replaced = [e for e in events if e.type == J.ANSWER_REPLACED]
    assert replaced and replaced[0].data["by"] == "editor"
    assert J.fold_messages(events)[-1].content == "QUIET ANSWER"


async def test_before_finish_continues_at_most_max_continuations_times() -> None:
    editor = Editor("continue")
    agent = make(["a1", "a2", "a3"], editor, max_continuations=2)
    async with agent:
        result = await agent.run("go")
        events = await journal(agent, result.session_id)
        audit = await agent.store.read_audit(result.session_id)
    assert result.outcome == "completed" and result.output == "a3"
    assert [e.data["message"] for e in events if e.type == J.RUN_CONTINUED] == [
        "check again",
        "check again",
    ]
    assert editor.asked == 3
    assert any(a.data.get("action") == "continuation_refused" for a in audit)
    assert [m.content for m in J.fold_messages(events) if m.role == "user"] == [
        "go",
        "check again",
        "check again",
    ]


class DiesAtTheSecondContinuation(InMemoryStore):
    """The process "dies" when it would commit the run's second ``run_continued``: the first
    one is in the journal, the second never reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.continued = 0

    async def append(self, session_id: str, events: Any, **kwargs: Any) -> Any:
        self.continued += sum(e.type == J.RUN_CONTINUED for e in events)
        if self.continued >= 2:
            raise OSError("killed")
        return await super().append(session_id, events, **kwargs)


async def test_the_continuation_bound_holds_across_a_crash_and_a_resume() -> None:
    dying = DiesAtTheSecondContinuation()
    agent = make([], Editor("continue"), model=InOrderModel(["a1", "a2"]), store=dying, **BOUND)
    async with agent:
        with pytest.raises(OSError, match="killed"):
            await agent.run("go", session_id="s1")
    store = InMemoryStore()
    await store.create_session("s1")
    await store.append("s1", [J_new(e) for e in await dying.read("s1")])
    state = J.fold_state(await store.read("s1"))
    assert state.interrupted and state.continuations == 1
    # The model was asked again after the first continuation; its answer (a2) is lost with
    # the commit that died. On resume the model answers a2 again, and the editor asks to
    # continue once more: the second and last continuation the bound allows.
    editor = Editor("continue")
    resumed = make([], editor, model=InOrderModel(["a2", "a3", "a4"]), store=store, **BOUND)
    async with resumed:
        result = await resumed.resume_run("s1")
        events = await store.read("s1")
        audit = await store.read_audit("s1")
    assert result.outcome == "completed" and result.output == "a3"
    continued = [e for e in events if e.type == J.RUN_CONTINUED]
    assert len(continued) == 2  # not 1 + max_continuations: the count survived the crash
    assert editor.asked == 2  # a2 (continued), a3 (refused: the bound is reached)
    assert [a.data["action"] for a in audit if a.data.get("action")] == ["continuation_refused"]


async def test_a_runners_messages_do_not_use_up_the_continuations() -> None:
    """Positive control of the count: a runner's own messages (``add_message``) are not
    ``before_finish`` continuations."""
    from koboi.runners import RunHandle, Runner

    class Thrice(Runner):
        name = "thrice"

        async def run(self, run: RunHandle) -> Any:
            for n in range(3):
                if n:
                    run.add_message(f"round {n}")
                async for event in run.loop():
                    yield event
            assert run.ending is not None
            run.finish(run.ending.output)

    agent = KoboiAgent.from_dict(
        {"llm": {"provider": "scripted"}, "agent": {"stream": False, **BOUND}},
        provider=InOrderModel(["r0", "r1", "r2", "r3"]),
        store=InMemoryStore(),
        interceptors=[OnceEditor()],
        runner=Thrice(),
    )
    async with agent:
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    continued = [
        (e.data["by"], e.data.get("runner", False)) for e in events if e.type == J.RUN_CONTINUED
    ]
    assert continued == [("once", False), ("thrice", True), ("thrice", True)]
    assert J.fold_state(events).continuations == 1
    assert result.output == "r3"


BOUND = {"max_continuations": 2}


class OnceEditor(Interceptor):
    """Continues the first answer of a run, accepts the others."""

    name = "once"

    async def before_finish(self, answer: str, run: RunInfo) -> FinishDecision | None:
        if run.state.get("once.done"):
            return None
        run.state["once.done"] = True
        return FinishDecision.continue_with("once more")


# -- argument rewrites -----------------------------------------------------------------------


class Rewriter(Interceptor):
    name = "rewriter"

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments

    async def before_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
        return Verdict("allow", "normalised", arguments=self.arguments)


async def test_a_rewritten_call_runs_with_the_new_arguments_journaled() -> None:
    agent = make(
        [{"name": "echo", "arguments": {"text": "raw"}}, "ok"], Rewriter({"text": "clean"})
    )
    async with agent:
        result = await agent.run("go")
        events = await journal(agent, result.session_id)
    started = next(e for e in events if e.type == J.TOOL_CALL_STARTED)
    finished = next(e for e in events if e.type == J.TOOL_CALL_FINISHED)
    assert started.data["arguments"] == {"text": "clean"}
    assert started.data["rewritten_by"] == ["rewriter"]
    assert "original_arguments_hash" in started.data
    assert finished.data["content"] == "clean"


async def test_a_rewrite_that_does_not_validate_refuses_the_call() -> None:
    agent = make([{"name": "echo", "arguments": {"text": "raw"}}, "ok"], Rewriter({"txt": 1}))
    async with agent:
        result = await agent.run("go")
        events = await journal(agent, result.session_id)
    refused = next(e for e in events if e.type == J.TOOL_CALL_REFUSED)
    assert refused.data["stage"] == "rewriter"
    assert "invalid" in refused.data["reason"] and "txt" in refused.data["reason"]
    assert not any(e.type == J.TOOL_CALL_STARTED for e in events)


# -- plugin events ------------------------------------------------------------------------------


class Counter(Interceptor):
    """Counts runs per session in plugin events and rebuilds the count on each run."""

    name = "counter"
    event_namespace = "counter"

    def __init__(self) -> None:
        self.restored: list[int] = []

    async def restore(self, events: Sequence[JournalEvent], run: RunInfo) -> None:
        run.state["runs"] = int(events[-1].data["runs"])
        self.restored.append(run.state["runs"])

    async def on_run_start(self, run: RunInfo) -> Refusal | None:
        count = int(run.state.get("runs", 0)) + 1
        run.state["runs"] = count
        run.record("counter.run", {"runs": count})
        return None


async def test_plugin_events_are_journaled_streamed_and_handed_back() -> None:
    counter = Counter()
    agent = make(["one", "two"], counter)
    async with agent:
        first = await agent.run("a")
        streamed = [e async for e in agent.stream("b", session_id=first.session_id)]
        events = await journal(agent, first.session_id)
    recorded = [e for e in events if e.type == "counter.run"]
    assert [e.data["runs"] for e in recorded] == [1, 2]
    assert counter.restored == [1]  # the second run was handed the first one's event
    plugin = [e for e in streamed if isinstance(e, PluginEvent)]
    assert [(p.type, p.event_id) for p in plugin] == [("counter.run", recorded[1].seq)]
    # Committed with the run's next batch: before the model call it precedes.
    assert recorded[1].seq < next(
        e.seq for e in events if e.type == J.MODEL_CALL_STARTED and e.seq > recorded[1].seq
    )


async def test_a_plugin_event_recorded_in_before_finish_is_streamed_before_the_final_event() -> (
    None
):
    class Stamp(Interceptor):
        name = "stamp"

        async def before_finish(self, answer: str, run: RunInfo) -> FinishDecision | None:
            run.record("stamp.answered", {"answer": answer})
            return None

    agent = make(["done"], Stamp())
    async with agent:
        streamed = [e async for e in agent.stream("go")]
        final = streamed[-1]
        events = await journal(agent, final.result.session_id)  # type: ignore[attr-defined]
    (recorded,) = [e for e in events if e.type == "stamp.answered"]
    plugin = [e for e in streamed if isinstance(e, PluginEvent)]
    assert [(p.type, p.data, p.event_id) for p in plugin] == [
        ("stamp.answered", {"answer": "done"}, recorded.seq)
    ]
    assert streamed.index(plugin[0]) == len(streamed) - 2  # then the final event


async def test_a_plugin_event_type_must_be_namespaced() -> None:
    class Bad(Interceptor):
        async def on_run_start(self, run: RunInfo) -> Refusal | None:
            run.record("run_finished", {})
            return None

    agent = make(["x"], Bad())
    async with agent:
        result = await agent.run("go")
    assert result.outcome == "failed" and "'<plugin id>.<name>'" in (result.error or "")


async def test_a_plugin_may_write_only_its_own_namespace() -> None:
    class Squatter(Interceptor):
        name = "squatter"
        plugin = "notes"  # as the kernel tags it when plugin "notes" registers it

        async def on_run_start(self, run: RunInfo) -> Refusal | None:
            run.record("notes.kept", {"n": 1})  # its own: fine
            run.record("weather.forecast", {"city": "Oslo"})  # another plugin's
            return None

    agent = make(["x"], Squatter())
    async with agent:
        result = await agent.run("go")
        events = await journal(agent, result.session_id)
    assert result.outcome == "failed"
    assert "'squatter' may journal and stream only its own plugin's events" in (result.error or "")
    assert "'notes.<name>'" in (result.error or "")
    assert [e.type for e in events if "." in e.type] == ["notes.kept"]


async def test_a_plugins_tool_writes_only_its_own_namespace() -> None:
    @tool(risk="safe", idempotent=True, thread=False)
    def forecast(ctx: ToolContext) -> str:
        """Record a forecast."""
        ctx.record("weather.forecast", {"city": "Oslo"})
        try:
            ctx.record("notes.kept", {"n": 1})
        except KoboiError as exc:
            return f"refused: {exc}"
        return "recorded both"

    class Weather:
        @hookimpl
        def koboi_register_providers(self, register: Any) -> None:
            register("scripted", lambda options: InOrderModel([]))

        @hookimpl
        def koboi_register_tools(self, register: Any) -> None:
            register(forecast)

    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(Weather(), "weather")
    agent = KoboiAgent.from_dict(
        {"llm": {"provider": "scripted"}, "tools": {"builtin": ["forecast"]}},
        host=host,
        provider=InOrderModel([{"name": "forecast", "arguments": {}}, "done"]),
        store=InMemoryStore(),
    )
    async with agent:
        result = await agent.run("go")
        events = await journal(agent, result.session_id)
    finished = next(e for e in events if e.type == J.TOOL_CALL_FINISHED)
    assert "refused: 'forecast' may journal and stream only" in finished.data["content"]
    assert [e.type for e in events if "." in e.type] == ["weather.forecast"]


async def test_context_from_a_tool_or_after_tool_call_names_its_own_source() -> None:
    class Speaker(Interceptor):
        name = "speaker"

        async def on_run_start(self, run: RunInfo) -> Refusal | None:
            run.add_context("from on_run_start", scope="session")
            return None

        async def after_tool_call(self, call: PendingToolCall, result: Any, run: RunInfo) -> Any:
            run.add_context("after the tool", scope="session")
            return None

    class Late(Interceptor):
        name = "late"
        priority = 200

        async def after_tool_call(self, call: PendingToolCall, result: Any, run: RunInfo) -> Any:
            run.add_context("late after the tool", scope="session")
            return None

    @tool(risk="safe", idempotent=True, thread=False)
    def noted(ctx: ToolContext) -> str:
        """Add context from inside a tool."""
        assert ctx.run is not None
        ctx.run.add_context("from the tool", scope="session")
        return "ok"

    agent = make([{"name": "noted", "arguments": {}}, "done"], Speaker(), Late(), tools=[noted])
    async with agent:
        result = await agent.run("go")
        events = await journal(agent, result.session_id)
    sources = {e.data["text"]: e.data["source"] for e in events if e.type == J.CONTEXT_ADDED}
    assert sources == {
        "from on_run_start": "speaker",
        "from the tool": "noted",  # not the interceptor that spoke last
        "after the tool": "speaker",
        "late after the tool": "late",
    }


async def test_a_before_finish_that_returns_the_wrong_type_says_so() -> None:
    class Wrong(Interceptor):
        name = "wrong"

        async def before_finish(self, answer: str, run: RunInfo) -> Any:
            return "accept"

    agent = make(["fine"], Wrong())
    async with agent:
        result = await agent.run("go")
    assert result.outcome == "failed"
    assert "interceptor 'wrong': before_finish returned 'accept', not a FinishDecision" in (
        result.error or ""
    )


def test_an_unknown_plugin_event_survives_the_fold() -> None:
    def event(seq: int, kind: str, data: dict[str, Any]) -> JournalEvent:
        return JournalEvent("s", seq, kind, data, 0.0)

    events = [
        event(
            1, "run_started", {"input": "hi", "agent": "a", "config_hash": "", "autonomous": False}
        ),
        event(2, "absent-plugin.state", {"cursor": 7}),
        event(3, "model_call_started", {"step": 1}),
        event(
            4,
            "model_call_finished",
            {"step": 1, "response": {"message": {"role": "assistant", "content": "yo"}}},
        ),
        event(
            5,
            "run_finished",
            {
                "outcome": "completed",
                "output": "yo",
                "steps": 1,
                "usage": {},
                "cost_usd": 0.0,
                "error": None,
            },
        ),
    ]
    state = J.fold_state(events)
    assert [e.type for e in state.plugin_events] == ["absent-plugin.state"]
    assert [m.content for m in state.messages] == ["hi", "yo"]


# -- side model calls ------------------------------------------------------------------------------


class Summariser(Interceptor):
    name = "summariser"

    def __init__(self) -> None:
        self.answers: list[str] = []
        self.purposes: list[str | None] = []

    async def on_run_start(self, run: RunInfo) -> Refusal | None:
        answer = await run.model.ask(f"summarise: {run.input}", purpose="summary")
        self.answers.append(answer)
        return None


class PurposeModel(InOrderModel):
    def __init__(self, turns: Sequence[Any]) -> None:
        super().__init__(turns)
        self.purposes: list[str | None] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.purposes.append(call_purpose())
        response = await super().complete(request)
        return response.model_copy(update={"usage": Usage(input_tokens=10, output_tokens=5)})


async def test_a_side_call_is_journaled_counted_and_tagged_with_its_purpose() -> None:
    model = PurposeModel(["a short summary", "the answer"])
    summariser = Summariser()
    agent = make([], summariser, model=model)
    async with agent:
        result = await agent.run("a long text")
        events = await journal(agent, result.session_id)
    assert summariser.answers == ["a short summary"]
    assert model.purposes == ["summary", None]
    types = [e.type for e in events]
    assert types.index(J.SIDE_CALL_STARTED) < types.index(J.SIDE_CALL_FINISHED)
    finished = next(e for e in events if e.type == J.SIDE_CALL_FINISHED)
    assert finished.data["purpose"] == "summary" and finished.data["key"]
    assert result.usage.total_tokens == 30  # the side call counts against the run


async def test_a_side_call_over_budget_is_refused() -> None:
    class Spender(Interceptor):
        async def on_run_start(self, run: RunInfo) -> Refusal | None:
            await run.model.ask("one", purpose="first")
            with pytest.raises(BudgetExceeded):
                await run.model.ask("two", purpose="second")
            return None

    model = PurposeModel(["x", "final"])
    agent = make([], Spender(), model=model, max_total_tokens=10)
    async with agent:
        result = await agent.run("go")
    assert result.outcome == "budget_exceeded"


async def test_a_side_call_answered_before_a_crash_is_served_from_the_journal() -> None:
    class DiesAtTheToolCall(InMemoryStore):
        """The process "dies" when it would commit the tool call's start: everything before
        it (the side call with it) is committed, nothing after."""

        async def append(self, session_id: str, events: Any, **kwargs: Any) -> Any:
            if any(e.type == J.TOOL_CALL_STARTED for e in events):
                raise OSError("disk gone")
            return await super().append(session_id, events, **kwargs)

    dying = DiesAtTheToolCall()
    model = PurposeModel(["the summary", {"name": "echo", "arguments": {"text": "x"}}])
    summariser = Summariser()
    agent = make([], summariser, model=model, store=dying)
    async with agent:
        with pytest.raises(OSError, match="disk gone"):
            await agent.run("text", session_id="s1")
    store = InMemoryStore()
    await store.create_session("s1")
    await store.append("s1", [J_new(e) for e in await dying.read("s1")])
    assert J.fold_state(await store.read("s1")).interrupted
    again = PurposeModel(["final"])
    resumed = make([], summariser, model=again, store=store)
    async with resumed:
        result = await resumed.resume_run("s1")
    assert result.output == "final"
    assert again.purposes == [None]  # the summary was not asked again
    assert summariser.answers == ["the summary", "the summary"]


def J_new(event: JournalEvent) -> Any:
    from koboi.store import NewEvent

    return NewEvent(event.type, event.data)


# -- request rewrites ---------------------------------------------------------------------------


class Trimmer(Interceptor):
    name = "trimmer"

    async def before_model_call(self, request: ModelRequest, run: RunInfo) -> ModelRequest:
        kept = [m for m in request.messages if m.role != "tool"]
        return request.model_copy(update={"messages": [*kept, Message.system("be brief")]})


async def test_a_rewritten_request_is_journaled_so_it_can_be_rebuilt() -> None:
    model = InOrderModel([{"name": "echo", "arguments": {"text": "x"}}, "done"])
    agent = make([], Trimmer(), model=model)
    async with agent:
        result = await agent.run("go")
        events = await journal(agent, result.session_id)
    second = [e for e in events if e.type == J.MODEL_CALL_STARTED][1]
    record = second.data["request"]
    assert second.data["rewritten_by"] == ["trimmer"]
    sent = model.requests[1]
    # Rebuild the sent request from the loop's own conversation and the record.
    base = [Message.user("go"), *J.fold_messages(events)[1:3]]
    rebuilt: list[Message] = []
    for segment in record["messages"]:
        if segment[0] == "keep":
            rebuilt.extend(base[segment[1] : segment[2]])
        else:
            rebuilt.extend(Message.model_validate(m) for m in segment[1])
    assert rebuilt == list(sent.messages)
    from koboi.models import request_key

    assert record["key"] == request_key(model.cache_identity(), sent)


# -- trace context ------------------------------------------------------------------------------


async def test_a_run_joins_the_trace_its_caller_gave() -> None:
    seen: list[TraceContext | None] = []

    @tool(thread=False)
    def look() -> str:
        """Look at the trace."""
        seen.append(current_trace())
        return "ok"

    parent = TraceContext.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    assert parent is not None
    agent = make([{"name": "look", "arguments": {}}, "done"], tools=[look])
    async with agent:
        result = await agent.run("go", trace=parent)
        events = await journal(agent, result.session_id)
        other = await agent.run("again")
        other_events = await journal(agent, other.session_id)
    assert events[0].data["trace"] == {"traceparent": parent.traceparent}
    assert seen[0] == parent
    assert current_trace() is None  # outside a run
    fresh = other_events[0].data["trace"]["traceparent"]
    assert fresh != parent.traceparent and TraceContext.parse(fresh) is not None
    assert TraceContext.parse("00-" + "0" * 32 + "-00f067aa0ba902b7-01") is None


# -- no failure vanishes ----------------------------------------------------------------------------


async def test_an_observer_that_raises_is_logged_with_its_secret_masked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(Interceptor):
        name = "broken"

        async def on_event(self, event: JournalEvent, run: RunInfo) -> None:
            if event.type == J.RUN_FINISHED:
                raise RuntimeError("token=ghp_" + "a1B2" * 9)

    agent = make(["ok"], Broken())
    with caplog.at_level(logging.WARNING, logger="koboi.loop"):
        async with agent:
            result = await agent.run("go")
    assert result.ok
    (record,) = [r for r in caplog.records if "broken" in r.getMessage()]
    assert (
        "ghp_" not in record.getMessage() and "failed observing run_finished" in record.getMessage()
    )


async def test_after_approval_failures_are_logged_and_audited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Forgetful(Interceptor):
        name = "forgetful"

        async def after_approval(
            self,
            pending: PendingToolCall,
            request: ApprovalRequest,
            decision: ApprovalDecision,
            run: RunInfo,
        ) -> None:
            raise RuntimeError("the trust database is gone")

    @tool(risk="moderate", thread=False)
    def change(x: int) -> int:
        """Change something."""
        return x

    agent = KoboiAgent.from_dict(
        {"llm": {"provider": "scripted"}, "agent": {"stream": False}},
        provider=InOrderModel([{"name": "change", "arguments": {"x": 1}}, "done"]),
        store=InMemoryStore(),
        extra_tools=[change],
        interceptors=[Forgetful()],
        approver=AllowAllApprover(),
    )
    with caplog.at_level(logging.WARNING, logger="koboi.toolcall"):
        async with agent:
            result = await agent.run("go")
            audit = await agent.store.read_audit(result.session_id)
    assert result.ok  # the decision stands
    failed = [a.data for a in audit if a.data.get("phase") == "interceptor_failed"]
    assert failed and failed[0]["interceptor"] == "forgetful"
    assert "the trust database is gone" in failed[0]["error"]
    assert any("forgetful" in r.getMessage() for r in caplog.records)


async def test_an_audit_record_added_when_the_run_finishes_is_kept() -> None:
    class Closer(Interceptor):
        async def on_event(self, event: JournalEvent, run: RunInfo) -> None:
            if event.type == J.RUN_FINISHED:
                run.audit({"action": "closing_note", "seq": event.seq})

    agent = make(["ok"], Closer())
    async with agent:
        result = await agent.run("go")
        audit = await agent.store.read_audit(result.session_id)
    assert [a.data["action"] for a in audit][-1:] == ["closing_note"]


# -- typed events -------------------------------------------------------------------------------


async def test_every_journaled_event_fits_its_schema_and_every_key_is_known() -> None:
    class Everything(Interceptor):
        event_namespace = "everything"

        async def on_run_start(self, run: RunInfo) -> Refusal | None:
            await run.model.ask("side", purpose="side")
            run.add_context("ctx", scope="session")
            run.record("everything.seen", {"n": 1})
            return None

        async def before_model_call(self, request: ModelRequest, run: RunInfo) -> ModelRequest:
            # journaled as the request's delta: messages, options, response_format
            return request.model_copy(
                update={
                    "messages": [*request.messages, Message.system("rewritten")],
                    "options": {"temperature": 0},
                    "response_format": {"type": "json_object"},
                }
            )

        async def before_finish(self, answer: str, run: RunInfo) -> FinishDecision | None:
            return FinishDecision.replace(answer + "!")

    @tool(risk="moderate", thread=False)
    def act(x: int) -> int:
        """Act."""
        return x

    class Reporting(InOrderModel):
        """Reports what the kernel's pools, cache and HTTP providers report."""

        async def complete(self, request: ModelRequest) -> ModelResponse:
            from koboi.provider import report

            report("retry", provider="p", model="m", attempt=1, delay_seconds=0.1, reason="503")
            report("failover", pool="main", provider="p", next="q", reason="503")
            report("breaker_open", pool="main", provider="p", failures=3, cooldown_seconds=30)
            report("breaker_closed", pool="main", provider="p")
            report("cache_hit", key="0123456789abcdef")
            return await super().complete(request)

    model = Reporting(
        [
            "side answer",
            {"name": "act", "arguments": {"x": 1}},
            {"name": "nope", "arguments": {}},
            "end",
        ]
    )
    agent = KoboiAgent.from_dict(
        {"llm": {"provider": "scripted"}, "agent": {"stream": False}},
        provider=model,
        store=InMemoryStore(),
        extra_tools=[act],
        interceptors=[Everything()],
        approver=AllowAllApprover(),
    )
    async with agent:
        result = await agent.run("go")
        direct = await agent.call_tool("act", {"x": 2})
        events = [
            *await agent.store.read(result.session_id),
            *await agent.store.read(direct.session_id),
        ]
        audit = await agent.store.read_audit()
    known = J.field_names()

    def keys(value: Any) -> set[str]:
        if isinstance(value, dict):
            # A tool's own argument names are the tool's, a provider's cache identity
            # (run_started.model) and a request's options and response format are the
            # provider's: none is the journal's.
            own = ("arguments", "model", "options", "response_format")
            return set(value) | {k for n, v in value.items() if n not in own for k in keys(v)}
        if isinstance(value, list):
            return {k for v in value for k in keys(v)}
        return set()

    seen_kinds = set()
    for event in events:
        if J.is_plugin_event(event.type):
            continue
        kind = J.KINDS_BY_NAME[event.type]
        seen_kinds.add(event.type)
        TypeAdapter(kind.schema).validate_python(dict(event.data), strict=False)
        extra = set(event.data) - set(kind.schema.__annotations__)
        assert not extra, f"{event.type} has keys outside its schema: {extra}"
        unknown = keys(dict(event.data)) - known
        assert not unknown, f"{event.type}: keys not in journal.field_names(): {unknown}"
    for entry in audit:
        data = dict(entry.data)
        data.pop("arguments", None)
        assert not (set(data) - known), f"audit record keys not known: {set(data) - known}"
    assert {
        J.RUN_STARTED,
        J.SIDE_CALL_FINISHED,
        J.CONTEXT_ADDED,
        J.APPROVAL_DECIDED,
        J.TOOL_CALL_FINISHED,
        J.TOOL_CALL_REFUSED,
        J.ANSWER_REPLACED,
        J.PROVIDER_EVENT,
        J.MODEL_CALL_STARTED,
        J.RUN_FINISHED,
    } <= seen_kinds
    rewritten = [e for e in events if e.type == J.MODEL_CALL_STARTED and "request" in e.data]
    assert rewritten, "a rewritten request is journaled (so its keys were checked above)"


def test_an_event_kind_reads_only_its_own_events() -> None:
    event = JournalEvent("s", 1, "run_started", {"input": "x"}, 0.0)
    assert J.RUN_STARTED.of(event)["input"] == "x"
    with pytest.raises(ValueError, match="not 'run_finished'"):
        J.RUN_FINISHED.of(event)
    assert J.RUN_STARTED == "run_started" and isinstance(J.RUN_STARTED, str)


def test_a_tool_context_outside_a_run_says_what_it_lacks(koboi_tool_context: ToolContext) -> None:
    with pytest.raises(KoboiError, match="need a run"):
        koboi_tool_context.record("x.y", {})


# -- the run's sandbox ---------------------------------------------------------------


class SandboxedChecker(Interceptor):
    """Runs a program through the run's sandbox and adds what it printed as context."""

    name = "checker"

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def on_run_start(self, run: RunInfo) -> Refusal | None:
        assert run.sandbox is not None
        done = await run.sandbox.run_process(
            ["/bin/sh", "-c", "read line; echo checked: $line"],
            env={"PATH": "/usr/bin:/bin"},
            timeout=10,
            input=run.input.encode() + b"\n",
            session_id=run.session_id,
        )
        self.seen.append(done.stdout.strip())
        run.add_context(self.seen[-1], scope="call")
        return None


async def test_an_interceptor_runs_a_process_through_the_runs_sandbox() -> None:
    checker = SandboxedChecker()
    model = InOrderModel(["fine"])
    async with make([], checker, model=model) as agent:
        result = await agent.run("hello there")
        assert checker.seen == ["checked: hello there"]
        assert model.requests[0].messages[-1].content == "checked: hello there"
        assert result.output == "fine"
