"""Child runs: continued after a crash, never wider than their parent, sharing its
budgets, with a model of their own; a runner's own governed tool calls.

A crash is simulated in-process by a store that dies (fails like a lost disk)
when it is asked to commit a chosen event; from then on it refuses every write,
like a killed process, so nothing more reaches the journal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from koboi import (
    AllowAllApprover,
    ChildEvent,
    FinalEvent,
    Interceptor,
    KoboiAgent,
    PendingToolCall,
    RunHandle,
    RunInfo,
    Runner,
    ToolContext,
    Verdict,
    hookimpl,
    tool,
)
from koboi import journal as J
from koboi.errors import KoboiError, SessionNotFound
from koboi.messages import Message, ModelRequest, ModelResponse, Usage
from koboi.plugins import PluginHost
from koboi.provider import ModelProvider
from koboi.store import InMemoryStore, JournalEvent
from koboi.subagents import child_session_id
from koboi_testing.crash import Died, DyingStore

pytestmark = pytest.mark.anyio


class Words(ModelProvider):
    """Answers each request by the text its last user message asks for (``say: X``),
    or calls the tool it names (``call: tool``) first; usage: 10 tokens a call."""

    name = "words"

    def __init__(self, label: str = "") -> None:
        self.label = label
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        last_user = next(m for m in reversed(request.messages) if m.role == "user")
        text = last_user.content
        answered = request.messages[-1].role == "tool"
        if text.startswith("call:") and not answered:
            names = text.split(":", 1)[1].split()
            calls = [{"id": f"t{i}", "name": n, "arguments": {}} for i, n in enumerate(names)]
            message = Message.model_validate({"role": "assistant", "tool_calls": calls})
        else:
            message = Message.assistant(f"{self.label}{text}")
        return ModelResponse(message=message, usage=Usage(input_tokens=5, output_tokens=5))


class WordsPlugin:
    """The provider name configs use; a ``providers`` entry's ``label`` prefixes answers."""

    @hookimpl
    def koboi_register_providers(self, register: Any) -> None:
        register("words", lambda options: Words(str(options.get("label", ""))))


def host() -> PluginHost:
    made = PluginHost(load_entry_points=False, strict=True)
    made.add_plugin(WordsPlugin(), "words")
    return made


effects: list[str] = []


@tool(risk="safe", idempotent=False, thread=False)
def stamp(ctx: ToolContext) -> str:
    """Record an effect that must happen once (not idempotent)."""
    effects.append(ctx.session_id + ":" + ctx.call_id)
    return "stamped"


@tool(risk="safe", idempotent=True, thread=False)
def look(ctx: ToolContext) -> str:
    """Look around (idempotent)."""
    effects.append("look:" + ctx.call_id)
    return "looked"


@tool(risk="moderate", thread=False)
def touch() -> str:
    """A moderate tool: needs approval in act mode."""
    return "touched"


class Nodes(Runner):
    """Runs one child per node, each in the session named after it; skips what it
    recorded as done."""

    name = "nodes"

    def __init__(self, nodes: Sequence[tuple[str, str]], **child: Any) -> None:
        self.nodes = list(nodes)
        self.child = child
        self.results: list[Any] = []

    async def run(self, run: RunHandle) -> AsyncIterator[Any]:
        outputs = []
        for name, message in self.nodes:
            result = await run.child(
                message,
                tag=name,
                session_id=child_session_id(run.session_id, name),
                **self.child.get(name, {}),
            )
            self.results.append(result)
            outputs.append(result.output)
            if result.outcome != "completed":
                run.finish(result.error or "", outcome=result.outcome, error=result.error)
                return
        run.finish(" | ".join(outputs))
        return
        yield  # pragma: no cover - an async generator


