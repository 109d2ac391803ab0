"""The decision pipeline on real runs: lookup, arguments, policy, approvals, trust, rate limits,
sub-agents. Every refusal has a control in which the same call goes through."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from koboi import (
    AllowAllApprover,
    ApprovalDecision,
    ApprovalRequest,
    CallbackApprover,
    KoboiAgent,
    Risk,
    ToolContext,
    tool,
)
from koboi.approval import arguments_hash
from koboi_governance.trust import TrustBook

pytestmark = pytest.mark.anyio


def _refusals(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.data["stage"], e.data["reason"]) for e in events if e.type == "tool_call_refused"]


def _finished(events: list[Any]) -> list[str]:
    return [e.data["content"] for e in events if e.type == "tool_call_finished"]


async def _run(agent: KoboiAgent, message: str = "go", **kwargs: Any) -> tuple[Any, list[Any]]:
    async with agent:
        result = await agent.run(message, **kwargs)
        return result, list(await agent.store.read(result.session_id))


# -- exact lookup ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "alias",
    [
        "Note",  # case
        "note ",  # trailing space
        " note",
        "n\u043ete",  # Cyrillic o
        "\uff4eote",  # fullwidth n
        "note\u200b",  # zero-width space
        "no\u0074e\u0301",  # combining accent
    ],
)
async def test_a_tool_name_that_only_looks_like_a_tool_is_refused(
    make_agent: Any, turn: Any, alias: str
) -> None:
    _, events = await _run(
        make_agent([turn(alias, {"text": "x"}), "done"], approver=AllowAllApprover())
    )
    assert [stage for stage, _ in _refusals(events)] == ["lookup"]
    assert _finished(events) == []
    # Control: the exact name runs.
    _, events = await _run(
        make_agent([turn("note", {"text": "x"}), "done"], approver=AllowAllApprover())
    )
    assert _finished(events) == ["noted x"]


# -- strict arguments --------------------------------------------------------------------


async def test_unknown_and_oversized_arguments_are_refused(make_agent: Any, turn: Any) -> None:
    _, events = await _run(make_agent([turn("look", {"what": "x", "extra": 1}), "done"]))
    assert [stage for stage, _ in _refusals(events)] == ["arguments"]
    big = "x" * 300_000
    _, events = await _run(make_agent([turn("look", {"what": big}), "done"]))
    ((stage, reason),) = _refusals(events)
    assert stage == "arguments" and "tools.max_argument_bytes" in reason
    _, events = await _run(make_agent([turn("look", {"what": "x"}), "done"]))
    assert _finished(events) == ["looked at x"]


async def test_duplicate_json_keys_from_a_real_provider_are_refused(tmp_path: Path) -> None:
    from koboi_testing.wire import Reply, WireServer

    def completion(arguments: str) -> dict[str, Any]:
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "look", "arguments": arguments},
        }
        return {
            "id": "x",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                    "finish_reason": "tool_calls",
                }
            ],
        }

    done = {
        "id": "y",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
    }

    @tool(name="look", risk=Risk.SAFE)
    def look(what: str) -> str:
        """Look."""
        return f"looked at {what}"

    async def run(arguments: str) -> list[Any]:
        with WireServer() as server:
            server.push(Reply.json(completion(arguments)), Reply.json(done))
            config = {
                "llm": {
                    "provider": "openai",
                    "model": "m",
                    "base_url": server.url + "/v1",
                    "api_key": "test-key-not-real-0001",
                },
                "agent": {"stream": False},
                "store": {"url": "memory://"},
            }
            agent = KoboiAgent.from_dict(config, base_dir=tmp_path, extra_tools=[look])
            _, events = await _run(agent)
            return events

    events = await run('{"what": "notes.txt", "what": "/etc/passwd"}')
    ((stage, reason),) = _refusals(events)
    assert stage == "arguments" and "'what' appears more than once" in reason
    assert _finished(events) == []
    # Control: the same call with the key once runs.
    assert _finished(await run('{"what": "notes.txt"}')) == ["looked at notes.txt"]


# -- approvals: deny by default, bound to the request ----------------------------------


async def test_without_an_approver_a_call_that_needs_one_is_denied(
    make_agent: Any, turn: Any
) -> None:
    result, events = await _run(make_agent([turn("note", {"text": "x"}), "done"]))
    ((stage, reason),) = _refusals(events)
    assert stage == "approval" and "denied by default" in reason
    assert "denied by default" in result.messages[2].content  # the model is told


async def test_an_autonomous_run_denies_by_default(
    make_agent: Any, turn: Any, demo_tools: dict[str, Any]
) -> None:
    # What a background job is: nobody can approve. (No destructive tool: the unattended-destruction rule would
    # refuse the run before it starts with the passthrough sandbox.)
    tools = [demo_tools["note"], demo_tools["look"]]
    _, events = await _run(
        make_agent([turn("note", {"text": "x"}), "done"], autonomous=True, tools=tools)
    )
    assert [stage for stage, _ in _refusals(events)] == ["approval"]
    _, events = await _run(
        make_agent([turn("look", {"what": "x"}), "done"], autonomous=True, tools=tools)
    )
    assert _finished(events) == ["looked at x"]


@pytest.mark.parametrize("field", ["session_id", "arguments_hash", "approval_id"])
async def test_an_approval_given_for_something_else_is_refused(
    make_agent: Any, turn: Any, field: str
) -> None:
    seen: list[ApprovalRequest] = []

    def replayed(request: ApprovalRequest) -> ApprovalDecision:
        seen.append(request)
        other = {
            "session_id": "another-session",
            "arguments_hash": arguments_hash({"text": "something else"}),
            "approval_id": "ap_from_another_call",
        }
        return ApprovalDecision(approved=True, decided_by="replayer", **{field: other[field]})

    _, events = await _run(
        make_agent([turn("note", {"text": "x"}), "done"], approver=CallbackApprover(replayed))
    )
    ((stage, reason),) = _refusals(events)
    assert stage == "approval" and "given for another" in reason
    assert _finished(events) == []

    def bound(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(
            approved=True,
            session_id=request.session_id,
            arguments_hash=request.arguments_hash,
            approval_id=request.approval_id,
        )

    _, events = await _run(
        make_agent([turn("note", {"text": "x"}), "done"], approver=CallbackApprover(bound))
    )
    assert _finished(events) == ["noted x"]


async def test_an_approval_is_single_use(make_agent: Any, turn: Any) -> None:
    answers = iter([True, False])
    asked: list[str] = []

    def once(request: ApprovalRequest) -> bool:
        asked.append(request.approval_id)
        return next(answers)

    script = [turn("note", {"text": "x"}, "c1"), turn("note", {"text": "x"}, "c2"), "done"]
    _, events = await _run(make_agent(script, approver=CallbackApprover(once)))
    assert _finished(events) == ["noted x"]
    assert [stage for stage, _ in _refusals(events)] == ["approval"]
    assert len(asked) == 2 and asked[0] != asked[1]


async def test_no_decision_before_the_deadline_is_a_no(make_agent: Any, turn: Any) -> None:
    import anyio

    async def never(request: ApprovalRequest) -> bool:
        await anyio.sleep(30)
        return True

    agent = make_agent(
        [turn("note", {"text": "x"}), "done"],
        approver=CallbackApprover(never),
        extra={"agent": {"mode": "act", "approval_timeout_seconds": 0.2}},
    )
    _, events = await _run(agent)
    ((stage, reason),) = _refusals(events)
    assert stage == "approval" and "agent.approval_timeout_seconds" in reason


# -- trust --------------------------------------------------------------------------------


async def test_always_becomes_a_trust_rule_for_the_same_arguments_only(
    make_agent: Any, turn: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'koboi.db'}"

    def always(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True, scope="always", decided_by="tester")

    _, events = await _run(
        make_agent(
            [turn("note", {"text": "x"}), "done"], store_url=url, approver=CallbackApprover(always)
        )
    )
    assert _finished(events) == ["noted x"]
    # Another session, no approver at all: the rule lets the same call through...
    _, events = await _run(make_agent([turn("note", {"text": "x"}), "done"], store_url=url))
    assert _finished(events) == ["noted x"]
    assert not any(e.type == "approval_requested" for e in events)
    # ...but not the same tool with other arguments.
    _, events = await _run(make_agent([turn("note", {"text": "y"}), "done"], store_url=url))
    assert [stage for stage, _ in _refusals(events)] == ["approval"]

    # Revoked: asked (and denied by default) again.
    async with make_agent(["unused"], store_url=url) as agent:
        book = TrustBook(agent.store)
        (rule,) = await book.rules()
        assert rule.tool == "note" and rule.created_by == "tester"
        assert await book.revoke(rule.id)
    _, events = await _run(make_agent([turn("note", {"text": "x"}), "done"], store_url=url))
    assert [stage for stage, _ in _refusals(events)] == ["approval"]


async def test_a_trust_rule_never_overrides_a_deny(make_agent: Any, turn: Any) -> None:
    governance = {"policy": {"rules": [{"tool": "note", "args": {"text": "x"}, "action": "deny"}]}}
    agent = make_agent([turn("note", {"text": "x"}), "done"], governance=governance)
    async with agent:
        await TrustBook(agent.store).add(
            "note", arguments={"text": "x"}, ttl_seconds=60, created_by="test"
        )
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    assert [stage for stage, _ in _refusals(events)] == ["policy"]


# -- policy: shell commands judged segment by segment, end to end ---------------------------


async def test_a_smuggled_shell_command_is_refused_by_policy(
    make_agent: Any, turn: Any, tmp_path: Path
) -> None:
    governance = {
        "policy": {
            "rules": [
                {"tool": "run_shell", "command": ["ls*", "echo *", "true"], "action": "allow"},
                {"tool": "run_shell", "command": "rm *", "action": "deny", "reason": "no deleting"},
            ]
        }
    }
    extra = {
        "tools": {"builtin": ["run_shell"]},
        "sandbox": {"backend": "restricted", "workdir": str(tmp_path / "w")},
    }
    (tmp_path / "w").mkdir()

    async def shell(command: str) -> tuple[list[tuple[str, str]], list[str]]:
        _, events = await _run(
            make_agent(
                [turn("run_shell", {"command": command}), "done"],
                governance=governance,
                extra=extra,
                tools=[],
            )
        )
        return _refusals(events), _finished(events)

    chained = " && ".join(["true"] * 60) + " && rm -rf x"
    for smuggled in (
        "ls && rm -rf x",
        "echo $(rm -rf x)",
        "echo `rm -rf x`",
        "ls\nrm -rf x",
        chained,
        "find . -exec rm {} \\;",
    ):
        refusals, finished = await shell(smuggled)
        assert [stage for stage, _ in refusals] == ["policy"], smuggled
        assert finished == []
    # Control: an allowed command runs without asking (no approver is configured).
    refusals, finished = await shell("echo hello && ls")
    assert refusals == [] and len(finished) == 1 and "hello" in finished[0]


# -- rate limits --------------------------------------------------------------------------


async def test_a_rate_limit_survives_a_restart(
    make_agent: Any, turn: Any, tmp_path: Path, in_order: Any
) -> None:
    url = f"sqlite:///{tmp_path / 'koboi.db'}"
    governance = {"rate_limits": {"look": {"per_session": 2}}}
    script = [turn("look", {"what": "1"}, "c1"), turn("look", {"what": "2"}, "c2"), "done"]
    first, events = await _run(make_agent(script, store_url=url, governance=governance))
    assert _finished(events) == ["looked at 1", "looked at 2"]
    # A new agent and a new store object on the same database: the count is still there.
    later = [{"name": "look", "arguments": {"what": "3"}}, "done"]
    _, events = await _run(
        make_agent([], store_url=url, governance=governance, provider=in_order(later)),
        session_id=first.session_id,
    )
    ((stage, reason),) = _refusals(events)[-1:]
    assert stage == "rate_limit" and "governance.rate_limits.look.per_session" in reason
    # Control: another session has its own allowance.
    _, events = await _run(
        make_agent([], store_url=url, governance=governance, provider=in_order(later))
    )
    assert _finished(events) == ["looked at 3"]


async def test_a_refused_call_does_not_use_up_the_allowance(make_agent: Any, turn: Any) -> None:
    governance = {"rate_limits": {"*": {"per_minute": 1}}}
    script = [
        turn("look", {"what": "1"}, "c1"),
        turn("look", {"what": "2"}, "c2"),
        turn("look", {"what": "3"}, "c3"),
        "done",
    ]
    _, events = await _run(make_agent(script, governance=governance))
    assert _finished(events) == ["looked at 1"]
    assert [stage for stage, _ in _refusals(events)] == ["rate_limit", "rate_limit"]


# -- sub-agents -------------------------------------------------------------------------------


async def test_a_sub_agent_inherits_the_pipeline(make_agent: Any, in_order: Any) -> None:
    @tool(name="delegate", risk=Risk.SAFE)
    async def delegate(task: str, ctx: ToolContext) -> str:
        """Hand a task to a sub-agent."""
        result = await ctx.run_subagent(task, tools=["wipe", "look"])
        return f"{result.outcome}: {result.output}"

    @tool(name="wipe", risk=Risk.DESTRUCTIVE)
    def wipe(target: str) -> str:
        """Delete."""
        return f"wiped {target}"

    @tool(name="look", risk=Risk.SAFE)
    def look(what: str) -> str:
        """Look."""
        return f"looked at {what}"

    async def run(approver: Any = None) -> tuple[list[Any], list[Any]]:
        # The parent delegates; the child (same scripted model, next turns) tries to wipe.
        provider = in_order(
            [
                {"name": "delegate", "arguments": {"task": "clean up"}},
                {"name": "wipe", "arguments": {"target": "prod"}},
                "child done",
                "parent done",
            ]
        )
        kwargs = {"approver": approver} if approver else {}
        agent = make_agent([], tools=[delegate, wipe, look], provider=provider, **kwargs)
        async with agent:
            result = await agent.run("go")
            parent = list(await agent.store.read(result.session_id))
            sessions = await agent.store.list_sessions()
            (child_info,) = [s for s in sessions if s.id != result.session_id]
            assert child_info.metadata["parent_session"] == result.session_id
            child = list(await agent.store.read(child_info.id))
        return parent, child

    parent, child = await run()
    assert [stage for stage, _ in _refusals(child)] == ["approval"]
    assert _finished(child) == []
    assert any("child done" in c for c in _finished(parent))
    # Control: with an approver that says yes, the child's call runs.
    _, child = await run(AllowAllApprover())
    assert _finished(child) == ["wiped prod"]


async def test_a_sub_agent_gets_no_tool_its_parent_lacks(make_agent: Any, turn: Any) -> None:
    @tool(name="delegate", risk=Risk.SAFE)
    async def delegate(ctx: ToolContext) -> str:
        """Hand a task to a sub-agent."""
        await ctx.run_subagent("x", tools=["format_disk"])
        return "unreachable"

    _, events = await _run(make_agent([turn("delegate"), "done"], tools=[delegate]))
    (content,) = _finished(events)
    assert "may only use its parent's tools" in content and "format_disk" in content


async def test_a_sub_agent_in_chat_mode_is_refused_by_the_mode(
    make_agent: Any, in_order: Any
) -> None:
    @tool(name="delegate", risk=Risk.SAFE)
    async def delegate(ctx: ToolContext) -> str:
        """Hand a task to a sub-agent."""
        result = await ctx.run_subagent("x")
        return result.output

    @tool(name="wipe", risk=Risk.DESTRUCTIVE)
    def wipe(target: str) -> str:
        """Delete."""
        return "wiped"

    provider = in_order(
        [
            {"name": "delegate", "arguments": {}},
            {"name": "wipe", "arguments": {"target": "x"}},
            "child",
            "parent",
        ]
    )
    agent = make_agent(
        [], mode="chat", tools=[delegate, wipe], provider=provider, approver=AllowAllApprover()
    )
    async with agent:
        result = await agent.run("go")
        sessions = await agent.store.list_sessions()
        (child,) = [s for s in sessions if s.id != result.session_id]
        events = list(await agent.store.read(child.id))
    assert [stage for stage, _ in _refusals(events)] == ["mode"]


@pytest.mark.slow  # a real process: runs in this member's own session
def test_koboi_run_without_a_terminal_denies(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "agent.yaml"
    config.write_text(
        "agent: {mode: act}\n"
        "llm: {provider: scripted, script: [{tool_calls: [{name: write_file, arguments: {path: a.txt, content: hi}}]}, done]}\n"
        "tools: {builtin: [write_file]}\n"
        f"store: {{url: 'sqlite:///{tmp_path / 'k.db'}'}}\n"
        f"sandbox: {{backend: restricted, workdir: '{tmp_path / 'w'}'}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "koboi_cli", "run", str(config), "-m", "go", "--json"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(done.stdout)["outcome"] == "completed"
    with closing(sqlite3.connect(tmp_path / "k.db")) as db, db:
        refused = [
            json.loads(row[0])
            for row in db.execute("SELECT data FROM events WHERE type = 'tool_call_refused'")
        ]
    assert [(r["stage"], "denied by default" in r["reason"]) for r in refused] == [
        ("approval", True)
    ]
    assert not list((tmp_path / "w").rglob("a.txt"))
    # Control: --yes approves, and the file is written.
    done = subprocess.run(
        [sys.executable, "-m", "koboi_cli", "run", str(config), "-m", "go", "--json", "--yes"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert [p.read_text() for p in (tmp_path / "w").rglob("a.txt")] == ["hi"]
