"""The open event stream (child runs, plugin progress), the generic pause, governed
direct tool calls, toolsets that change, runners that resume, and a store that is
only a journal."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
from pydantic import BaseModel, ConfigDict

from koboi import (
    AllowAllApprover,
    ChildEvent,
    FinalEvent,
    KoboiAgent,
    PluginEvent,
    RunHandle,
    Runner,
    ToolContext,
    ToolResultEvent,
    Toolset,
    hookimpl,
    tool,
)
from koboi import journal as J
from koboi.errors import ConfigError, KoboiError, MissingCapability, SessionNotFound
from koboi.plugins import PluginHost
from koboi.runners import LoopRunner
from koboi.store import (
    InMemoryStore,
    JournalEvent,
    NewEvent,
    capabilities_of,
)
from koboi.tools import Risk, Tool
from koboi.toolsets import ToolsetContext
from koboi_testing.contracts import JournalStoreContract, RunnerContract, ToolsetContract
from koboi_testing.models import InOrderModel
from koboi_testing.stores import JournalOnlyStore

pytestmark = pytest.mark.anyio


class ScriptedName:
    """Registers the provider name the configs name; each agent gets its own model."""

    @hookimpl
    def koboi_register_providers(self, register: Any) -> None:
        register("scripted", lambda options: InOrderModel([]))


def bare_host() -> PluginHost:
    """Only the kernel's built-in plugin (no governance, whatever is installed)."""
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(ScriptedName(), "scripted-name")
    return host


def make(model: InOrderModel, tools: Sequence[Tool], **kwargs: Any) -> KoboiAgent:
    config = {
        "llm": {"provider": "scripted"},
        "agent": {"stream": False, **kwargs.pop("agent", {})},
    }
    return KoboiAgent.from_dict(
        config,
        provider=model,
        store=kwargs.pop("store", InMemoryStore()),
        extra_tools=list(tools),
        **kwargs,
    )


# -- live events ---------------------------------------------------------------------------


@tool(risk="safe", thread=False)
def child_tool(topic: str) -> str:
    """Unused (replaced below)."""
    return topic


async def test_a_sub_agents_events_reach_the_parent_stream_as_they_happen() -> None:
    gate = anyio.Event()
    seen_before_gate: list[Any] = []

    @tool(risk="safe", idempotent=True)
    async def wait_here() -> str:
        """Wait for the test."""
        await gate.wait()
        return "released"

    class Research(Tool):
        name = "research"
        description = "Ask a sub-agent."
        args_model = child_tool.args_model
        live_events = True

        async def invoke(self, args: Any, ctx: ToolContext) -> str:
            result = await ctx.run_subagent(f"look into {args.topic}", tools=["wait_here"])
            return result.output

    model = InOrderModel(
        [
            {"name": "research", "arguments": {"topic": "cats"}},
            {"name": "wait_here", "arguments": {}},  # the child's first turn
            "child says meow",  # the child's answer
            "parent done",
        ]
    )
    agent = make(model, [Research(), wait_here])
    events: list[Any] = []
    async with agent, anyio.create_task_group() as tg:

        async def consume() -> None:
            async for event in agent.stream("go"):
                events.append(event)
                if isinstance(event, ChildEvent) and not gate.is_set():
                    seen_before_gate.append(event)

        tg.start_soon(consume)
        with anyio.fail_after(5):
            while not any(  # noqa: ASYNC110 - polling what the consumer collected
                isinstance(e, ChildEvent) and e.event.kind == "tool_call" for e in events
            ):
                await anyio.sleep(0.01)
        gate.set()
    # The child's tool call was streamed while the parent's tool call was still running.
    assert any(e.event.kind == "tool_call" for e in seen_before_gate)
    children = [e for e in events if isinstance(e, ChildEvent)]
    parent_call = next(e for e in events if e.kind == "tool_call").call.id
    assert {c.parent_call_id for c in children} == {parent_call}
    assert isinstance(children[-1].event, FinalEvent)
    assert children[-1].event.result.output == "child says meow"
    assert events[-1].result.output == "parent done"  # type: ignore[union-attr]
    # The child was offered only the tools it was given, not the parent's others.
    assert [t.name for t in model.requests[1].tools] == ["wait_here"]