def make(
    runner: Runner | None = None,
    *,
    store: InMemoryStore | None = None,
    agent: dict[str, Any] | None = None,
    providers: dict[str, Any] | None = None,
    tools: Sequence[Any] = (stamp, look, touch),
    **kwargs: Any,
) -> KoboiAgent:
    config: dict[str, Any] = {
        "llm": {"provider": "words"},
        "agent": {"stream": False, **(agent or {})},
    }
    if providers:
        config["providers"] = providers
    return KoboiAgent.from_dict(
        config,
        host=host(),
        store=store or InMemoryStore(),
        extra_tools=list(tools),
        runner=runner,
        **kwargs,
    )


async def journal(store: InMemoryStore, session: str) -> list[JournalEvent]:
    return await store.read(session)


# -- continued after a crash ---------------------------------------------------------------


async def test_a_crash_inside_a_child_resumes_that_child_not_a_new_one() -> None:
    effects.clear()
    store = DyingStore()
    first = child_session_id("root", "a")
    # The second stamp of child "a" ran, then the process died before its end was written.
    store.dies_at = lambda sid, e: (
        sid == first and e.type == J.TOOL_CALL_FINISHED and e.data["call_id"] == "t1"
    )
    nodes = [("a", "call: stamp stamp"), ("b", "say: b")]
    async with make(Nodes(nodes), store=store) as agent:
        with pytest.raises(Died):
            await agent.run("go", session_id="root")
    assert effects == [f"{first}:t0", f"{first}:t1"]
    store.restart()
    runner = Nodes(nodes)
    async with make(runner, store=store) as agent:
        result = await agent.resume_run("root")
    assert result.outcome == "completed", result.error
    # Nothing ran twice: t0 finished (answered from the journal), t1 was in doubt and is
    # not idempotent (the model is told its outcome is unknown), b ran once.
    assert effects == [f"{first}:t0", f"{first}:t1"]
    events = await journal(store, first)
    assert [e.type for e in events].count(J.RUN_STARTED) == 1
    assert [e.type for e in events].count(J.RUN_RESUMED) == 1
    interrupted = [e for e in events if e.type == J.TOOL_CALL_INTERRUPTED]
    assert [e.data["call_id"] for e in interrupted] == ["t1"]
    second = child_session_id("root", "b")
    assert (await store.get_session(second)).metadata["parent_session"] == "root"
    assert result.output.endswith("| say: b")


async def test_a_finished_child_answers_from_its_journal_and_its_usage_counts_again() -> None:
    store = DyingStore()
    b = child_session_id("root", "b")
    store.dies_at = lambda sid, e: sid == b and e.type == J.MODEL_CALL_STARTED
    nodes = [("a", "say: a"), ("b", "say: b")]
    async with make(Nodes(nodes), store=store) as agent:
        with pytest.raises(Died):
            await agent.run("go", session_id="root")
    a = child_session_id("root", "a")
    before = len(await journal(store, a))
    store.restart()
    runner = Nodes(nodes)
    async with make(runner, store=store) as agent:
        events = [e async for e in agent.resume("root")]
    assert len(await journal(store, a)) == before  # a did not run again
    finals = [e for e in events if isinstance(e, ChildEvent) and isinstance(e.event, FinalEvent)]
    assert [f.tag for f in finals] == ["a", "b"]
    final = events[-1]
    assert isinstance(final, FinalEvent)
    assert final.result.output == "say: a | say: b"
    # Both children's model calls count in the parent's usage: a's from its journal.
    assert final.result.usage.total_tokens == 20


async def test_a_run_may_only_continue_its_own_children() -> None:
    store = InMemoryStore()
    await store.create_session("stranger")
    nodes = [("a", "say: a")]

    class Hijack(Nodes):
        async def run(self, run: RunHandle) -> AsyncIterator[Any]:
            await run.child("say: x", session_id="stranger")
            run.finish("no")
            return
            yield  # pragma: no cover

    async with make(Hijack(nodes), store=store) as agent:
        result = await agent.run("go")
    assert result.outcome == "failed"
    assert "is not a sub-agent session of session" in (result.error or "")


