"""koboi-agent's top-level guardrails, rate_limit and policy: accepted and enforced.

They are aliases of the governance section (docs/governance.md, "koboi-agent's
spellings"); these tests run agents configured only in that spelling.
"""

from __future__ import annotations

from typing import Any

import pytest

from koboi import journal as J
from koboi.errors import ConfigError

pytestmark = pytest.mark.anyio


def _refused(events: list[Any]) -> list[str]:
    return [e.data.get("stage", "") for e in events if e.type == J.TOOL_CALL_REFUSED]


async def test_the_readme_guardrails_refuse_a_long_message(make_agent: Any) -> None:
    extra = {"guardrails": {"input": {"max_length": 20, "custom_patterns": ["launch code"]}}}
    for message, why in (
        ("a message that is far too long", "more than the 20 allowed"),
        ("launch code", "matches a denied pattern"),
    ):
        async with make_agent([], extra=extra) as agent:
            result = await agent.run(message)
        assert result.outcome == "refused" and result.refused_by == "guardrails"
        assert why in (result.error or "")
    async with make_agent(["fine"], extra=extra) as agent:
        assert (await agent.run("hello")).output == "fine"


async def test_the_readme_rate_limit_applies_to_every_tool(make_agent: Any, turn: Any) -> None:
    script = [turn("look", {"what": "a"}, "c1"), turn("look", {"what": "b"}, "c2"), "done"]
    async with make_agent(script, extra={"rate_limit": {"max_calls_per_session": 1}}) as agent:
        result = await agent.run("look twice")
        events = await agent.store.read(result.session_id)
    assert _refused(events) == ["rate_limit"]


async def test_a_confirm_rule_asks_and_deny_refuses(make_agent: Any, turn: Any) -> None:
    policy = {
        "rules": [
            {"tool": "look", "action": "confirm"},
            {"tool": "wipe", "action": "deny", "argument_patterns": {"target": "/etc/*"}},
        ]
    }
    script = [turn("look", {"what": "a"}, "c1"), turn("wipe", {"target": "/etc/x"}, "c2"), "done"]
    async with make_agent(script, extra={"policy": policy}) as agent:
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    # No approver: the asked call is refused at approval; the denied one by policy.
    assert _refused(events) == ["approval", "policy"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"guardrails": {"input": {"deflection_text": "no"}}}, "input.deflection_text"),
        ({"guardrails": {"approval": {"handler": "cli"}}}, "guardrails.approval"),
        ({"rate_limit": {"rate_window_seconds": 10}}, "rate_limit.rate_window_seconds"),
        ({"policy": {"rules": [{"tool": "x", "action": "maybe"}]}}, "is not allow, confirm"),
    ],
)
def test_keys_without_a_counterpart_say_what_to_write(
    make_agent: Any, extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        make_agent([], extra=extra)
    assert any(message in p.message for p in info.value.problems), info.value.problems


def test_set_both_ways_differently_is_refused(make_agent: Any) -> None:
    with pytest.raises(ConfigError, match=r"governance\.guardrails\.input\.max_chars"):
        make_agent(
            [],
            governance={"guardrails": {"input": {"max_chars": 5}}},
            extra={"guardrails": {"input": {"max_length": 10}}},
        )