async def test_progress_a_tool_emits_is_streamed_tagged_with_its_call() -> None:
    @tool(risk="safe", thread=False)
    def crunch(ctx: ToolContext) -> str:
        """Crunch numbers."""
        for done in (1, 2):
            ctx.emit("crunch.progress", {"done": done})
        return "crunched"

    agent = make(InOrderModel([{"name": "crunch", "arguments": {}}, "ok"]), [crunch])
    async with agent:
        events = [e async for e in agent.stream("go")]
    progress = [e for e in events if isinstance(e, PluginEvent)]
    assert [(p.type, p.data["done"], p.event_id) for p in progress] == [
        ("crunch.progress", 1, None),
        ("crunch.progress", 2, None),
    ]
    result_at = next(i for i, e in enumerate(events) if isinstance(e, ToolResultEvent))
    assert all(events.index(p) < result_at for p in progress)
    assert progress[0].call_id == next(e for e in events if e.kind == "tool_call").call.id


# -- the generic pause ------------------------------------------------------------------------


@tool(risk="moderate", thread=False)
def book(ctx: ToolContext, room: str) -> str:
    """Book a room, asking who for."""
    if ctx.reply is None:
        ctx.suspend("who is the booking for?", kind="input", data={"room": room})
    return f"booked {room} for {ctx.reply}"


async def test_a_suspended_run_waits_and_continues_with_the_reply() -> None:
    store = InMemoryStore()
    model = InOrderModel([{"name": "book", "arguments": {"room": "12"}}, "all set"])
    agent = make(model, [book], store=store, approver=AllowAllApprover())
    async with agent:
        first = await agent.run("book room 12")
        info = await store.get_session(first.session_id)
        assert first.outcome == "suspended" and info.status == "suspended"
        assert first.suspension is not None
        assert first.suspension["reason"] == "who is the booking for?"
        assert first.suspension["data"] == {"room": "12"}
        state = J.fold_state(await store.read(first.session_id))
        assert state.suspended is not None and not state.interrupted
        # The next message of the session is the reply.
        second = await agent.run("Ada", session_id=first.session_id)
        events = await store.read(first.session_id)
    assert second.outcome == "completed" and second.output == "all set"
    finished = [e for e in events if e.type == J.TOOL_CALL_FINISHED]
    assert [e.data["content"] for e in finished] == ["booked 12 for Ada"]
    resumed = next(e for e in events if e.type == J.RUN_RESUMED)
    assert resumed.data["reply"] == "Ada"
    assert J.fold_messages(events)[-1].content == "all set"


async def test_a_crash_after_the_reply_runs_the_call_again_with_it() -> None:
    events = [
        ("run_started", {"input": "b", "agent": "a", "config_hash": "", "autonomous": False}),
        ("model_call_started", {"step": 1}),
        (
            "model_call_finished",
            {
                "step": 1,
                "response": {
                    "message": {
                        "role": "assistant",
                        "tool_calls": [{"id": "c1", "name": "book", "arguments": {"room": "1"}}],
                    }
                },
            },
        ),
        (
            "tool_call_started",
            {
                "step": 1,
                "call_id": "c1",
                "name": "book",
                "arguments": {},
                "idempotent": False,
                "decision": [],
            },
        ),
        (
            "run_finished",
            {
                "outcome": "suspended",
                "output": "",
                "steps": 1,
                "usage": {},
                "cost_usd": 0.0,
                "error": None,
                "suspension": {"reason": "who?", "kind": "input", "data": {}, "call_id": "c1"},
            },
        ),
        ("run_resumed", {"after_seq": 5, "step": 1, "holder": "h", "reply": "Bo"}),
    ]
    journal = [JournalEvent("s", n + 1, t, d, 0.0) for n, (t, d) in enumerate(events)]
    state = J.fold_state(journal)
    (pending,) = state.pending
    # Interrupted after the reply: the call did nothing before, it runs with the reply.
    assert state.interrupted and not pending.started and pending.reply == "Bo"


