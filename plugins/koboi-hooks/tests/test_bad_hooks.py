"""Bad hooks: one that sleeps past its timeout, one that exits 1, one that prints invalid
JSON, one that reaches for a secret of koboi's environment. Each is a clear, journaled
error, handled by the failure rule (closed by default for before_tool_call), with
its control: the same hook under ``on_error: open`` lets the call run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from koboi import PluginHost

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

Ran = Any
Kit = Any


async def _guarded_call(
    kit: Kit, ran: Ran, tmp_path: Path, name: str, **hook: Any
) -> tuple[Any, list[Any], list[Any]]:
    hooks = {"before_tool_call": [{"matcher": "run_shell", "command": kit.script(name), **hook}]}
    turns = [kit.call("run_shell", command="ls"), "done"]
    agent, _ = kit.make_agent(hooks, turns, ran, tmp_path)
    async with agent:
        result = await agent.run("list")
        events = await agent.store.read(result.session_id)
        audit = await agent.store.read_audit(result.session_id)
    return result, events, audit


@pytest.mark.parametrize(
    ("name", "hook", "error"),
    [
        ("sleep_long.sh", {"timeout": 0.5}, "timed out after 0.5 s (killed)"),
        ("exit_one.sh", {}, "exited with code 1: Traceback: something broke"),
        ("bad_json.sh", {}, "printed invalid JSON"),
    ],
)
async def test_a_failing_before_tool_call_hook_fails_closed_by_default(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit, name: str, hook: Any, error: str
) -> None:
    started = time.monotonic()
    _, events, audit = await _guarded_call(kit, ran, tmp_path, name, **hook)
    assert time.monotonic() - started < 10  # the sleeper was killed, not waited for
    assert ran.commands == []
    refused = [e.data for e in events if e.type == "tool_call_refused"]
    assert refused[0]["stage"] == "hooks"
    assert error in refused[0]["reason"] and "on_error: closed" in refused[0]["reason"]
    decision = kit.hook_events(events)[0]
    assert decision["decision"] == "error" and error in decision["error"]
    assert decision["effect"] == "failed closed: refused the call"
    audited = [r.data for r in audit if r.data.get("action") == "hook"]
    assert audited[0]["decision"] == "error" and error in audited[0]["error"]


@pytest.mark.parametrize(
    ("name", "hook"),
    [("sleep_long.sh", {"timeout": 0.5}), ("exit_one.sh", {}), ("bad_json.sh", {})],
)
async def test_the_same_failure_fails_open_when_configured(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit, name: str, hook: Any
) -> None:
    _, events, _ = await _guarded_call(kit, ran, tmp_path, name, on_error="open", **hook)
    assert ran.commands == ["ls"]  # control: the call ran
    decision = kit.hook_events(events)[0]
    assert decision["decision"] == "error" and decision["effect"] == "failed open: ignored"


async def test_the_section_sets_the_rule_per_event(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    hooks = {
        "on_error": {"user_prompt": "closed"},
        "user_prompt": [{"command": kit.script("exit_one.sh")}],
    }
    agent, model = kit.make_agent(hooks, ["never"], ran, tmp_path)
    async with agent:
        result = await agent.run("hi")
    assert result.outcome == "refused" and "exited with code 1" in (result.error or "")
    assert model.requests == []
    # Default for user_prompt is open: the run goes on.
    agent, model = kit.make_agent({"user_prompt": hooks["user_prompt"]}, ["ok"], ran, tmp_path)
    async with agent:
        result = await agent.run("hi")
    assert result.output == "ok"


async def test_text_where_a_json_object_is_expected_is_an_error(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    chatty = ["/bin/sh", "-c", "cat >/dev/null; echo looks fine to me"]
    hooks = {"before_tool_call": [{"command": chatty}]}
    agent, _ = kit.make_agent(hooks, [kit.call("run_shell", command="ls"), "done"], ran, tmp_path)
    async with agent:
        result = await agent.run("list")
        events = await agent.store.read(result.session_id)
    assert ran.commands == []
    assert "not a JSON object" in kit.hook_events(events)[0]["error"]


async def test_a_hook_cannot_read_koboi_s_secrets_only_what_it_is_given(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-" + "k" * 40)
    monkeypatch.setenv("HOOK_VISIBLE", "shared-value")
    reader = kit.script("read_secret.sh")
    hooks = {"user_prompt": [{"command": reader}]}
    agent, model = kit.make_agent(hooks, ["ok"], ran, tmp_path)
    async with agent:
        await agent.run("hi")
    context = [m.content for m in model.requests[0].messages if "key=" in m.content]
    assert context == ["key=[] visible=[]"]  # a clean environment: neither variable
    # Control: a variable the hook is given by name arrives.
    hooks = {"user_prompt": [{"command": reader, "env": ["HOOK_VISIBLE"]}]}
    agent, model = kit.make_agent(hooks, ["ok"], ran, tmp_path)
    async with agent:
        await agent.run("hi")
    context = [m.content for m in model.requests[0].messages if "key=" in m.content]
    assert context == ["key=[] visible=[shared-value]"]


async def test_a_failing_stop_hook_closed_replaces_the_answer_with_a_notice(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    hooks = {"before_finish": [{"command": kit.script("exit_one.sh"), "on_error": "closed"}]}
    agent, _ = kit.make_agent(hooks, ["the answer"], ran, tmp_path)
    async with agent:
        result = await agent.run("q")
        events = await agent.store.read(result.session_id)
    assert result.output.startswith("The answer was withheld: hook")
    assert any(e.type == "answer_replaced" for e in events)
