"""koboi calling an A2A agent served by a2a-sdk's own server classes (``sdk_agent``):
its skills as governed tools, its events in the run's stream, its card checked."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from a2a_testkit import ThreadServer, bound_socket, signing_key
from sdk_agent import build_app

from koboi import KoboiAgent
from koboi.events import FinalEvent, PluginEvent, ToolResultEvent

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


class Echo:
    """The SDK agent in a thread, with what it saw."""

    def __init__(self, tmp: Path, **options: Any) -> None:
        self.private, self.public = signing_key(tmp, "echo")
        sock = bound_socket()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.seen: list[dict[str, str]] = []
        if options.pop("signed", True):
            options["key_file"] = self.private
        app = build_app(self.url + "/", seen=self.seen, **options)
        self.server = ThreadServer(app, sock).start()


@pytest.fixture
def echo_factory(tmp_path: Path) -> Any:
    started: list[Echo] = []

    def make(**options: Any) -> Echo:
        echo = Echo(tmp_path, **options)
        started.append(echo)
        return echo

    yield make
    for echo in started:
        echo.server.stop()


def _agent(tmp: Path, echo: Echo, *, mode: str = "act", **peer: Any) -> Path:
    entry: dict[str, Any] = {
        "name": "echo",
        "url": echo.url,
        "public_key_file": str(echo.public),
        "risk": "safe",
    }
    entry.update(peer)
    config = {
        "agent": {"name": "desk", "mode": mode},
        "llm": {
            "provider": "scripted",
            "rules": [
                {
                    "match": r"tell echo (?P<q>.+)",
                    "tool": "echo__echo",
                    "arguments": {"message": "{q}"},
                    "reply": "echo answered: {result}",
                }
            ],
        },
        "store": {"url": f"sqlite:///{tmp / 'caller.db'}"},
        "a2a": {"peers": [entry]},
    }
    path = tmp / "caller.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def _run(config: Path, message: str, **kwargs: Any) -> tuple[list[Any], Any]:
    async with KoboiAgent.from_config(config) as agent:
        events = [e async for e in agent.stream(message, **kwargs)]
        journal = await agent.store.read(events[-1].result.session_id)
    return events, journal


async def test_a_peers_skills_are_tools_its_events_stream_and_the_trace_goes_along(
    tmp_path: Path, echo_factory: Any
) -> None:
    echo = echo_factory()
    config = _agent(tmp_path, echo)
    async with KoboiAgent.from_config(config) as agent:
        assert {"echo__echo", "echo__shout"} <= set(agent.tools)
        assert "echo agent" in agent.tools["echo__echo"].description
    events, journal = await _run(config, "tell echo hello there")
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.result.output == (
        "echo answered: echo: hello there"
    )
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.content == "echo: hello there" and not result.is_error
    progress = [e for e in events if isinstance(e, PluginEvent) and e.event_id is None]
    kinds = {e.type for e in progress}
    assert {"a2a.status", "a2a.artifact"} <= kinds
    assert all(e.call_id == result.call_id for e in progress)
    states = [e.data["state"] for e in progress if e.type == "a2a.status"]
    assert states[-1] == "completed"

    # The run's trace went out with the call and is in the journal.
    run_trace = next(e for e in journal if e.type == "run_started").data["trace"]
    trace_id = run_trace["traceparent"].split("-")[1]
    sent = next(e for e in journal if e.type == "a2a.call_sent")
    assert sent.data["traceparent"].split("-")[1] == trace_id
    received = [h.get("traceparent", "") for h in echo.seen]
    assert received == [sent.data["traceparent"]]


async def test_a_tampered_or_unsigned_card_is_refused(
    tmp_path: Path, echo_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    tampered = echo_factory(tamper=True)
    unsigned = echo_factory(signed=False)
    caplog.set_level(logging.WARNING, logger="koboi.a2a")
    for echo, why in ((tampered, "No valid signature"), (unsigned, "has no signatures")):
        async with KoboiAgent.from_config(_agent(tmp_path, echo)) as agent:
            assert not [t for t in agent.tools if t.startswith("echo__")]
        assert why in caplog.text and "its skills are not offered" in caplog.text
        caplog.clear()
    # No key to check it with: refused too, unless the config allows unsigned cards.
    async with KoboiAgent.from_config(_agent(tmp_path, unsigned, public_key_file=None)) as agent:
        assert "echo__echo" not in agent.tools
    assert "no key to check its card" in caplog.text
    allowed = _agent(tmp_path, unsigned, public_key_file=None, allow_unsigned=True)
    events, _ = await _run(allowed, "tell echo hi")
    assert events[-1].result.output == "echo answered: echo: hi"
    assert tampered.seen == [] and len(unsigned.seen) == 1


async def test_a_card_naming_another_origin_is_refused(
    tmp_path: Path, echo_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    echo = echo_factory(endpoint="http://127.0.0.2:9/")
    caplog.set_level(logging.WARNING, logger="koboi.a2a")
    async with KoboiAgent.from_config(_agent(tmp_path, echo)) as agent:
        assert "echo__echo" not in agent.tools
    assert "not on" in caplog.text and "peer key is sent only" in caplog.text


async def test_a_peer_asking_for_input_suspends_the_run_and_the_reply_goes_back(
    tmp_path: Path, echo_factory: Any
) -> None:
    echo = echo_factory()
    config = _agent(tmp_path, echo)
    async with KoboiAgent.from_config(config) as agent:
        first = await agent.run("tell echo ask me")
        assert first.outcome == "suspended"
        assert first.suspension is not None
        assert first.suspension["data"]["question"] == "which colour?"
        second = await agent.resume_run(first.session_id, reply="blue")
    assert second.outcome == "completed"
    assert second.output == "echo answered: you said: blue"
    assert len(echo.seen) == 2  # the question's task, then the reply to it


async def test_a_failed_peer_task_is_a_tool_error(tmp_path: Path, echo_factory: Any) -> None:
    echo = echo_factory()
    events, _ = await _run(_agent(tmp_path, echo), "tell echo fail")
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.is_error and "failed" in result.content and "it broke" in result.content


async def test_a_peer_call_is_governed_like_any_tool_call(
    tmp_path: Path, echo_factory: Any
) -> None:
    echo = echo_factory()
    # A moderate peer in plan mode: refused before anything is sent.
    events, _ = await _run(_agent(tmp_path, echo, mode="plan", risk="moderate"), "tell echo x")
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.refused_by == "mode" and echo.seen == []
    # A destructive peer in act mode needs an approval; nobody gives it: denied, not sent.
    events, _ = await _run(_agent(tmp_path, echo, risk="destructive"), "tell echo y")
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.refused_by is not None and echo.seen == []


async def test_a_peer_down_at_open_is_offered_from_the_card_kept_in_the_store(
    tmp_path: Path, echo_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    echo = echo_factory()
    config = _agent(tmp_path, echo)
    async with KoboiAgent.from_config(config) as agent:
        assert "echo__echo" in agent.tools
    echo.server.stop()
    caplog.set_level(logging.WARNING, logger="koboi.a2a")
    async with KoboiAgent.from_config(config) as agent:
        assert "echo__echo" in agent.tools  # the card fetched before, checked again
        result = await agent.run("tell echo anyone there")
    assert "offering its skills from the card fetched before" in caplog.text
    # The call itself fails in one line: the peer is not there.
    assert result.outcome == "completed" and "not delivered" in result.output