# -- direct tool calls -------------------------------------------------------------------------


async def test_a_direct_call_goes_through_the_whole_pipeline_and_the_journal() -> None:
    store = InMemoryStore()
    agent = make(InOrderModel([]), [book], store=store)
    async with agent:
        denied = await agent.call_tool("book", {"room": "9"})
        unknown = await agent.call_tool("nope", {})
        allowed = await agent.call_tool("book", {"room": "9"}, approver=AllowAllApprover())
        events = await store.read(denied.session_id)
        audit = await store.read_audit(denied.session_id)
    # A moderate tool needs approval; nobody can give it: denied by default.
    assert denied.refused_by == "approval" and denied.outcome == "refused"
    assert unknown.refused_by == "lookup"
    # Approved, it runs, and suspends like any call (no reply yet).
    assert allowed.outcome == "suspended"
    assert events[0].data["kind"] == "tool_call" and events[0].data["call"]["name"] == "book"
    assert any(e.type == J.APPROVAL_DECIDED for e in events)
    assert any(a.data.get("decision") == "deny" for a in audit)
    assert J.fold_messages(events) == []  # not part of any conversation


async def test_a_direct_call_in_a_conversation_session_leaves_the_conversation_alone() -> None:
    @tool(risk="safe", idempotent=True, thread=False)
    def ping() -> str:
        """Ping."""
        return "pong"

    store = InMemoryStore()
    agent = make(InOrderModel(["hello"]), [ping], store=store)
    async with agent:
        chat = await agent.run("hi")
        direct = await agent.call_tool("ping", {}, session_id=chat.session_id)
        events = await store.read(chat.session_id)
    assert direct.ok and direct.content == "pong" and direct.session_id == chat.session_id
    assert [m.content for m in J.fold_messages(events)] == ["hi", "hello"]


# -- toolsets that change ----------------------------------------------------------------------


class Growing(Toolset):
    name = "growing"

    def __init__(self) -> None:
        self.offered: list[Tool] = []

    def tools(self) -> Sequence[Tool]:
        return list(self.offered)


async def test_a_toolset_change_is_journaled_between_steps() -> None:
    toolset = Growing()

    @tool(risk="safe", idempotent=True, thread=False)
    def grow() -> str:
        """Add a tool."""
        toolset.offered.append(late)
        toolset.version += 1
        return "grown"

    @tool(risk="safe", idempotent=True, thread=False)
    def late() -> str:
        """A tool that appears mid-run."""
        return "late"

    model = InOrderModel(
        [{"name": "grow", "arguments": {}}, {"name": "growing__late", "arguments": {}}, "done"]
    )
    agent = make(model, [grow], toolsets=[toolset])
    async with agent:
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    assert events[0].data["tools"] == ["grow"]
    assert "toolset_tools" not in events[0].data  # the toolset offered nothing yet
    changed = next(e for e in events if e.type == J.TOOLS_CHANGED)
    assert changed.data["added"] == ["growing__late"]
    assert changed.data["tools"] == ["grow", "growing__late"]
    # The journal defines the added tool: a replay can offer it without the toolset.
    (defined,) = changed.data["definitions"]
    assert defined["name"] == "late" and defined["toolset"] == "growing"
    assert defined["namespace"] == "growing"
    assert defined["risk"] == "safe" and defined["idempotent"] is True
    assert defined["parameters"] == late.spec().parameters
    assert [t.name for t in model.requests[1].tools] == ["grow", "growing__late"]
    assert [e.data["content"] for e in events if e.type == J.TOOL_CALL_FINISHED] == [
        "grown",
        "late",
    ]


