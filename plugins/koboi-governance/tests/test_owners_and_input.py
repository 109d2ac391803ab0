"""Trust rules belong to whoever made them, and the input guardrail refuses a run before it
begins (through the kernel's on_run_start)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koboi import journal as J
from koboi.approval import ApprovalDecision, ApprovalRequest, CallbackApprover
from koboi_governance.trust import TrustBook

pytestmark = pytest.mark.anyio


def always(request: ApprovalRequest) -> ApprovalDecision:
    return ApprovalDecision(approved=True, scope="always", decided_by="tester")


async def run_as(agent: Any, owner: str | None, session_id: str) -> list[Any]:
    async with agent:
        await agent.store.create_session(session_id, owner=owner)
        await agent.run("go", session_id=session_id)
        return list(await agent.store.read(session_id))


def refused(events: list[Any]) -> list[str]:
    return [e.data["stage"] for e in events if e.type == J.TOOL_CALL_REFUSED]


async def test_one_principals_always_never_lets_anothers_call_through(
    make_agent: Any, turn: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'koboi.db'}"
    script = [turn("note", {"text": "x"}), "done"]
    # Alice approves "always".
    alice = await run_as(
        make_agent(script, store_url=url, approver=CallbackApprover(always)), "alice", "a1"
    )
    assert not refused(alice)
    # Bob's identical call, with nobody to approve it: asked, so denied by default.
    bob = await run_as(make_agent(script, store_url=url), "bob", "b1")
    assert refused(bob) == ["approval"]
    # A command-line run (no owner) is not Alice either.
    cli = await run_as(make_agent(script, store_url=url), None, "c1")
    assert refused(cli) == ["approval"]
    # Positive control: Alice's next identical call runs without asking.
    again = await run_as(make_agent(script, store_url=url), "alice", "a2")
    assert not refused(again)
    assert not any(e.type == J.APPROVAL_REQUESTED for e in again)
    async with make_agent(["unused"], store_url=url) as agent:
        (rule,) = await TrustBook(agent.store).rules()
    assert (rule.owner, rule.agent) == ("alice", "governed")


async def test_a_rule_for_one_agent_does_not_serve_another(
    make_agent: Any, turn: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'koboi.db'}"
    async with make_agent(["unused"], store_url=url) as agent:
        await TrustBook(agent.store).add(
            "note", arguments={"text": "x"}, ttl_seconds=60, created_by="t", agent="other-agent"
        )
        await TrustBook(agent.store).add(
            "note", arguments={"text": "y"}, ttl_seconds=60, created_by="t", agent=None
        )
    script = [turn("note", {"text": "x"}), "done"]
    assert refused(await run_as(make_agent(script, store_url=url), None, "s1")) == ["approval"]
    # Control: a rule of any agent (agent None) of the same owner applies.
    script_y = [turn("note", {"text": "y"}), "done"]
    assert refused(await run_as(make_agent(script_y, store_url=url), None, "s2")) == []


async def test_the_input_guardrail_refuses_the_run_before_any_model_call(make_agent: Any) -> None:
    governance = {"guardrails": {"input": {"max_chars": 20, "deny_patterns": ["launch code"]}}}
    for message, why in (
        ("a message that is far too long", "more than the 20 allowed"),
        ("launch code", "matches a denied pattern"),
    ):
        agent = make_agent([], governance=governance)  # the model would fail if asked
        async with agent:
            result = await agent.run(message)
            events = await agent.store.read(result.session_id)
        assert result.outcome == "refused" and result.refused_by == "guardrails"
        assert why in (result.error or "")
        assert [e.type for e in events] == [J.RUN_STARTED, J.RUN_FINISHED]
    # Control: a short, allowed message reaches the model.
    agent = make_agent(["fine"], governance=governance)
    async with agent:
        result = await agent.run("hello")
    assert result.outcome == "completed" and result.output == "fine"