async def test_a_childs_session_is_never_run_on_its_own() -> None:
    store = DyingStore()
    a = child_session_id("root", "a")
    store.dies_at = lambda sid, e: sid == a and e.type == J.MODEL_CALL_STARTED
    async with make(Nodes([("a", "say: a")]), store=store) as agent:
        with pytest.raises(Died):
            await agent.run("go", session_id="root")
    store.restart()
    async with make(Nodes([("a", "say: a")]), store=store) as agent:
        # The child was updated last, yet "last" is the session a user means: the root.
        assert (await store.resolve_session("last")).id == "root"
        with pytest.raises(KoboiError, match="sub-agent's session, run by session root"):
            await agent.resume_run(a)
        with pytest.raises(KoboiError, match="sub-agent's session"):
            await agent.run("more", session_id=a)
        assert (await agent.resume_run("root")).outcome == "completed"


async def test_last_is_an_error_when_the_store_has_only_children() -> None:
    store = InMemoryStore()
    await store.create_session("c", metadata={"parent_session": "gone"})
    with pytest.raises(SessionNotFound):
        await store.resolve_session("last")


# -- never wider than the parent ---------------------------------------------------------------


class EnforcesModes(Interceptor):
    """Stands in for a mode-enforcing plugin: refuses what is not safe outside act."""

    name = "modes"
    enforces = frozenset({"mode"})

    async def before_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
        mode = run.config.agent.mode
        if mode in ("chat", "plan") and pending.tool.risk.value != "safe":
            return Verdict("deny", f"{mode} mode", stage="mode")
        return None


async def test_a_child_may_not_ask_for_a_wider_mode_than_its_parent() -> None:
    runner = Nodes([("a", "call: touch")], a={"mode": "act"})
    agent = make(runner, agent={"mode": "plan"}, interceptors=[EnforcesModes()])
    async with agent:
        result = await agent.run("go")
    assert result.outcome == "failed"
    assert "may not run in a wider mode than its parent" in (result.error or "")
    assert "'act'" in (result.error or "") and "'plan'" in (result.error or "")


async def test_a_child_in_a_narrower_mode_runs_under_it() -> None:
    # Positive control of the above: the same child narrowed to plan under act runs,
    # and its mode is enforced (touch is refused in plan mode, allowed in the parent's act).
    runner = Nodes([("a", "call: touch")], a={"mode": "plan"})
    agent = make(runner, interceptors=[EnforcesModes()], approver=AllowAllApprover())
    async with agent:
        result = await agent.run("go")
        direct = await agent.call_tool("touch", {}, approver=AllowAllApprover())
    assert result.outcome == "completed", result.error
    child = runner.results[0]
    refused = [m for m in child.messages if m.role == "tool"]
    assert refused and "plan mode" in refused[0].content
    assert direct.outcome == "completed"


async def test_a_narrower_mode_needs_a_plugin_that_enforces_modes() -> None:
    runner = Nodes([("a", "say: a")], a={"mode": "chat"})
    async with make(runner) as agent:
        result = await agent.run("go")
    assert result.outcome == "failed"
    assert "no installed plugin enforces modes" in (result.error or "")


async def test_a_child_gets_only_tools_its_parent_has() -> None:
    runner = Nodes([("a", "say: a")], a={"tools": ["run_shell"]})
    async with make(runner) as agent:
        result = await agent.run("go")
    assert "may only use its parent's tools; not available: run_shell" in (result.error or "")


# -- budgets shared with the parent ----------------------------------------------------------


async def test_a_childs_tokens_count_against_its_parents_budget() -> None:
    # Each model call uses 10 tokens; the parent may use 20: the third child never runs
    # a model call, and the whole tree stops.
    nodes = [("a", "say: a"), ("b", "say: b"), ("c", "say: c")]
    runner = Nodes(nodes)
    async with make(runner, agent={"max_total_tokens": 20}) as agent:
        result = await agent.run("go", session_id="root")
        c = await journal_of(agent, child_session_id("root", "c"))
    assert result.outcome == "budget_exceeded"
    assert [r.outcome for r in runner.results] == ["completed", "completed", "budget_exceeded"]
    assert "run tree of session root used 20 tokens, its limit is 20" in (result.error or "")
    exceeded = [e.data for e in c if e.type == J.BUDGET_EXCEEDED]
    assert exceeded == [
        {"step": 0, "budget": "max_total_tokens", "limit": 20, "used": 20, "of_session": "root"}
    ]
    assert not [e for e in c if e.type == J.MODEL_CALL_STARTED]