class Serving(Toolset):
    """A toolset whose connection is a task of the agent's, from open to aclose."""

    name = "serving"

    def __init__(self) -> None:
        self.events: list[str] = []
        self._stop = anyio.Event()

    async def open(self, context: ToolsetContext) -> None:
        assert context.task_group is not None
        await context.task_group.start(self._serve)

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        self.events.append("serving")
        task_status.started()
        try:
            await self._stop.wait()
            self.events.append("stopped")
        except anyio.get_cancelled_exc_class():
            self.events.append("cancelled")
            raise

    def tools(self) -> Sequence[Tool]:
        return []

    async def aclose(self) -> None:
        self.events.append("aclose")
        self._stop.set()
        await anyio.lowlevel.checkpoint()


async def test_a_toolset_runs_long_lived_tasks_in_the_agents_task_group() -> None:
    toolset = Serving()
    agent = make(InOrderModel(["ok"]), [], toolsets=[toolset])
    async with agent:
        assert toolset.events == ["serving"]
        await agent.run("go")
    # aclose() ran while the task still lived, so the task stopped on its own, before the
    # agent's task group was cancelled.
    assert toolset.events == ["serving", "aclose", "stopped"]


async def test_the_journal_defines_toolset_tools_and_an_application_may_replace_them() -> None:
    @tool(risk="destructive", thread=False)
    def wipe() -> str:
        """Wipe."""
        return "wiped"

    offered = Growing()
    offered.offered = [wipe]
    agent = make(InOrderModel(["ok"]), [], toolsets=[offered])
    async with agent:
        result = await agent.run("go")
        direct = await agent.call_tool("growing__wipe", {}, approver=AllowAllApprover())
        events = await agent.store.read(result.session_id)
        called = await agent.store.read(direct.session_id)
    (defined,) = events[0].data["toolset_tools"]
    assert defined == {
        "name": "wipe",
        "toolset": "growing",
        "namespace": "growing",
        "description": "Wipe.",
        "parameters": wipe.spec().parameters,
        "risk": "destructive",
        "idempotent": False,
        "planning": False,
        "live_events": False,
    }
    assert [d["name"] for d in called[0].data["toolset_tools"]] == ["wipe"]

    # plugin_toolsets=False: only the application's toolsets (a replay's stand-ins).
    host = PluginHost()

    class Plugin:
        @staticmethod
        @hookimpl
        def koboi_register_toolsets(register: Any) -> None:
            register("growing", lambda config: Growing())

    host.add_plugin(Plugin, "growing-plugin")
    built = KoboiAgent.from_dict(
        {"llm": {"provider": "scripted"}},
        host=host,
        provider=InOrderModel([]),
        plugin_toolsets=False,
    )
    async with built:
        assert built._parts is not None and built._parts.toolsets == []


async def test_a_toolset_tool_colliding_with_a_config_tool_refuses_to_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @tool(name="growing__clash", risk="safe", thread=False)
    def mine() -> str:
        """Mine."""
        return "mine"

    @tool(risk="safe", thread=False)
    def clash() -> str:
        """The toolset's: offered as growing__clash, the config's tool's name."""
        return "theirs"

    toolset = Growing()
    toolset.offered = [clash]
    agent = make(InOrderModel([]), [mine], toolsets=[toolset])
    with pytest.raises(KoboiError, match="toolset 'growing' offers a tool named 'growing__clash'"):
        await agent.open()
    toolset.on_collision = "skip"
    agent = make(InOrderModel(["ok"]), [mine], toolsets=[toolset])
    with caplog.at_level(logging.WARNING, logger="koboi.toolsets"):
        async with agent:
            assert list(agent.tools) == ["growing__clash"]
            assert agent.tools["growing__clash"] is mine
            result = await agent.run("go")
            events = await agent.store.read(result.session_id)
    # Said in the log once, and in the journal by every run.
    assert "toolset 'growing': tool 'clash' is not offered" in caplog.text
    assert events[0].data["tools_skipped"] == ["growing:clash"]


