"""The agent loop: stop conditions, the tool pipeline and the journal it writes."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from koboi import (
    AllowAllApprover,
    CallbackApprover,
    FinalEvent,
    Interceptor,
    KoboiAgent,
    PendingToolCall,
    RunInfo,
    StepEvent,
    TextDeltaEvent,
    ToolCallEvent,
    ToolError,
    ToolResultEvent,
    Verdict,
    tool,
)
from koboi.errors import KoboiError, ProviderError
from koboi.messages import ModelRequest, ModelResponse
from koboi.provider import ModelProvider
from koboi.store import InMemoryStore
from koboi_scripted import ScriptedProvider

pytestmark = pytest.mark.anyio


@tool(thread=False)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(risk="destructive")
def wipe(path: str) -> str:
    """Delete everything under a path."""
    return f"wiped {path}"


@tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("kaboom")


@tool
def refuse() -> str:
    """Fails the way tools are meant to."""
    raise ToolError("the disk is full")


@tool
async def slow() -> str:
    """Takes too long."""
    await anyio.sleep(10)
    return "done"


def agent(turns: list[Any], *, tools: tuple[Any, ...] = (add,), **agent_section: Any) -> KoboiAgent:
    config: dict[str, Any] = {
        "llm": {"provider": "scripted"},
        "agent": {"stream": False, **agent_section},
    }
    kwargs: dict[str, Any] = {}
    for key in ("approver", "interceptors", "store"):
        if key in agent_section:
            kwargs[key] = config["agent"].pop(key)
    if "timeout" in agent_section:
        config["agent"].pop("timeout")
        config["tools"] = {"timeout_seconds": agent_section["timeout"]}
    return KoboiAgent.from_dict(
        config, provider=ScriptedProvider.from_turns(turns), extra_tools=list(tools), **kwargs
    )


async def journal(a: KoboiAgent, session_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, dict(e.data)) for e in await a.store.read(session_id)]


async def test_final_answer_after_a_tool_call_and_journal_order() -> None:
    async with agent([{"name": "add", "arguments": {"a": 2, "b": 3}}, "It is 5."]) as a:
        result = await a.run("add 2 and 3")
        assert (result.outcome, result.output, result.steps) == ("completed", "It is 5.", 2)
        assert result.usage.requests == 2
        types = [t for t, _ in await journal(a, result.session_id)]
        assert types == [
            "run_started",
            "model_call_started",
            "model_call_finished",
            "tool_call_started",
            "tool_call_finished",
            "model_call_started",
            "model_call_finished",
            "run_finished",
        ]
        events = await journal(a, result.session_id)
        started = dict(events[3][1])
        # What each stage said: nothing here, unless an installed plugin has a stage.
        assert isinstance(started.pop("decision"), list)
        assert started == {
            "step": 1,
            "call_id": "call_0_0",
            "name": "add",
            "arguments": {"a": 2, "b": 3},
            "idempotent": False,
        }
        assert events[4][1]["content"] == "5" and events[4][1]["is_error"] is False
        assert events[-1][1]["outcome"] == "completed"
        assert (await a.store.get_session(result.session_id)).status == "completed"


async def test_max_iterations_is_a_clear_journaled_outcome() -> None:
    turns = [{"name": "add", "arguments": {"a": 1, "b": 1}}] * 5
    async with agent(turns, max_iterations=3) as a:
        result = await a.run("loop forever")
        assert result.outcome == "max_iterations"
        assert result.steps == 3
        assert result.error is not None and "agent.max_iterations" in result.error
        last = (await journal(a, result.session_id))[-1]
        assert last[0] == "run_finished" and last[1]["outcome"] == "max_iterations"


async def test_provider_failure_ends_the_run_as_failed() -> None:
    async with agent(["only one turn"]) as a:
        first = await a.run("hi")
        assert first.outcome == "completed"
        # The scripted model has no second turn: the provider raises ProviderError.
        second = await a.run("again", session_id=first.session_id)
        assert second.outcome == "failed"
        assert second.error
        types = [t for t, _ in await journal(a, first.session_id)]
        assert types[-2:] == ["model_call_failed", "run_finished"]
        assert (await a.store.get_session(first.session_id)).status == "failed"


async def test_wrong_arguments_go_back_to_the_model_as_a_tool_error() -> None:
    turns = [{"name": "add", "arguments": {"a": "two", "c": 1}}, "sorry"]
    async with agent(turns) as a:
        events = [e async for e in a.stream("add")]
        refused = [e for e in events if isinstance(e, ToolResultEvent)]
        assert len(refused) == 1 and refused[0].is_error and refused[0].refused_by == "arguments"
        assert "invalid arguments for tool 'add'" in refused[0].content
        assert "argument 'a': Input should be a valid integer" in refused[0].content
        assert "unknown argument 'c'" in refused[0].content
        assert "missing required argument 'b'" in refused[0].content
        final = events[-1]
        assert isinstance(final, FinalEvent) and final.result.outcome == "completed"
        tool_message = final.result.messages[2]
        assert tool_message.role == "tool" and tool_message.is_error


async def test_unknown_tool_is_refused_with_the_list_of_tools() -> None:
    async with agent([{"name": "ADD", "arguments": {}}, "ok"]) as a:
        result = await a.run("x")
        content = result.messages[2].content
        assert content == "unknown tool 'ADD' (names must match exactly); tools: add"
        refused = [d for t, d in await journal(a, result.session_id) if t == "tool_call_refused"]
        assert refused[0]["stage"] == "lookup"


async def test_tool_exceptions_become_error_results() -> None:
    turns = [[{"name": "explode", "arguments": {}}, {"name": "refuse", "arguments": {}}], "noted"]
    async with agent(turns, tools=(explode, refuse)) as a:
        result = await a.run("x")
        assert result.outcome == "completed"
        assert result.messages[2].content == "tool 'explode' failed: RuntimeError: kaboom"
        assert result.messages[3].content == "tool 'refuse' failed: the disk is full"


async def test_tool_timeout() -> None:
    async with agent([{"name": "slow", "arguments": {}}, "ok"], tools=(slow,), timeout=0.2) as a:
        with anyio.fail_after(5):
            result = await a.run("x")
        assert "timed out after 0.2 s" in result.messages[2].content


async def test_destructive_tool_is_denied_by_default() -> None:
    async with agent([{"name": "wipe", "arguments": {"path": "/"}}, "ok"], tools=(wipe,)) as a:
        result = await a.run("wipe it")
        message = result.messages[2]
        assert message.is_error
        assert "needs approval and no approver is available: denied by default" in message.content
        events = await journal(a, result.session_id)
        types = [t for t, _ in events]
        assert "tool_call_started" not in types
        assert types[3:6] == ["approval_requested", "approval_decided", "tool_call_refused"]
        assert events[4][1]["approved"] is False


async def test_approver_sees_exact_arguments_and_can_allow() -> None:
    seen: list[Any] = []

    def decide(request: Any) -> bool:
        seen.append(request)
        return True

    turns = [{"name": "wipe", "arguments": {"path": "/tmp/x"}}, "done"]
    async with agent(turns, tools=(wipe,), approver=CallbackApprover(decide)) as a:
        result = await a.run("wipe")
        assert result.messages[2].content == "wiped /tmp/x"
        assert seen[0].tool_name == "wipe" and dict(seen[0].arguments) == {"path": "/tmp/x"}
        assert len(seen[0].arguments_hash) == 64


class DenyOdd(Interceptor):
    name = "policy"

    async def before_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
        if pending.args.a % 2:  # type: ignore[attr-defined]
            return Verdict("deny", "odd numbers are not allowed", stage="policy")
        return None


class Recorder(Interceptor):
    priority = 900

    def __init__(self) -> None:
        self.events: list[str] = []

    async def on_event(self, event: Any, run: RunInfo) -> None:
        self.events.append(event.type)

    async def before_model_call(self, request: ModelRequest, run: RunInfo) -> ModelRequest | None:
        return request.model_copy(update={"options": {"seen": run.step}})


async def test_interceptors_deny_and_observe() -> None:
    recorder = Recorder()
    turns = [
        [
            {"name": "add", "arguments": {"a": 1, "b": 1}},
            {"name": "add", "arguments": {"a": 2, "b": 2}},
        ],
        "ok",
    ]
    async with agent(turns, interceptors=[DenyOdd(), recorder]) as a:
        result = await a.run("x")
        assert result.messages[2].content == "odd numbers are not allowed"
        assert result.messages[3].content == "4"
        stored = [t for t, _ in await journal(a, result.session_id)]
        assert recorder.events == stored
        provider = a._require().provider
        assert [r.options for r in provider.requests] == [{"seen": 1}, {"seen": 2}]  # type: ignore[attr-defined]


async def test_parallel_tool_calls_keep_the_models_order() -> None:
    @tool
    async def nap(seconds: float) -> str:
        """Sleep."""
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    calls = [{"name": "nap", "arguments": {"seconds": s}} for s in (0.3, 0.1, 0.2)]
    async with agent([calls, "done"], tools=(nap,), parallel_tool_calls=True) as a:
        with anyio.fail_after(2):
            started = anyio.current_time()
            result = await a.run("x")
            elapsed = anyio.current_time() - started
        assert [m.content for m in result.messages[2:5]] == ["slept 0.3", "slept 0.1", "slept 0.2"]
        assert elapsed < 0.55  # concurrent, not 0.6 s in sequence


async def test_stream_yields_typed_events_in_order() -> None:
    turns = [{"name": "add", "arguments": {"a": 1, "b": 2}}, "three it is"]
    async with KoboiAgent.from_dict(
        {"llm": {"provider": "scripted"}},
        provider=ScriptedProvider.from_turns(turns),
        extra_tools=[add],
    ) as a:
        events = [e async for e in a.stream("x")]
        kinds = [type(e).__name__ for e in events]
        assert kinds[:3] == ["StepEvent", "ToolCallEvent", "ToolResultEvent"]
        assert kinds[-1] == "FinalEvent"
        deltas = [e.text for e in events if isinstance(e, TextDeltaEvent)]
        assert deltas == ["three ", "it ", "is"]
        assert events[-1].result.output == "".join(deltas)  # type: ignore[union-attr]


async def test_session_continues_from_its_journal() -> None:
    async with agent(["first answer", "second answer"]) as a:
        first = await a.run("one")
        second = await a.run("two", session_id=first.session_id)
        assert second.session_id == first.session_id
        assert [m.content for m in second.messages] == [
            "one",
            "first answer",
            "two",
            "second answer",
        ]
        # Each run reports its own usage and steps, not the session's running total.
        assert (second.steps, second.usage.requests) == (1, 1)


async def test_breaking_out_of_the_stream_records_cancelled() -> None:
    store = InMemoryStore()
    turns = [{"name": "add", "arguments": {"a": 1, "b": 2}}, "done"]
    async with agent(turns, store=store) as a:
        stream = a.stream("x")
        first = await stream.__anext__()
        assert isinstance(first, StepEvent)
        await stream.aclose()
        (session,) = await store.list_sessions()
        events = await store.read(session.id)
        assert events[-1].type == "run_finished" and events[-1].data["outcome"] == "cancelled"
        assert session.status == "interrupted"


async def test_agent_must_be_opened() -> None:
    a = agent(["x"])
    with pytest.raises(KoboiError, match="not open"):
        await a.run("x")


async def test_tool_call_event_precedes_result() -> None:
    async with agent([{"name": "add", "arguments": {"a": 1, "b": 2}}, "3"]) as a:
        events = [e async for e in a.stream("x")]
        call_index = next(i for i, e in enumerate(events) if isinstance(e, ToolCallEvent))
        result_index = next(i for i, e in enumerate(events) if isinstance(e, ToolResultEvent))
        assert call_index < result_index


class Broken(ModelProvider):
    name = "broken"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise ProviderError("the model server answered 503")


async def test_allow_all_and_provider_error_message() -> None:
    async with KoboiAgent.from_dict(
        {"llm": {"provider": "scripted"}}, provider=Broken(), approver=AllowAllApprover()
    ) as a:
        result = await a.run("x")
        assert (result.outcome, result.error) == ("failed", "the model server answered 503")


@pytest.mark.parametrize("system_prompt", ["", "Be brief."])
async def test_each_request_keeps_the_conversation_it_was_sent(system_prompt: str) -> None:
    provider = ScriptedProvider.from_turns(
        [
            {"name": "add", "arguments": {"a": 1, "b": 2}},
            {"name": "add", "arguments": {"a": 3, "b": 4}},
            "done",
        ]
    )
    config = {"llm": {"provider": "scripted"}, "agent": {"system_prompt": system_prompt}}
    async with KoboiAgent.from_dict(config, provider=provider, extra_tools=[add]) as a:
        await a.run("go")
    offset = 1 if system_prompt else 0
    assert [len(r.messages) for r in provider.requests] == [1 + offset, 3 + offset, 5 + offset]
    assert [m.role for m in provider.requests[1].messages][offset:] == ["user", "assistant", "tool"]
    if system_prompt:
        assert provider.requests[0].messages[0].content == "Be brief."
    assert provider.requests[2].messages[-1].content == "7"
    assert provider.requests[1].messages[-1:] == [provider.requests[1].messages[-1]]


class WaitingStore(InMemoryStore):
    """Appends take a while, unevenly, as with a real database: concurrent appends would
    reach it out of order unless the run serialises its flushes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def append(self, session_id: str, events: Any, **kw: Any) -> Any:
        self.calls += 1
        await anyio.sleep(0.02 if self.calls % 2 else 0.001)
        return await super().append(session_id, events, **kw)


async def test_parallel_tool_calls_against_a_store_that_waits() -> None:
    @tool
    async def nap(seconds: float) -> str:
        """Sleep."""
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    store = WaitingStore()
    calls = [{"name": "nap", "arguments": {"seconds": s}} for s in (0.03, 0.0, 0.01, 0.02)]
    async with agent([calls, "done"], tools=(nap,), parallel_tool_calls=True, store=store) as a:
        result = await a.run("x")
    assert result.outcome == "completed"
    events = await store.read(result.session_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    started = [e.data["call_id"] for e in events if e.type == "tool_call_started"]
    assert len(started) == 4
    contents = [m.content for m in result.messages if m.role == "tool"]
    assert contents == ["slept 0.03", "slept 0.0", "slept 0.01", "slept 0.02"]