async def test_model_calls_of_children_count_against_the_parents_steps() -> None:
    nodes = [("a", "call: look"), ("b", "call: look"), ("c", "say: c")]
    runner = Nodes(nodes)
    async with make(runner, agent={"max_iterations": 3}) as agent:
        result = await agent.run("go", session_id="root")
    # a: 2 model calls, b: its first one is the third of the tree, its second is refused.
    assert [r.outcome for r in runner.results] == ["completed", "budget_exceeded"]
    assert "3 model calls, its limit is 3 (agent.max_iterations)" in (result.error or "")


async def test_without_a_budget_the_parent_reports_the_trees_usage() -> None:
    runner = Nodes([("a", "say: a"), ("b", "call: look")])
    async with make(runner) as agent:
        result = await agent.run("go")
    assert result.outcome == "completed"
    assert result.usage.total_tokens == 30  # 1 + 2 model calls of 10 tokens


async def journal_of(agent: KoboiAgent, session: str) -> list[JournalEvent]:
    return await agent.store.read(session)


# -- a model of its own ------------------------------------------------------------------------


async def test_a_child_calls_the_model_its_providers_entry_names() -> None:
    runner = Nodes([("a", "say: a"), ("b", "say: b")], b={"model": "helper"})
    providers = {"helper": {"provider": "words", "label": "helper says "}}
    async with make(runner, providers=providers) as agent:
        result = await agent.run("go", session_id="root")
        helper = await journal_of(agent, child_session_id("root", "b"))
    assert result.output == "say: a | helper says say: b"
    assert [
        e.data["response"]["message"]["content"] for e in helper if e.type == J.MODEL_CALL_FINISHED
    ] == ["helper says say: b"]


async def test_an_unknown_model_name_is_one_clear_line() -> None:
    runner = Nodes([("a", "say: a")], a={"model": "nope"})
    async with make(runner, providers={"helper": {"provider": "words"}}) as agent:
        result = await agent.run("go")
    assert result.error == (
        "model 'nope' is not an entry of the providers section (entries: helper)"
    )


# -- the tree seen from inside -----------------------------------------------------------------


async def test_a_childs_run_info_names_its_parent_and_it_uses_the_runs_approver() -> None:
    seen: list[tuple[str | None, str]] = []

    @tool(risk="safe", thread=False)
    def where(ctx: ToolContext) -> str:
        """Where am I?"""
        assert ctx.run is not None
        parent = ctx.run.parent.session_id if ctx.run.parent else None
        seen.append((parent, ctx.run.root.session_id))
        return "here"

    @tool(risk="safe", thread=False)
    async def delegate(ctx: ToolContext) -> str:
        """Ask a sub-agent."""
        result = await ctx.run_subagent("call: where touch", tools=["where", "touch"])
        return result.output

    agent = make(tools=[where, delegate, touch])  # the agent's own approver denies
    async with agent:
        called = await agent.call_tool(
            "delegate", {}, session_id="top", approver=AllowAllApprover()
        )
        child = next(
            s for s in await agent_sessions(agent) if s.metadata.get("parent_session") == "top"
        )
        events = await journal_of(agent, child.id)
    assert called.outcome == "completed", called.content
    assert seen == [("top", "top")]
    decided = [e.data for e in events if e.type == J.APPROVAL_DECIDED]
    assert decided and decided[0]["approved"] is True  # the call's approver, not the default


async def agent_sessions(agent: KoboiAgent) -> list[Any]:
    return await agent.store.list_sessions(limit=100)


# -- a runner's own tool calls -----------------------------------------------------------------