# -- toolset namespaces ----------------------------------------------------------------------


class Remote(Toolset):
    """A toolset whose tools have names a model API refuses (as an MCP server's may)."""

    name = "remote"

    def __init__(self, names: Sequence[str], namespace: str | None = None) -> None:
        self.namespace = namespace
        self.called: list[str] = []
        self._tools = [self._tool(n) for n in names]

    def _tool(self, remote_name: str) -> Tool:
        called = self.called

        class RemoteTool(Tool):
            name = remote_name
            description = f"The remote {remote_name}."
            args_model = Empty
            risk = Risk.SAFE
            idempotent = True

            def invoke(self, args: Any, ctx: ToolContext) -> str:
                called.append(self.name)  # the call is made with the original name
                return f"ran {self.name}"

        return RemoteTool()

    def tools(self) -> Sequence[Tool]:
        return list(self._tools)


class Empty(BaseModel):
    model_config = ConfigDict(extra="forbid")


async def test_a_toolset_s_tools_are_offered_in_its_namespace_and_called_by_their_own_names() -> (
    None
):
    long = "files." + "x" * 80
    remote = Remote(["files.read", long])
    dotted_name = "remote__files_read_" + _hash("remote__files.read")
    model = InOrderModel([{"name": dotted_name, "arguments": {}}, "done"])
    agent = make(model, [], toolsets=[remote])
    async with agent:
        offered = list(agent.tools)
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    dotted, shortened = offered
    # Provider-safe ([A-Za-z0-9_-]{1,64}), in the namespace, told apart by a stable hash.
    assert dotted.startswith("remote__files_read_") and len(shortened) == 64
    assert shortened.startswith("remote__files_x") and shortened != dotted
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in offered)
    assert [t.name for t in model.requests[0].tools] == offered
    # The model calls the offered name; the toolset's tool runs under its original one.
    assert remote.called == ["files.read"]
    assert [e.data["name"] for e in events if e.type == J.TOOL_CALL_FINISHED] == [dotted]
    assert events[0].data["tools"] == offered


def _hash(raw: str) -> str:
    import hashlib

    return hashlib.sha256(raw.encode()).hexdigest()[:8]


async def test_a_declared_namespace_and_the_configs_override() -> None:
    declared = Remote(["lookup"], namespace="crm")
    async with make(InOrderModel([]), [], toolsets=[declared]) as agent:
        assert list(agent.tools) == ["crm__lookup"]
    renamed = KoboiAgent.from_dict(
        {"llm": {"provider": "scripted"}, "tools": {"namespaces": {"remote": "sales"}}},
        provider=InOrderModel([]),
        store=InMemoryStore(),
        toolsets=[Remote(["lookup"], namespace="crm")],
    )
    async with renamed:
        assert list(renamed.tools) == ["sales__lookup"]


async def test_two_toolsets_in_one_namespace_or_a_bad_namespace_refuse_to_open() -> None:
    one, two = Remote(["a"], namespace="shared"), Remote(["b"], namespace="shared")
    two.name = "remote-2"
    with pytest.raises(KoboiError, match="both use the namespace 'shared'; give one another"):
        await make(InOrderModel([]), [], toolsets=[one, two]).open()
    # Control: the config tells them apart.
    apart = KoboiAgent.from_dict(
        {"llm": {"provider": "scripted"}, "tools": {"namespaces": {"remote-2": "other"}}},
        provider=InOrderModel([]),
        store=InMemoryStore(),
        toolsets=[Remote(["a"], namespace="shared"), _named(Remote(["b"], "shared"), "remote-2")],
    )
    async with apart:
        assert sorted(apart.tools) == ["other__b", "shared__a"]
    with pytest.raises(KoboiError, match=re.escape("namespace 'no.dots' is not 1-32 letters")):
        await make(InOrderModel([]), [], toolsets=[Remote(["a"], namespace="no.dots")]).open()
    with pytest.raises(KoboiError, match=re.escape("tools.namespaces names toolset(s) this agent")):
        await KoboiAgent.from_dict(
            {"llm": {"provider": "scripted"}, "tools": {"namespaces": {"typo": "x"}}},
            provider=InOrderModel([]),
            store=InMemoryStore(),
            toolsets=[Remote(["a"])],
        ).open()
    with pytest.raises(ConfigError, match=re.escape("tools.namespaces.remote")):
        KoboiAgent.from_dict(
            {"llm": {"provider": "scripted"}, "tools": {"namespaces": {"remote": "a b"}}},
            provider=InOrderModel([]),
        )


