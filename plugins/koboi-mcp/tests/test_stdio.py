"""koboi against a server written with the MCP SDK's own high-level API, over stdio.

The server (``examples/mcp/notes_server.py``) is a separate process started in the
agent's sandbox; what it really ran is read from its own log (``calls.log``), so
"did not run" is checked where the effect would be, not in koboi's word for it.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from koboi import KoboiAgent
from koboi import journal as J
from koboi.approval import AllowAllApprover
from koboi.events import FinalEvent, PluginEvent

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def test_a_servers_tools_are_governed_journaled_and_audited(tmp_path: Path, kit: Any) -> None:
    config = kit.agent_config(
        tmp_path,
        {"notes": kit.notes_server(tmp_path)},
        script=[_call("notes__add_note", text="milk"), _call("notes__list_notes"), "done"],
    )
    async with KoboiAgent.from_dict(config, approver=AllowAllApprover()) as agent:
        tools = agent.tools
        result = await agent.run("note milk, then list")
        events = await agent.store.read(result.session_id)
        audit = await agent.store.read_audit(result.session_id)
    # Risk and idempotency from the annotations.
    assert tools["notes__list_notes"].risk.value == "safe" and tools["notes__list_notes"].idempotent
    assert tools["notes__add_note"].risk.value == "moderate"
    assert not tools["notes__add_note"].idempotent
    assert tools["notes__delete_notes"].risk.value == "destructive"
    # The server's own schema is what the model is offered.
    assert tools["notes__add_note"].spec().parameters["properties"]["text"]["type"] == "string"
    assert result.outcome == "completed"
    started = [e.data for e in events if e.type == J.TOOL_CALL_STARTED]
    assert [(s["name"], s["idempotent"]) for s in started] == [
        ("notes__add_note", False),
        ("notes__list_notes", True),
    ]
    finished = [e.data["content"] for e in events if e.type == J.TOOL_CALL_FINISHED]
    assert finished == ["noted (1 notes)", "milk"]
    # The moderate call was approved first (the pipeline ran), and audited before and after.
    assert any(e.type == J.APPROVAL_DECIDED and e.data["approved"] for e in events)
    phases = [(a.data.get("tool"), a.data.get("phase")) for a in audit]
    assert ("notes__add_note", "before") in phases and ("notes__add_note", "after") in phases
    assert kit.calls(tmp_path) == ["add_note", "list_notes"]


async def test_progress_and_log_messages_stream_as_plugin_events(tmp_path: Path, kit: Any) -> None:
    config = kit.agent_config(
        tmp_path,
        {"notes": kit.notes_server(tmp_path)},
        script=[_call("notes__count_slowly", n=3), "done"],
    )
    seen: list[PluginEvent] = []
    async with KoboiAgent.from_dict(config) as agent:
        async for event in agent.stream("count"):
            if isinstance(event, PluginEvent):
                seen.append(event)
            elif isinstance(event, FinalEvent):
                assert event.result.outcome == "completed"
    progress = [e.data for e in seen if e.type == "mcp.progress"]
    assert [p["progress"] for p in progress] == [1, 2, 3]
    assert progress[0]["server"] == "notes" and progress[0]["total"] == 3
    assert all(e.call_id == "call_0_0" for e in seen)
    logs = [e.data for e in seen if e.type == "mcp.log"]
    # The server logs each step (asked for at log_level: info, the default).
    assert [entry["data"] for entry in logs] == ["counted 1", "counted 2", "counted 3"]
    assert logs[0]["server"] == "notes" and logs[0]["level"] == "info"


async def test_resources_and_prompts_are_read_through_tools(tmp_path: Path, kit: Any) -> None:
    (tmp_path / "notes.json").write_text('["first", "second"]')
    config = kit.agent_config(tmp_path, {"notes": kit.notes_server(tmp_path)})
    async with KoboiAgent.from_dict(config) as agent:
        listed = await agent.call_tool("notes__list_resources", {})
        read = await agent.call_tool("notes__read_resource", {"uri": "notes://all"})
        prompts = await agent.call_tool("notes__list_prompts", {})
        prompt = await agent.call_tool(
            "notes__get_prompt", {"name": "summarise", "arguments": {"style": "long"}}
        )
        missing = await agent.call_tool("notes__read_resource", {"uri": "notes://nope"})
    assert listed.ok and "notes://all" in listed.content
    assert read.ok and read.content == "[resource notes://all]\nfirst\nsecond"
    assert prompts.ok and prompts.content.startswith("summarise(style?)")
    assert prompt.ok and "Summarise these notes (long)" in prompt.content
    assert missing.is_error and "notes" in missing.content


async def test_a_changed_tool_list_is_offered_from_the_next_step_and_journaled(
    tmp_path: Path, kit: Any
) -> None:
    config = kit.agent_config(
        tmp_path,
        {"notes": kit.notes_server(tmp_path)},
        script=[_call("notes__enable_shout"), _call("notes__shout", text="hey"), "done"],
    )
    async with KoboiAgent.from_dict(config, approver=AllowAllApprover()) as agent:
        assert "notes__shout" not in agent.tools
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    changed = [e.data for e in events if e.type == J.TOOLS_CHANGED]
    assert len(changed) == 1 and changed[0]["added"] == ["notes__shout"]
    assert changed[0]["step"] == 2
    assert [e.data["content"] for e in events if e.type == J.TOOL_CALL_FINISHED][-1] == "HEY"


async def test_a_destructive_tool_without_approval_does_not_run(tmp_path: Path, kit: Any) -> None:
    (tmp_path / "notes.json").write_text('["keep me"]')
    config = kit.agent_config(
        tmp_path,
        {"notes": kit.notes_server(tmp_path)},
        script=[_call("notes__delete_notes"), "gave up"],
    )
    async with KoboiAgent.from_dict(config) as agent:  # the default approver: nobody, denied
        result = await agent.run("delete everything")
        events = await agent.store.read(result.session_id)
    refused = [e.data for e in events if e.type == J.TOOL_CALL_REFUSED]
    assert refused and refused[0]["stage"] == "approval"
    assert "delete_notes" not in kit.calls(tmp_path)
    assert (tmp_path / "notes.json").read_text() == '["keep me"]'

    # Positive control: approved, the same call runs and deletes.
    async with KoboiAgent.from_dict(config, approver=AllowAllApprover()) as agent:
        result = await agent.run("delete everything")
    assert result.outcome == "completed"
    assert kit.calls(tmp_path) == ["delete_notes"]
    assert (tmp_path / "notes.json").read_text() == "[]"


async def test_the_servers_environment_holds_no_secret_of_koboi(
    tmp_path: Path, kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KOBOI_TEST_SECRET_TOKEN", "tok_" + "x" * 32)
    monkeypatch.setenv("KOBOI_TEST_PLAIN", "plain")
    servers = {
        "default": kit.notes_server(tmp_path),
        # Control: a variable the config names is passed, a secret one too (explicitly).
        "named": kit.notes_server(tmp_path, pass_env=["PATH", "KOBOI_TEST_SECRET_TOKEN"]),
    }
    async with KoboiAgent.from_dict(kit.agent_config(tmp_path, servers)) as agent:

        async def probe(server: str, name: str) -> str:
            called = await agent.call_tool(f"{server}__environment", {"name": name})
            assert called.ok, called.content
            return called.content

        assert await probe("default", "KOBOI_TEST_SECRET_TOKEN") == "not set"
        assert await probe("default", "KOBOI_TEST_PLAIN") == "not set"  # not named: not passed
        assert await probe("default", "PATH") == "set"  # one of the defaults
        assert await probe("named", "KOBOI_TEST_SECRET_TOKEN") == "set"
        assert await probe("named", "KOBOI_TEST_PLAIN") == "not set"


async def test_a_server_that_cannot_start_is_one_line_and_a_clear_tool_error(
    tmp_path: Path, kit: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = f"sqlite:///{tmp_path / 'koboi.db'}"
    good = kit.notes_server(tmp_path)
    # First the server works: its tools are remembered in the store.
    async with KoboiAgent.from_dict(kit.agent_config(tmp_path, {"notes": good}, store=store)):
        pass
    # Then it cannot start (its file is gone): the agent still opens, says so in one
    # line naming the server, offers the remembered tools, and a call is a clear error.
    moved = tmp_path / "notes_server.py"
    shutil.copy(kit.notes, moved)
    broken = {**good, "args": [str(moved)]}
    async with KoboiAgent.from_dict(kit.agent_config(tmp_path, {"notes": broken}, store=store)):
        pass  # remembered under this command
    moved.write_text("import sys; sys.exit('no server here today')\n")
    with caplog.at_level(logging.WARNING, logger="koboi_mcp"):
        async with KoboiAgent.from_dict(
            kit.agent_config(tmp_path, {"notes": broken}, store=store)
        ) as agent:
            assert "notes__list_notes" in agent.tools
            with anyio.fail_after(30):
                called = await agent.call_tool("notes__list_notes", {})
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("MCP server 'notes' could not be started" in w for w in warnings)
    assert called.is_error
    assert "MCP server 'notes' could not be started" in called.content
    assert "no server here today" in called.content
    assert "tried again at the next call" in called.content


async def test_a_server_that_dies_mid_call_is_an_error_and_is_restarted(
    tmp_path: Path, kit: Any
) -> None:
    pid_file = tmp_path / "pid"
    server = kit.notes_server(tmp_path)
    server["env"]["PID_FILE"] = str(pid_file)
    config = kit.agent_config(tmp_path, {"notes": server})
    async with KoboiAgent.from_dict(config, approver=AllowAllApprover()) as agent:
        first_pid = int(pid_file.read_text())
        outcome: list[Any] = []

        async def slow() -> None:
            outcome.append(await agent.call_tool("notes__slow_write", {"text": "x", "seconds": 30}))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(slow)
                while "slow_write:start" not in kit.calls(tmp_path):  # noqa: ASYNC110
                    await anyio.sleep(0.05)  # the server is another process: nothing to wait on
                os.kill(first_pid, 9)
        called = outcome[0]
        assert called.is_error
        assert "MCP server 'notes' stopped during the call to 'slow_write'" in called.content
        assert "outcome is unknown" in called.content
        # The next call starts it again.
        again = await agent.call_tool("notes__list_notes", {})
        assert again.ok and int(pid_file.read_text()) != first_pid


async def test_a_call_that_times_out_is_an_error_and_the_server_is_restarted(
    tmp_path: Path, kit: Any
) -> None:
    pid_file = tmp_path / "pid"
    server = kit.notes_server(tmp_path, timeout=1)
    server["env"]["PID_FILE"] = str(pid_file)
    async with KoboiAgent.from_dict(
        kit.agent_config(tmp_path, {"notes": server}), approver=AllowAllApprover()
    ) as agent:
        first_pid = int(pid_file.read_text())
        with anyio.fail_after(20):
            called = await agent.call_tool("notes__slow_write", {"text": "x", "seconds": 10})
        assert called.is_error and "did not answer 'slow_write' within 1 s" in called.content
        again = await agent.call_tool("notes__list_notes", {})
        assert again.ok and int(pid_file.read_text()) != first_pid


async def test_an_elicitation_suspends_the_run_and_the_reply_answers_it(
    tmp_path: Path, kit: Any
) -> None:
    (tmp_path / "notes.json").write_text('["a", "b"]')
    config = kit.agent_config(
        tmp_path,
        {"notes": kit.notes_server(tmp_path)},
        script=[_call("notes__confirm_and_delete"), "deleted"],
        store=f"sqlite:///{tmp_path / 'koboi.db'}",
    )
    async with KoboiAgent.from_dict(config, approver=AllowAllApprover()) as agent:
        first = await agent.run("delete after asking me")
        assert first.outcome == "suspended"
        waiting = first.suspension or {}
        assert waiting["data"]["message"] == "Delete every note?"
        assert waiting["data"]["requested_schema"]["properties"]["confirm"]["type"] == "boolean"
        assert (tmp_path / "notes.json").read_text() == '["a", "b"]'  # nothing done yet
        done = await agent.resume_run(first.session_id, reply={"confirm": True})
        events = await agent.store.read(first.session_id)
    assert done.outcome == "completed"
    assert (tmp_path / "notes.json").read_text() == "[]"
    assert [e.type for e in events].count(J.TOOL_CALL_SUSPENDED) == 1
    assert [e.data["content"] for e in events if e.type == J.TOOL_CALL_FINISHED] == [
        "all notes deleted"
    ]


async def test_an_elicitation_can_be_declined_by_config(tmp_path: Path, kit: Any) -> None:
    (tmp_path / "notes.json").write_text('["a"]')
    server = kit.notes_server(tmp_path, elicitation="decline")
    async with KoboiAgent.from_dict(
        kit.agent_config(tmp_path, {"notes": server}), approver=AllowAllApprover()
    ) as agent:
        called = await agent.call_tool("notes__confirm_and_delete", {})
    assert called.ok and called.content == "nothing deleted (decline)"
    assert (tmp_path / "notes.json").read_text() == '["a"]'
