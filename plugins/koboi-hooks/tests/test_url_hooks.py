"""URL hooks: the event POSTed as JSON, signed, behind koboi-http's SSRF guard.

The receiver is a real HTTP server on 127.0.0.1. Its signatures are checked with
``standardwebhooks`` (the Standard Webhooks reference library, which nobody here
wrote). Loopback is refused unless ``url_allow`` lists it, with zero connections
reaching the receiver; allow-listed, the same hook is delivered (the control).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from koboi import PluginHost
from koboi_testing.wire import Reply, WireServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

Ran = Any
Kit = Any
SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


@pytest.fixture
def receiver() -> Iterator[WireServer]:
    with WireServer() as server:
        server.default = Reply.json({})
        yield server


def _hooks(receiver: WireServer, allow: list[str]) -> dict[str, Any]:
    hook = {"name": "gate", "matcher": "run_shell", "url": receiver.url + "/hook", "secret": SECRET}
    return {"url_allow": allow, "before_tool_call": [hook]}


async def _run(kit: Kit, ran: Ran, tmp_path: Path, hooks: dict[str, Any]) -> list[Any]:
    turns = [kit.call("run_shell", command="make deploy"), "done"]
    agent, _ = kit.make_agent(hooks, turns, ran, tmp_path)
    async with agent:
        result = await agent.run("deploy")
        return list(await agent.store.read(result.session_id))


async def test_loopback_is_refused_without_an_allow_list_and_nothing_is_sent(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit, receiver: WireServer
) -> None:
    events = await _run(kit, ran, tmp_path, _hooks(receiver, []))
    assert receiver.requests == [] and receiver.connections == 0
    assert ran.commands == []  # before_tool_call fails closed
    error = kit.hook_events(events)[0]["error"]
    assert "POST failed" in error and "loopback" in error


async def test_an_allowed_receiver_gets_a_signed_event_and_its_answer_decides(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit, receiver: WireServer
) -> None:
    receiver.default = Reply.json({"decision": "block", "reason": "deploys are frozen today"})
    events = await _run(kit, ran, tmp_path, _hooks(receiver, ["127.0.0.1"]))
    assert ran.commands == []
    refused = [e.data for e in events if e.type == "tool_call_refused"]
    assert refused[0]["reason"] == "deploys are frozen today"
    headers, body = receiver.requests[0].headers, receiver.requests[0].body
    assert receiver.requests[0].path == "/hook"
    event = Webhook(SECRET).verify(body, headers)  # the reference library accepts it
    assert event["hook_event_name"] == "PreToolUse"
    assert event["tool_input"] == {"command": "make deploy"}
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + base64.b64encode(b"x" * 32).decode()).verify(body, headers)
    # Control: the receiver has no objection, and the call runs.
    receiver.default = Reply.json({})
    await _run(kit, ran, tmp_path, _hooks(receiver, ["127.0.0.0/8"]))
    assert ran.commands == ["make deploy"]


async def test_an_error_status_is_a_hook_error(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit, receiver: WireServer
) -> None:
    receiver.default = Reply.json({"error": "down"}, status=503)
    events = await _run(kit, ran, tmp_path, _hooks(receiver, ["127.0.0.1"]))
    assert ran.commands == []
    assert kit.hook_events(events)[0]["error"] == "the receiver answered HTTP 503"


async def test_an_unsigned_url_hook_sends_no_signature(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit, receiver: WireServer
) -> None:
    hooks = {"url_allow": ["127.0.0.1"], "run_end": [{"url": receiver.url + "/end"}]}
    agent, _ = kit.make_agent(hooks, ["done"], ran, tmp_path)
    async with agent:
        await agent.run("q")
    headers, body = receiver.requests[0].headers, receiver.requests[0].body
    assert "webhook-signature" not in headers and "webhook-id" in headers
    assert json.loads(body)["outcome"] == "completed"