async def test_a_toolset_gathering_several_sources_gives_its_tools_namespaces_of_their_own() -> (
    None
):
    """An MCP client with two servers is one toolset; each server's tools are offered in
    the server's namespace, so two servers' ``search`` tools are told apart."""

    def search_of(namespace: str | None) -> Tool:
        @tool(risk="safe", idempotent=True, thread=False, name="search")
        def search(q: str) -> str:
            """Search."""
            return f"{namespace}: {q}"

        search.namespace = namespace
        return search

    gathered = Growing()
    gathered.offered = [search_of("alpha"), search_of("beta"), search_of(None)]
    model = InOrderModel([{"name": "beta__search", "arguments": {"q": "x"}}, "done"])
    async with make(model, [], toolsets=[gathered]) as agent:
        assert sorted(agent.tools) == ["alpha__search", "beta__search", "growing__search"]
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    assert [e.data["content"] for e in events if e.type == J.TOOL_CALL_FINISHED] == ["beta: x"]
    defined = {(d["namespace"], d["name"]) for d in events[0].data["toolset_tools"]}
    assert defined == {("alpha", "search"), ("beta", "search"), ("growing", "search")}
    # A tool's own namespace is checked like a toolset's.
    gathered.offered = [search_of("no.dots")]
    with pytest.raises(KoboiError, match=re.escape("namespace 'no.dots' is not 1-32 letters")):
        await make(InOrderModel([]), [], toolsets=[gathered]).open()


async def test_a_toolset_tool_with_a_schema_of_its_own_is_offered_with_that_schema() -> None:
    """A tool whose parameters come from elsewhere (an MCP server's JSON schema), not
    from an arguments model: the offered tool keeps that schema and its own parsing."""
    from pydantic import BaseModel, ConfigDict

    from koboi.messages import ToolSpec

    class Anything(BaseModel):
        model_config = ConfigDict(extra="allow")

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}

    class Remote(Tool):
        name = "weather"
        description = "Weather of a city."
        args_model = Anything
        risk = Risk.SAFE

        def spec(self) -> ToolSpec:
            return ToolSpec(name=self.name, description=self.description, parameters=schema)

        def invoke(self, args: Any, ctx: Any) -> str:
            return f"sunny in {args.model_dump()['city']}"

    gathered = Growing()
    gathered.offered = [Remote()]
    model = InOrderModel([{"name": "growing__weather", "arguments": {"city": "Oslo"}}, "ok"])
    async with make(model, [], toolsets=[gathered]) as agent:
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    (offered,) = model.requests[0].tools
    assert offered.name == "growing__weather" and offered.parameters == schema
    assert [e.data["content"] for e in events if e.type == J.TOOL_CALL_FINISHED] == [
        "sunny in Oslo"
    ]


def _named(toolset: Toolset, name: str) -> Toolset:
    toolset.name = name
    return toolset


