"""Secrets never stored or shown (a secret split across stream chunks included), the audit
trail before and after each action, and a pending approval that survives a SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from koboi import (
    ApprovalRequest,
    CallbackApprover,
    KoboiAgent,
    Risk,
    TextDeltaEvent,
    tool,
)
from koboi.events import FinalEvent, ToolCallEvent, ToolResultEvent

pytestmark = pytest.mark.anyio

LITERAL = "tok_live_4f9a8b7c6d5e"
GITHUB = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
# Each piece is its own SSE event and its own network write: both secrets are cut in two.
PIECES = [
    "The token is tok_live_4f9a",
    "8b7c6d5e and the other is ghp_abcdefghij",
    "klmnopqrstuvwxyz0123456789 done.",
]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


async def _stream_run(
    tmp_path: Path, governance: dict[str, Any]
) -> tuple[list[Any], list[Any], list[Any]]:
    from koboi_testing.wire import Reply, WireServer

    events = [_chunk({"role": "assistant", "content": ""})]
    events += [_chunk({"content": piece}) for piece in PIECES]
    events += [_chunk({}, "stop"), "[DONE]"]
    with WireServer() as server:
        server.push(Reply.sse(events))
        config = {
            "llm": {
                "provider": "openai",
                "model": "m",
                "base_url": server.url + "/v1",
                "api_key": "test-key-not-real-0001",
            },
            "store": {"url": "memory://"},
            "governance": governance,
        }
        os.environ["MY_SERVICE_TOKEN"] = LITERAL
        try:
            agent = KoboiAgent.from_dict(config, base_dir=tmp_path)
            shown = []
            async with agent:
                async for event in agent.stream("tell me"):
                    shown.append(event)
                final = shown[-1]
                assert isinstance(final, FinalEvent)
                journal = list(await agent.store.read(final.result.session_id))
                audit = list(await agent.store.read_audit(final.result.session_id))
        finally:
            del os.environ["MY_SERVICE_TOKEN"]
    return shown, journal, audit


def _leaks(text: str) -> list[str]:
    """Any secret, or any half of one, found in ``text``."""
    parts = [
        LITERAL,
        GITHUB,
        "tok_live_4f9a",
        "8b7c6d5e",
        "ghp_abcdefghij",
        "klmnopqrstuvwxyz0123456789",
    ]
    return [p for p in parts if p in text]


async def test_a_secret_split_across_stream_chunks_is_never_shown_or_stored(tmp_path: Path) -> None:
    governance = {"redaction": {"secrets": ["${MY_SERVICE_TOKEN}"]}}
    shown, journal, audit = await _stream_run(tmp_path, governance)
    deltas = [e.text for e in shown if isinstance(e, TextDeltaEvent)]
    for delta in deltas:
        assert _leaks(delta) == [], delta
    streamed = "".join(deltas)
    assert "[REDACTED]" in streamed and "[REDACTED:" in streamed and streamed.endswith("done.")
    final = shown[-1]
    assert (
        _leaks(final.result.output) == []
        and _leaks(json.dumps([m.content for m in final.result.messages])) == []
    )
    assert _leaks(json.dumps([e.data for e in journal])) == []
    assert _leaks(json.dumps([e.data for e in audit])) == []


async def test_control_without_redaction_the_secret_does_reach_the_journal(tmp_path: Path) -> None:
    governance = {
        "redaction": {"from_environment": False, "detect": False},
        "guardrails": {"output": {"secrets": "off"}},
    }
    shown, journal, _ = await _stream_run(tmp_path, governance)
    assert LITERAL in json.dumps([e.data for e in journal])
    assert GITHUB in "".join(e.text for e in shown if isinstance(e, TextDeltaEvent))


async def test_secrets_in_tool_calls_and_results_are_masked_in_journal_audit_and_events(
    make_agent: Any, turn: Any
) -> None:
    @tool(name="fetch_config", risk=Risk.SAFE)
    def fetch_config(token: str) -> str:
        """Return a config."""
        return f"config with password={token} and key {GITHUB}"

    agent = make_agent(
        [turn("fetch_config", {"token": GITHUB}), "done"],
        tools=[fetch_config],
        governance={"guardrails": {"output": {"secrets": "warn"}}},
    )
    async with agent:
        shown = [e async for e in agent.stream("go")]
        sid = shown[-1].result.session_id
        journal = list(await agent.store.read(sid))
        audit = list(await agent.store.read_audit(sid))
    calls = [e for e in shown if isinstance(e, ToolCallEvent)]
    results = [e for e in shown if isinstance(e, ToolResultEvent)]
    assert GITHUB not in json.dumps(calls[0].call.arguments)
    assert GITHUB not in results[0].content and "governance masked" in results[0].content
    assert GITHUB not in json.dumps([e.data for e in journal])
    assert GITHUB not in json.dumps([e.data for e in audit])
    # The tool itself got the real argument (masking is for what is stored and shown).
    assert "[REDACTED" in results[0].content


async def test_block_withholds_a_tool_result_that_holds_a_secret(
    make_agent: Any, turn: Any
) -> None:
    @tool(name="dump_env", risk=Risk.SAFE)
    def dump_env() -> str:
        """Dump."""
        return f"OPENAI_API_KEY=sk-proj-{'A1b2C3d4' * 6}"

    agent = make_agent(
        [turn("dump_env"), "done"],
        tools=[dump_env],
        governance={"guardrails": {"output": {"secrets": "block"}}},
    )
    async with agent:
        result = await agent.run("go")
    told = result.messages[2].content
    assert "withheld by governance.guardrails.output" in told and "A1b2C3d4" not in told


async def test_the_audit_trail_has_a_record_before_and_after_each_action(
    make_agent: Any, turn: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    script = [
        turn("look", {"what": "a"}, "c1"),
        turn("wipe", {"target": "b"}, "c2"),
        turn("note", {"text": "c"}, "c3"),
        "done",
    ]
    answers = iter([False, True])

    def approver(request: ApprovalRequest) -> bool:
        return next(answers)

    agent = make_agent(script, store_url=url, approver=CallbackApprover(approver))
    async with agent:
        result = await agent.run("go")
        audit = [dict(e.data) for e in await agent.store.read_audit(result.session_id)]
    calls = [
        (r.get("phase"), r.get("tool"), r.get("action"))
        for r in audit
        if r["action"] in ("tool_call", "approval")
    ]
    assert calls == [
        ("before", "look", "tool_call"),
        ("after", "look", "tool_call"),
        ("requested", "wipe", "approval"),
        ("decided", "wipe", "approval"),
        ("decision", "wipe", "tool_call"),
        ("requested", "note", "approval"),
        ("decided", "note", "approval"),
        ("before", "note", "tool_call"),
        ("after", "note", "tool_call"),
    ]
    before = next(r for r in audit if r.get("phase") == "before" and r["tool"] == "note")
    assert before["arguments"] == {"text": "c"} and before["decision"] == "allow"
    denied = next(r for r in audit if r.get("phase") == "decision")
    assert denied["stage"] == "approval"

    done = await anyio.to_thread.run_sync(_koboi_audit, result.session_id[:8], tmp_path, url)
    assert done.returncode == 0, done.stderr
    assert "DENIED at approval" in done.stdout and "before   note" in done.stdout


def _koboi_audit(prefix: str, tmp_path: Path, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "koboi_cli",
            "audit",
            prefix,
            "--config",
            str(_config_file(tmp_path, url)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _config_file(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "cli.yaml"
    path.write_text(f"llm: {{provider: scripted}}\nstore: {{url: '{url}'}}\n")
    return path


@pytest.mark.slow  # a real process: runs in this member's own session
def test_trust_commands_list_add_and_revoke(tmp_path: Path) -> None:
    config = _config_file(tmp_path, f"sqlite:///{tmp_path / 'k.db'}")

    def koboi(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "koboi_cli", *args, "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert koboi("trust", "list").stdout.strip() == "no trust rules"
    added = koboi(
        "trust", "add", "write_file", "--arg", "path=src/*", "--arg", "content=*", "--ttl-days", "1"
    )
    assert added.returncode == 0, added.stderr
    rule_id = added.stdout.split()[1].rstrip(":")
    listed = json.loads(koboi("trust", "list", "--json").stdout)
    assert [r["id"] for r in listed] == [rule_id] and listed[0]["patterns"] == {
        "path": "src/*",
        "content": "*",
    }
    assert koboi("trust", "revoke", rule_id).returncode == 0
    again = koboi("trust", "revoke", rule_id)
    assert (
        again.returncode != 0
        and "no trust rule" in again.stderr
        and "Traceback" not in again.stderr
    )
    bad = koboi("trust", "add", "write_file", "--arg", "nonsense")
    assert bad.returncode != 0 and "NAME=GLOB" in bad.stderr


# -- a pending approval survives a crash ---------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys, anyio
    from koboi import KoboiAgent, Risk, tool, CallbackApprover

    @tool(name="deploy", risk=Risk.DESTRUCTIVE)
    def deploy(target: str) -> str:
        "Deploy."
        return "deployed " + target

    async def wait_forever(request):
        print("waiting", request.approval_id, flush=True)
        await anyio.sleep(3600)
        return False

    async def main():
        config = {
            "agent": {"mode": "act", "approval_timeout_seconds": float(sys.argv[2])},
            "llm": {"provider": "scripted", "script": [
                {"tool_calls": [{"id": "c1", "name": "deploy", "arguments": {"target": "prod"}}]},
                "deployed",
            ]},
            "store": {"url": sys.argv[1]},
        }
        agent = KoboiAgent.from_dict(config, extra_tools=[deploy], approver=CallbackApprover(wait_forever))
        async with agent:
            await agent.run("deploy it", session_id="crashy")

    anyio.run(main)
    """
)


