"""Hook scripts written for the shared contract, in bash and Python, run unchanged.

Each script reads the event as JSON on stdin and answers by exit code and
stdout, knowing nothing of koboi. Every refusal has its control: the same path
goes through when the hook has nothing to object to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koboi import PluginHost

Ran = Any
Kit = Any

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def no_rm(kit: Kit) -> dict[str, Any]:
    return {
        "before_tool_call": [
            {"name": "no-rm", "matcher": "run_shell", "command": kit.script("block_rm.sh")}
        ]
    }


async def test_a_bash_hook_blocks_rm_rf_and_the_model_reads_why(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    turns = [
        kit.call("run_shell", command="rm -rf build"),
        kit.call("run_shell", command="ls build"),
        "done",
    ]
    agent, model = kit.make_agent(no_rm(kit), turns, ran, tmp_path)
    async with agent:
        result = await agent.run("clean up")
        events = await agent.store.read(result.session_id)
        audit = await agent.store.read_audit(result.session_id)
    assert ran.commands == ["ls build"]  # the refused call never ran; the control did
    refused = [e.data for e in events if e.type == "tool_call_refused"]
    assert refused[0]["stage"] == "hooks"
    assert "'rm -rf' is not allowed" in refused[0]["reason"]
    # The model read the hook's stderr as the call's error result.
    tool_results = [m for m in model.requests[1].messages if m.role == "tool"]
    assert "'rm -rf' is not allowed" in tool_results[-1].content
    decisions = kit.hook_events(events)
    assert [d["decision"] for d in decisions] == ["block", "none"]
    assert decisions[0]["exit_code"] == 2 and decisions[0]["effect"] == "refused the call"
    assert decisions[0]["tool"] == "run_shell" and decisions[0]["hook"] == "no-rm"
    hook_audit = [r.data for r in audit if r.data.get("action") == "hook"]
    assert [r["decision"] for r in hook_audit] == ["block", "none"]


async def test_the_matcher_leaves_other_tools_alone(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    turns = [kit.call("write_file", path="rm -rf", content="x"), "done"]
    agent, _ = kit.make_agent(no_rm(kit), turns, ran, tmp_path)
    async with agent:
        result = await agent.run("write")
        events = await agent.store.read(result.session_id)
    assert ran.writes == [("rm -rf", "x")]
    assert kit.hook_events(events) == []


async def test_a_python_hook_rewrites_a_path_and_the_rewrite_is_journaled(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    hooks = {
        "PreToolUse": [
            {
                "matcher": "write_file",
                "hooks": [{"type": "command", "command": kit.script("rewrite_path.py")}],
            }
        ]
    }
    turns = [
        kit.call("write_file", path="/etc/motd", content="hello"),
        kit.call("write_file", path="notes/ok.txt", content="kept"),
        "done",
    ]
    agent, _ = kit.make_agent(hooks, turns, ran, tmp_path)
    async with agent:
        result = await agent.run("write it")
        events = await agent.store.read(result.session_id)
    assert ran.writes == [("notes/motd", "hello"), ("notes/ok.txt", "kept")]
    started = [e.data for e in events if e.type == "tool_call_started"]
    assert started[0]["arguments"] == {"path": "notes/motd", "content": "hello"}
    assert started[0]["rewritten_by"] and "original_arguments_hash" in started[0]
    assert "rewritten_by" not in started[1]  # control: nothing to rewrite
    decisions = kit.hook_events(events)
    assert decisions[0]["updated_input"] == {"path": "notes/motd", "content": "hello"}
    assert decisions[0]["effect"] == "rewrote the arguments, allowed"


async def test_a_rewrite_that_does_not_validate_refuses_the_call(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    bad = ["/bin/sh", "-c", 'cat >/dev/null; echo \'{"updatedInput": {"path": 42}}\'']
    hooks = {"before_tool_call": [{"matcher": "write_file", "command": bad}]}
    turns = [kit.call("write_file", path="a.txt", content="x"), "done"]
    agent, _ = kit.make_agent(hooks, turns, ran, tmp_path)
    async with agent:
        result = await agent.run("write")
        events = await agent.store.read(result.session_id)
    assert ran.writes == []
    refused = [e.data for e in events if e.type == "tool_call_refused"]
    assert refused and "path" in refused[0]["reason"]


async def test_a_prompt_hook_adds_context_the_model_reads(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    hooks = {"user_prompt": [{"command": kit.script("prompt_context.sh")}]}
    agent, model = kit.make_agent(hooks, ["noted", "again"], ran, tmp_path)
    async with agent:
        first = await agent.run("When is the launch?")
        await agent.run("And the review?", session_id=first.session_id)
        events = await agent.store.read(first.session_id)
    contents = [m.content for m in model.requests[0].messages]
    assert "Team convention: dates are written YYYY-MM-DD." in contents
    added = [e.data for e in events if e.type == "context_added"]
    assert len(added) == 2 and added[0]["source"].startswith("hook:")
    assert [d["effect"] for d in kit.hook_events(events)] == ["added context", "added context"]


async def test_a_prompt_hook_that_blocks_refuses_the_run_before_any_model_call(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    blocker = ["/bin/sh", "-c", "cat >/dev/null; echo 'No prompts about passwords.' >&2; exit 2"]
    hooks = {"user_prompt": [{"command": blocker}]}
    agent, model = kit.make_agent(hooks, ["never"], ran, tmp_path)
    async with agent:
        result = await agent.run("what is the root password?")
    assert result.outcome == "refused" and result.refused_by == "hooks"
    assert result.error == "No prompts about passwords."
    assert model.requests == []


async def test_a_stop_hook_asks_the_agent_to_continue_once(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    hooks = {"Stop": [{"hooks": [{"type": "command", "command": kit.script("stop_once.py")}]}]}
    agent, model = kit.make_agent(hooks, ["first answer", "checked answer"], ran, tmp_path)
    async with agent:
        result = await agent.run("answer")
        events = await agent.store.read(result.session_id)
    assert result.output == "checked answer"
    assert len(model.requests) == 2
    assert model.requests[1].messages[-1].content == "Check your answer once more before finishing."
    continued = [e.data for e in events if e.type == "run_continued"]
    assert len(continued) == 1 and continued[0]["by"] == "hooks"
    assert [d["effect"] for d in kit.hook_events(events)] == ["continued the run", "none"]


async def test_a_hook_asks_for_approval_and_the_approver_decides(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    from koboi.approval import DenyAllApprover

    asker = [
        "/bin/sh",
        "-c",
        'cat >/dev/null; echo \'{"hookSpecificOutput": {"permissionDecision": "ask", '
        '"permissionDecisionReason": "deploys need a human"}}\'',
    ]
    hooks = {"before_tool_call": [{"matcher": "run_shell", "command": asker}]}
    turns = [kit.call("run_shell", command="make deploy"), "done"]
    agent, _ = kit.make_agent(hooks, turns, ran, tmp_path, approver=DenyAllApprover())
    async with agent:
        result = await agent.run("deploy")
        events = await agent.store.read(result.session_id)
    assert ran.commands == []
    requested = [e.data for e in events if e.type == "approval_requested"]
    assert requested and "deploys need a human" in requested[0]["reason"]
    # Control: the same hook with an approver that approves lets the call run.
    agent, _ = kit.make_agent(hooks, turns, ran, tmp_path)
    async with agent:
        await agent.run("deploy")
    assert ran.commands == ["make deploy"]


async def test_after_tool_call_hooks_add_context_or_withhold_the_result(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    withhold = [
        "/bin/sh",
        "-c",
        'input=$(cat); case "$input" in *SECRET*) '
        'echo \'{"decision": "block", "reason": "the output holds a secret"}\';; '
        '*) echo \'{"additionalContext": "output checked"}\';; esac',
    ]
    hooks = {"after_tool_call": [{"matcher": "run_shell", "command": withhold}]}
    turns = [
        kit.call("run_shell", command="echo SECRET"),
        kit.call("run_shell", command="echo fine"),
        "done",
    ]
    agent, model = kit.make_agent(hooks, turns, ran, tmp_path)
    async with agent:
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    finished = [e.data for e in events if e.type == "tool_call_finished"]
    assert "withheld: the output holds a secret" in finished[0]["content"]
    assert "SECRET" not in finished[0]["content"] and finished[0]["is_error"]
    assert finished[1]["content"] == "ran: echo fine"  # control
    assert "output checked" in [m.content for m in model.requests[2].messages]


async def test_session_start_runs_once_per_session_and_run_end_after_every_run(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    log = tmp_path / "work" / "log.txt"
    append = f"cat >> {log}; echo >> {log}"
    hooks = {
        "session_start": [{"command": ["/bin/sh", "-c", f"{append}; echo 'session notes'"]}],
        "run_end": [{"command": ["/bin/sh", "-c", append]}],
    }
    agent, model = kit.make_agent(hooks, ["one", "two", "three"], ran, tmp_path)
    async with agent:
        first = await agent.run("a")
        await agent.run("b", session_id=first.session_id)
        other = await agent.run("c")
        events = await agent.store.read(first.session_id)
    lines = [line for line in log.read_text().splitlines() if line]
    kinds = [line.split('"hook_event_name": "')[1].split('"')[0] for line in lines]
    assert kinds == ["SessionStart", "SessionEnd", "SessionEnd", "SessionStart", "SessionEnd"]
    assert '"outcome": "completed"' in lines[1]
    assert "session notes" in [m.content for m in model.requests[0].messages]
    assert "session notes" in [m.content for m in model.requests[1].messages]  # kept
    assert other.session_id != first.session_id
    # run_end's outcome is journaled after run_finished, and a later run folds fine.
    types = [e.type for e in events]
    assert types.count("run_finished") == 2 and types[-1] == "hooks.ran"


async def test_a_stop_hook_that_never_lets_go_is_bounded_by_max_continuations(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    nagging = ["/bin/sh", "-c", 'cat >/dev/null; echo \'{"decision": "block", "reason": "more"}\'']
    hooks = {"before_finish": [{"command": nagging}]}
    agent, model = kit.make_agent(
        hooks,
        ["a", "b", "c"],
        ran,
        tmp_path,
        extra={"agent": {"stream": False, "max_continuations": 2}},
    )
    async with agent:
        result = await agent.run("q")
        events = await agent.store.read(result.session_id)
    assert result.output == "c" and len(model.requests) == 3
    effects = [d["effect"] for d in kit.hook_events(events)]
    assert effects == [
        "continued the run",
        "continued the run",
        "asked to continue; refused (agent.max_continuations)",
    ]