def test_provider_safe_names() -> None:
    from koboi.toolsets import provider_safe_name

    assert provider_safe_name("github__", "create_issue") == "github__create_issue"
    dotted = provider_safe_name("srv__", "a.b")
    assert dotted.startswith("srv__a_b_") and dotted != provider_safe_name("srv__", "a_b")
    long = provider_safe_name("x__", "n" * 100)
    assert len(long) == 64 and long != provider_safe_name("x__", "n" * 99)


# -- runners that resume ---------------------------------------------------------------------


class Steps(Runner):
    """Runs a child per step name, recording each as done; on resume skips what is done."""

    name = "steps"

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.ran: list[str] = []

    async def run(self, run: RunHandle) -> AsyncIterator[Any]:
        done = {e.data["name"] for e in run.plugin_events("steps")}
        output = ""
        for name in self.names:
            if name in done:
                continue
            result = await run.child(f"do {name}", tag=name)
            self.ran.append(name)
            run.info.record("steps.done", {"name": name})
            await run.commit()
            output = result.output
        run.finish(output)
        return
        yield  # pragma: no cover - an async generator


class DiesRecording(InMemoryStore):
    """The process "dies" (the store fails) when it would commit step ``name`` as done."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    async def append(self, session_id: str, events: Sequence[NewEvent], **kw: Any) -> Any:
        if any(e.type == "steps.done" and e.data.get("name") == self.name for e in events):
            self.name = ""
            raise OSError("killed")
        return await super().append(session_id, events, **kw)


async def test_a_runner_resumes_from_its_own_events() -> None:
    store = DiesRecording("b")
    runner = Steps(["a", "b", "c"])
    model = InOrderModel(["did a", "did b", "did b again", "did c"])
    agent = make(model, [], store=store, host=bare_host(), runner=runner)
    async with agent:
        with pytest.raises(OSError, match="killed"):
            await agent.run("go", session_id="r1")
    state = J.fold_state(await store.read("r1"))
    assert state.interrupted
    assert [e.data["name"] for e in state.plugin_events] == ["a"]  # b's event was lost
    again = make(model, [], store=store, host=bare_host(), runner=runner)
    async with again:
        events = [e async for e in again.resume("r1")]
    assert runner.ran == ["a", "b", "b", "c"]
    assert events[-1].result.output == "did c"  # type: ignore[union-attr]
    children = [e for e in events if isinstance(e, ChildEvent)]
    assert [c.tag for c in children if isinstance(c.event, FinalEvent)] == ["b", "c"]


async def test_a_runners_child_events_stream_while_the_runner_awaits_the_child() -> None:
    gate = anyio.Event()

    @tool(risk="safe", idempotent=True)
    async def wait_here() -> str:
        """Wait for the test."""
        await gate.wait()
        return "released"

    class OneChild(Runner):
        name = "one-child"

        async def run(self, run: RunHandle) -> AsyncIterator[Any]:
            result = await run.child("do it", tag="only")
            run.finish(result.output)
            return
            yield  # pragma: no cover - an async generator

    model = InOrderModel([{"name": "wait_here", "arguments": {}}, "child done"])
    agent = make(model, [wait_here], runner=OneChild())
    events: list[Any] = []
    async with agent, anyio.create_task_group() as tg:

        async def consume() -> None:
            async for event in agent.stream("go"):
                events.append(event)

        tg.start_soon(consume)
        with anyio.fail_after(5):
            # The child's tool call arrives while the child (and so the runner) still waits.
            while not any(  # noqa: ASYNC110 - polling what the consumer collected
                isinstance(e, ChildEvent) and e.event.kind == "tool_call" for e in events
            ):
                await anyio.sleep(0.01)
        assert not gate.is_set()
        gate.set()
    assert events[-1].result.output == "child done"  # type: ignore[union-attr]
    assert {e.tag for e in events if isinstance(e, ChildEvent)} == {"only"}


async def test_a_runner_that_fails_in_its_task_fails_the_run() -> None:
    class Broken(Runner):
        name = "broken"

        async def run(self, run: RunHandle) -> AsyncIterator[Any]:
            await run.child("first", tag="x")
            raise RuntimeError("the plan was wrong")
            yield  # pragma: no cover - an async generator

    agent = make(InOrderModel(["child done"]), [], runner=Broken())
    async with agent:
        result = await agent.run("go")
    assert result.outcome == "failed" and "the plan was wrong" in (result.error or "")


class TestTheLoopRunnerContract(RunnerContract):
    @pytest.fixture
    def runner(self) -> Runner:
        return LoopRunner()

    @pytest.fixture
    def turns(self) -> list[Any]:
        return ["an answer"]


class TestStepsRunnerContract(RunnerContract):
    @pytest.fixture
    def runner(self) -> Runner:
        return Steps(["a", "b"])

    @pytest.fixture
    def turns(self) -> list[Any]:
        return ["did a", "did b"]


class TestGrowingToolsetContract(ToolsetContract):
    @pytest.fixture
    def toolset(self) -> Toolset:
        grown = Growing()

        @tool(risk="safe", idempotent=True, thread=False)
        def leaf() -> str:
            """A leaf."""
            return "leaf"

        grown.offered = [leaf]
        return grown


# -- a store that is only a journal -----------------------------------------------------------


class DiesAtTheToolResult(JournalOnlyStore):
    """A journal-only store whose process "dies" (the store fails) when it would commit a
    tool call's result: the call started, its outcome was never journaled."""

    def __init__(self) -> None:
        super().__init__()
        self.dead = True

    async def append(self, session_id: str, events: Sequence[NewEvent], **kw: Any) -> Any:
        if self.dead and any(e.type == J.TOOL_CALL_FINISHED for e in events):
            raise OSError("killed")
        return await super().append(session_id, events, **kw)