def _crash_while_waiting(tmp_path: Path, url: str, timeout: float) -> str:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    with subprocess.Popen(
        [sys.executable, str(script), url, str(timeout)], stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line.startswith("waiting"), line
            child.send_signal(signal.SIGKILL)
            child.wait(10)
        finally:
            if child.poll() is None:
                child.kill()
    return line.split()[1]


@tool(name="deploy", risk=Risk.DESTRUCTIVE)
def _deploy(target: str) -> str:
    """Deploy."""
    return "deployed " + target


def _resumer(url: str, approver: Any, tmp_path: Path, timeout: float) -> KoboiAgent:
    config = {
        "agent": {"mode": "act", "approval_timeout_seconds": timeout},
        "llm": {
            "provider": "scripted",
            "script": [
                {"tool_calls": [{"id": "c1", "name": "deploy", "arguments": {"target": "prod"}}]},
                "deployed",
            ],
        },
        "store": {"url": url},
    }
    return KoboiAgent.from_dict(config, base_dir=tmp_path, extra_tools=[_deploy], approver=approver)


async def test_a_pending_approval_is_still_pending_after_a_crash_and_resume(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    approval_id = await anyio.to_thread.run_sync(_crash_while_waiting, tmp_path, url, 600.0)
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    async with _resumer(url, CallbackApprover(approve), tmp_path, 600) as agent:
        journal = list(await agent.store.read("crashy"))
        requested = [e for e in journal if e.type == "approval_requested"]
        assert [e.data["approval_id"] for e in requested] == [approval_id]
        assert not any(e.type == "approval_decided" for e in journal)
        result = await agent.resume_run("crashy")
        journal = list(await agent.store.read("crashy"))
    # The same approval, not a new one: one request in the journal, decided once.
    assert [r.approval_id for r in asked] == [approval_id]
    assert [e.data["approval_id"] for e in journal if e.type == "approval_requested"] == [
        approval_id
    ]
    assert [e.data["approved"] for e in journal if e.type == "approval_decided"] == [True]
    assert result.outcome == "completed" and "deployed prod" in json.dumps(
        [m.content for m in result.messages]
    )


@pytest.mark.slow  # a real process: runs in this member's own session
async def test_an_approval_that_expired_during_the_crash_is_denied_on_resume(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    await anyio.to_thread.run_sync(_crash_while_waiting, tmp_path, url, 1.0)
    await anyio.sleep(1.2)
    asked: list[ApprovalRequest] = []
    async with _resumer(
        url, CallbackApprover(lambda r: asked.append(r) or True), tmp_path, 1.0
    ) as agent:
        await agent.resume_run("crashy")
        journal = list(await agent.store.read("crashy"))
    assert asked == []  # nobody is asked about an expired request
    (refused,) = [e for e in journal if e.type == "tool_call_refused"]
    assert refused.data["stage"] == "approval" and "expired" in refused.data["reason"]
    assert not any(e.type == "tool_call_started" for e in journal)


def test_a_configured_secret_too_short_to_mask_is_a_config_error(tmp_path: Path) -> None:
    from koboi import ConfigError

    config = {
        "llm": {"provider": "scripted"},
        "store": {"url": "memory://"},
        "governance": {"redaction": {"secrets": ["abc"]}},
    }
    with pytest.raises(ConfigError) as caught:
        KoboiAgent.from_dict(config, base_dir=tmp_path)
    message = str(caught.value)
    assert "governance.redaction.secrets" in message and "shorter than 6" in message
    assert "abc" not in message.replace("characters", "")
    # Control: a long enough secret is accepted.
    config["governance"] = {"redaction": {"secrets": ["abcdef-long-enough"]}}
    KoboiAgent.from_dict(config, base_dir=tmp_path)
