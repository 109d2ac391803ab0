"""The kernel's governance seams: strict arguments, bound approvals with deadlines, the audit
trail, redaction of everything stored and shown, and sub-agents under the parent's pipeline."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import pytest

from koboi import (
    AllowAllApprover,
    ApprovalDecision,
    ApprovalRequest,
    CallbackApprover,
    FinalEvent,
    Interceptor,
    KoboiAgent,
    PendingToolCall,
    RunInfo,
    TextDeltaEvent,
    ToolContext,
    Verdict,
    tool,
)
from koboi.messages import (
    ToolCall,
    argument_problem,
    decode_tool_arguments,
    duplicate_key,
    loads_json,
)
from koboi_scripted import ScriptedProvider
from koboi_testing.models import InOrderModel

pytestmark = pytest.mark.anyio


@tool(risk="moderate")
def note(text: str) -> str:
    """Write a note."""
    return f"noted {text}"


@tool(risk="safe")
def look(what: str) -> str:
    """Look at something."""
    return f"saw {what}"


def make(
    turns: list[Any],
    *,
    tools: tuple[Any, ...] = (note, look),
    agent: dict[str, Any] | None = None,
    **kwargs: Any,
) -> KoboiAgent:
    config = {
        "llm": {"provider": "scripted"},
        "agent": {"stream": False, **(agent or {})},
        "store": {"url": "memory://"},
    }
    kwargs.setdefault("provider", ScriptedProvider.from_turns(turns))
    return KoboiAgent.from_dict(config, extra_tools=list(tools), **kwargs)


async def run(a: KoboiAgent, message: str = "go") -> tuple[Any, list[Any]]:
    async with a:
        result = await a.run(message)
        return result, list(await a.store.read(result.session_id))


def refusals(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.data["stage"], e.data["reason"]) for e in events if e.type == "tool_call_refused"]


# -- arguments -------------------------------------------------------------------------


def test_repeated_keys_are_found_at_any_depth() -> None:
    assert duplicate_key(loads_json('{"a": 1, "a": 2}')) == "a"
    assert duplicate_key(loads_json('{"x": [{"b": 1, "b": 1}]}')) == "b"
    assert duplicate_key(loads_json('{"a": 1, "b": {"a": 2}}')) is None
    assert decode_tool_arguments('{"a": 1, "a": 2}') == ({}, '{"a": 1, "a": 2}')
    assert decode_tool_arguments(loads_json('{"a": {"c": 1, "c": 2}}'))[0] == {}
    assert decode_tool_arguments("") == ({}, None)
    assert decode_tool_arguments('{"a": 1}') == ({"a": 1}, None)
    assert "appears more than once" in argument_problem('{"a": 1, "a": 2}')
    assert "not valid JSON" in argument_problem('{"a": ')
    assert "not a JSON object" in argument_problem("[1]")


async def test_a_call_with_a_repeated_key_is_refused_and_the_model_told_why() -> None:
    raw = ToolCall(id="c1", name="look", raw_arguments='{"what": "a", "what": "b"}')
    result, events = await run(make([], provider=InOrderModel([raw, "done"])))
    ((stage, reason),) = refusals(events)
    assert stage == "arguments" and "'what' appears more than once" in reason
    assert "appears more than once" in result.messages[2].content


async def test_oversized_arguments_are_refused_before_any_interceptor() -> None:
    seen: list[str] = []

    class Spy(Interceptor):
        async def before_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
            seen.append(pending.call.name)
            return None

    turns = [{"name": "look", "arguments": {"what": "x" * 2000}}, "done"]
    # Control: under the default limit the same call reaches the interceptors and runs.
    _, events = await run(make(turns, interceptors=[Spy()]))
    assert seen == ["look"] and refusals(events) == []
    config_small = {
        "agent": {"stream": False},
        "llm": {"provider": "scripted"},
        "tools": {"max_argument_bytes": 1000},
        "store": {"url": "memory://"},
    }
    a = KoboiAgent.from_dict(
        config_small,
        provider=ScriptedProvider.from_turns(turns),
        extra_tools=[look],
        interceptors=[Spy()],
    )
    seen.clear()
    _, events = await run(a)
    ((stage, reason),) = refusals(events)
    assert stage == "arguments" and "tools.max_argument_bytes" in reason
    assert seen == []


# -- approvals ------------------------------------------------------------------------------


async def test_the_request_carries_an_id_and_a_deadline_that_are_journaled() -> None:
    asked: list[ApprovalRequest] = []

    def yes(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    _, events = await run(
        make(
            [{"name": "note", "arguments": {"text": "a"}}, "done"],
            approver=CallbackApprover(yes),
            agent={"approval_timeout_seconds": 42},
        )
    )
    (request,) = asked
    (requested,) = [e.data for e in events if e.type == "approval_requested"]
    assert re.fullmatch(r"ap_[0-9a-f]{32}", request.approval_id)
    assert requested["approval_id"] == request.approval_id
    assert requested["expires_at"] == request.expires_at
    assert 40 < request.expires_at - events[0].at <= 42.5
    (decided,) = [e.data for e in events if e.type == "approval_decided"]
    assert decided["approval_id"] == request.approval_id and decided["approved"] is True


@pytest.mark.parametrize(
    ("field", "value"),
    [("session_id", "other"), ("approval_id", "ap_other"), ("arguments_hash", "0" * 64)],
)
async def test_a_decision_for_another_request_is_refused(field: str, value: str) -> None:
    def answer(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True, **{field: value})

    _, events = await run(
        make(
            [{"name": "note", "arguments": {"text": "a"}}, "done"],
            approver=CallbackApprover(answer),
        )
    )
    ((stage, reason),) = refusals(events)
    assert stage == "approval" and f"another {field.split('_')[0]}" in reason

    # Control: the same decision naming this request is accepted.
    def bound(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True, **{field: getattr(request, field)})

    _, events = await run(
        make(
            [{"name": "note", "arguments": {"text": "a"}}, "done"], approver=CallbackApprover(bound)
        )
    )
    assert refusals(events) == []


async def test_an_approver_that_does_not_answer_in_time_is_a_no() -> None:
    async def slow(request: ApprovalRequest) -> bool:
        await anyio.sleep(10)
        return True

    with anyio.fail_after(5):
        _, events = await run(
            make(
                [{"name": "note", "arguments": {"text": "a"}}, "done"],
                approver=CallbackApprover(slow),
                agent={"approval_timeout_seconds": 0.1},
            )
        )
    ((stage, reason),) = refusals(events)
    assert stage == "approval" and "agent.approval_timeout_seconds" in reason


async def test_after_approval_sees_the_decision() -> None:
    seen: list[tuple[str, bool, str]] = []

    class Learner(Interceptor):
        async def after_approval(
            self,
            pending: PendingToolCall,
            request: ApprovalRequest,
            decision: ApprovalDecision,
            run: RunInfo,
        ) -> None:
            seen.append((pending.call.name, decision.approved, decision.scope))

    def always(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True, scope="always")

    await run(
        make(
            [{"name": "note", "arguments": {"text": "a"}}, "done"],
            approver=CallbackApprover(always),
            interceptors=[Learner()],
        )
    )
    assert seen == [("note", True, "always")]


# -- the audit trail ------------------------------------------------------------------------


async def test_each_action_has_a_before_and_an_after_record_in_its_transaction() -> None:
    turns = [
        {"name": "look", "arguments": {"what": "a"}},
        {"name": "nope", "arguments": {}},
        "done",
    ]
    a = make(turns)
    async with a:
        result = await a.run("go")
        audit = [dict(e.data) for e in await a.store.read_audit(result.session_id)]
        events = await a.store.read(result.session_id)
    phases = [(r["phase"], r["tool"]) for r in audit]
    assert phases == [("before", "look"), ("after", "look"), ("decision", "nope")]
    assert audit[0]["arguments"] == {"what": "a"} and audit[0]["session_id"] == result.session_id
    assert audit[1]["outcome"] == "ok" and audit[2]["stage"] == "lookup"
    # The "before" record was committed with tool_call_started, before the effect.
    started = next(e for e in events if e.type == "tool_call_started")
    assert isinstance(started.data["decision"], list)


async def test_an_interceptor_can_add_audit_records() -> None:
    class Auditor(Interceptor):
        async def before_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
            run.audit({"action": "custom", "tool": pending.call.name})
            return Verdict("allow", "fine", stage="custom", skip_approval=True)

    a = make(
        [{"name": "note", "arguments": {"text": "a"}}, "done"],
        interceptors=[Auditor()],
        approver=AllowAllApprover(),
    )
    async with a:
        result = await a.run("go")
        audit = [dict(e.data) for e in await a.store.read_audit(result.session_id)]
        events = await a.store.read(result.session_id)
    assert {"action": "custom", "tool": "note", "session_id": result.session_id} in audit
    started = next(e for e in events if e.type == "tool_call_started")
    assert {"stage": "custom", "action": "allow", "reason": "fine"} in started.data["decision"]


# -- redaction --------------------------------------------------------------------------------


class Masker:
    """A simple Redaction: masks one word, holding back a possible beginning of it."""

    SECRET = "hunter2hunter2"

    active = True

    def redact(self, text: str) -> str:
        return text.replace(self.SECRET, "[MASKED]")

    def redact_data(self, data: Any) -> Any:
        return json.loads(self.redact(json.dumps(data)))

    def stream(self) -> Any:
        outer = self

        class Stream:
            held = ""

            def feed(self, text: str) -> str:
                buffer = outer.redact(self.held + text)
                keep = next(
                    (
                        n
                        for n in range(len(outer.SECRET) - 1, 0, -1)
                        if buffer.endswith(outer.SECRET[:n])
                    ),
                    0,
                )
                self.held = buffer[len(buffer) - keep :] if keep else ""
                return buffer[: len(buffer) - keep]

            def flush(self) -> str:
                rest, self.held = self.held, ""
                return outer.redact(rest)

        return Stream()


class MaskingInterceptor(Interceptor):
    def redaction(self) -> Any:
        return Masker()


async def test_redaction_reaches_the_journal_the_audit_trail_and_every_event() -> None:
    secret = Masker.SECRET
    turns = [{"name": "look", "arguments": {"what": secret}}, f"the word is {secret} indeed"]
    config = {
        "llm": {"provider": "scripted"},
        "agent": {"stream": True},
        "store": {"url": "memory://"},
    }
    a = KoboiAgent.from_dict(
        config,
        provider=ScriptedProvider.from_turns(turns),
        extra_tools=[look],
        interceptors=[MaskingInterceptor()],
    )
    async with a:
        shown = [e async for e in a.stream("tell me")]
        sid = shown[-1].result.session_id
        stored = json.dumps([e.data for e in await a.store.read(sid)])
        audit = json.dumps([e.data for e in await a.store.read_audit(sid)])
    assert secret not in stored and secret not in audit and "[MASKED]" in stored
    deltas = [e.text for e in shown if isinstance(e, TextDeltaEvent)]
    assert all(secret[:4] not in d for d in deltas)
    assert "".join(deltas) == "the word is [MASKED] indeed"
    final = shown[-1]
    assert isinstance(final, FinalEvent) and secret not in final.result.output
    assert secret not in repr(shown)


async def test_a_runs_result_masks_what_the_run_added_not_the_whole_session_again() -> None:
    """Messages restored from the journal were masked when they were journaled; the
    result of each run masks only the messages that run added, so the work does not
    grow with the session."""
    secret = Masker.SECRET
    masked: list[str] = []

    class Counting(Masker):
        def redact(self, text: str) -> str:
            masked.append(text)
            return super().redact(text)

    class CountingInterceptor(Interceptor):
        def redaction(self) -> Any:
            return Counting()

    turns = [f"answer {n} with {secret}" for n in range(12)]
    a = make(turns, interceptors=[CountingInterceptor()])
    async with a:
        first = await a.run(f"question 0 with {secret}")
        for n in range(1, 12):
            masked.clear()
            result = await a.run(f"question {n}", session_id=first.session_id)
        assert len(result.messages) == 24
        # The last run added two messages; the result masked those, not 24.
        finish_texts = [t for t in masked if t in (f"question {11}", f"answer 11 with {secret}")]
        assert finish_texts.count("answer 11 with " + secret) <= 3
        assert not any(t.startswith("question 0") for t in masked)
        # And the whole conversation it returns is masked all the same.
        assert all(secret not in m.content for m in result.messages)


# -- sub-agents -------------------------------------------------------------------------------


async def test_a_sub_agent_runs_under_the_parents_interceptors_and_approver() -> None:
    blocked: list[str] = []

    class NoNotesAboutProd(Interceptor):
        async def before_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
            if pending.call.arguments.get("text") == "prod":
                blocked.append(run.session_id)
                return Verdict("deny", "not about prod", stage="policy")
            return None

    @tool(risk="safe")
    async def delegate(task: str, ctx: ToolContext) -> str:
        """Ask a helper."""
        result = await ctx.run_subagent(task, tools=["note"], system_prompt="You are a helper.")
        return result.output

    turns = [
        {"name": "delegate", "arguments": {"task": "write it"}},
        {"name": "note", "arguments": {"text": "prod"}},
        {"name": "note", "arguments": {"text": "dev"}},
        "child done",
        "parent done",
    ]
    a = make(
        [],
        provider=InOrderModel(turns),
        tools=(delegate, note),
        approver=AllowAllApprover(),
        interceptors=[NoNotesAboutProd()],
    )
    async with a:
        result = await a.run("go")
        sessions = {s.id: s for s in await a.store.list_sessions()}
        (child_id,) = [sid for sid in sessions if sid != result.session_id]
        child = await a.store.read(child_id)
    assert blocked == [child_id]
    assert [e.data["content"] for e in child if e.type == "tool_call_finished"] == ["noted dev"]
    assert sessions[child_id].metadata["parent_session"] == result.session_id
    assert result.output == "parent done"