class TestJournalOnlyStore(JournalStoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[JournalOnlyStore]:
        store = JournalOnlyStore()
        async with store:
            yield store


async def test_a_journal_only_store_runs_an_agent_and_resumes() -> None:
    store = DiesAtTheToolResult()
    assert capabilities_of(store) == []
    pinged: list[str] = []

    @tool(risk="safe", idempotent=True, thread=False)
    def ping() -> str:
        """Ping."""
        pinged.append("ping")
        return "pong"

    agent = make(
        InOrderModel([{"name": "ping", "arguments": {}}, "never"]),
        [ping],
        store=store,
        host=bare_host(),
    )
    async with agent:
        with pytest.raises(OSError, match="killed"):
            await agent.run("go", session_id="j1")
    state = J.fold_state(await store.read("j1"))
    assert state.interrupted and [p.started for p in state.pending] == [True]
    assert (await store.get_session("j1")).status == "running"
    # A new agent (a new process) on the same journal finishes the run: the call in doubt
    # is idempotent, so it runs again; the model is asked for the rest.
    store.dead = False
    again = make(InOrderModel(["done"]), [ping], store=store, host=bare_host())
    async with again:
        result = await again.resume_run("j1")
    assert result.ok and result.output == "done"
    assert pinged == ["ping", "ping"]
    types = [e.type for e in await store.read("j1")]
    assert types.count(J.RUN_RESUMED) == 1 and types[-1] == J.RUN_FINISHED
    assert (await store.get_session("j1")).status == "completed"
    with pytest.raises(SessionNotFound):
        await store.get_session("missing")


async def test_a_feature_needing_a_missing_capability_says_so_at_open() -> None:
    agent = KoboiAgent.from_dict(
        {"llm": {"provider": "scripted"}, "cache": {"mode": "record"}},
        provider=InOrderModel([]),
        store=JournalOnlyStore(),
        host=bare_host(),
    )
    with pytest.raises(MissingCapability) as raised:
        await agent.open()
    message = str(raised.value)
    assert "\n" not in message
    assert "the response cache (cache.mode: record) needs a store with response cache" in message
    assert "'journal-only' has only the journal" in message