class Tools(Runner):
    """Calls stamp twice and look once through the pipeline, by stable call ids."""

    name = "tools"

    async def run(self, run: RunHandle) -> AsyncIterator[Any]:
        shown = []
        for call_id, name in (("s1", "stamp"), ("s2", "stamp"), ("l1", "look")):
            result = await run.call_tool(name, {}, call_id=call_id)
            shown.append(f"{name}:{result.content}:{result.is_error}")
        run.finish(" ".join(shown))
        return
        yield  # pragma: no cover


async def test_a_runners_tool_calls_go_through_the_pipeline_and_are_journaled() -> None:
    effects.clear()

    class NoLook(Interceptor):
        name = "no-look"

        async def before_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
            return Verdict("deny", "not now") if pending.tool.name == "look" else None

    async with make(Tools(), interceptors=[NoLook()]) as agent:
        events = [e async for e in agent.stream("go", session_id="r")]
        journaled = await journal_of(agent, "r")
    final = events[-1]
    assert isinstance(final, FinalEvent)
    assert final.result.output == ("stamp:stamped:False stamp:stamped:False look:not now:True")
    assert effects == ["r:s1", "r:s2"]
    types = [(e.type, e.data.get("call_id")) for e in journaled if "call" in e.type]
    assert (J.TOOL_CALL_REFUSED, "l1") in types and (J.TOOL_CALL_FINISHED, "s2") in types
    # Not part of the conversation: the session's messages are the input and nothing else.
    assert [m.role for m in J.fold_messages(journaled)] == ["user"]


async def test_a_runners_tool_calls_after_a_crash_follow_the_in_doubt_rule() -> None:
    effects.clear()
    store = DyingStore()
    store.dies_at = lambda sid, e: e.type == J.TOOL_CALL_FINISHED and e.data["call_id"] == "s2"
    async with make(Tools(), store=store) as agent:
        with pytest.raises(Died):
            await agent.run("go", session_id="r")
    assert effects == ["r:s1", "r:s2"]
    store.restart()
    async with make(Tools(), store=store) as agent:
        result = await agent.resume_run("r")
    # s1 answered from the journal, s2 in doubt (not idempotent: not run again), l1 ran.
    assert effects == ["r:s1", "r:s2", "look:l1"]
    assert result.output.startswith("stamp:stamped:False stamp:")
    assert "interrupted" in result.output.split(" stamp:")[1] and "look:looked:False" in (
        result.output
    )


async def test_a_call_id_names_one_call() -> None:
    class Twice(Runner):
        name = "twice"

        async def run(self, run: RunHandle) -> AsyncIterator[Any]:
            await run.call_tool("stamp", {}, call_id="x")
            await run.call_tool("look", {}, call_id="x")
            run.finish("no")
            return
            yield  # pragma: no cover

    async with make(Twice()) as agent:
        result = await agent.run("go")
    assert "call id 'x' was already used in this run for another call (stamp)" in (
        result.error or ""
    )


async def test_started_seq_names_the_run_and_survives_a_resume() -> None:
    seen: list[int] = []

    class Note(Runner):
        name = "note"

        async def run(self, run: RunHandle) -> AsyncIterator[Any]:
            seen.append(run.started_seq)
            await run.call_tool("stamp", {}, call_id="same-id")  # each run's own call
            run.finish("ok")
            return
            yield  # pragma: no cover

    effects.clear()
    store = DyingStore()
    async with make(Note(), store=store) as agent:
        await agent.run("one", session_id="r")
        store.dies_at = lambda sid, e: e.type == J.TOOL_CALL_FINISHED
        with pytest.raises(Died):
            await agent.run("two", session_id="r")
    store.restart()
    async with make(Note(), store=store) as agent:
        await agent.resume_run("r")
    first, second, resumed = seen
    assert first == 1 and second > first and resumed == second
    # The second run's call of the same id was its own (run, not answered from the
    # first run's journal); in doubt after the crash, it was not run a third time.
    assert effects == ["r:same-id", "r:same-id"]
