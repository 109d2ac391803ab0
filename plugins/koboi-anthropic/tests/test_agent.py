"""End to end: a koboi agent on the anthropic provider runs a real tool turn over the wire.

The agent is built from a config dict like any user's; the model is the
loopback server speaking the Messages API, the tool is koboi-tools-basic's
real calculator. Extended thinking is on, so the thinking block must travel
from the first reply, through the loop and the journal, into the next request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from koboi import InMemoryStore, KoboiAgent, PluginHost
from koboi_testing.wire import Received, Reply, WireServer

THINKING = {
    "type": "thinking",
    "thinking": "6 * 7: the calculator will tell.",
    "signature": "EqQBCkYIARgCIkAsig+/==",
}


def config(server: WireServer, *, stream: bool) -> dict[str, Any]:
    return {
        "agent": {
            "name": "claude-e2e",
            "system_prompt": "Use the calculator for arithmetic.",
            "max_iterations": 4,
            "stream": stream,
        },
        "llm": {
            "provider": "anthropic",
            "model": "claude-test-1",
            "base_url": server.url,
            "max_retries": 0,
            "options": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        },
        "tools": {"builtin": ["calculator"]},
        "store": {"url": "memory://"},
    }


def scripted(claude: Any, replies: list[dict[str, Any]]) -> Callable[[Received], Reply]:
    """Answer the n-th request with the n-th message, as JSON or SSE as asked."""
    count = 0

    def reply(request: Received) -> Reply:
        nonlocal count
        message = replies[min(count, len(replies) - 1)]
        count += 1
        if request.json().get("stream"):
            return Reply.sse(claude.events(message, piece=3), chunk_size=11)
        return Reply.json(message)

    return reply


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_a_tool_turn_then_a_resumed_session(
    server: WireServer,
    claude: Any,
    api_key: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    stream: bool,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANTHROPIC_API_KEY", api_key)
    tool_use = claude.tool_use("toolu_01", "calculator", {"expression": "6 * 7"})
    server.handler = scripted(
        claude,
        [
            claude.message(
                [THINKING, claude.text("Computing."), tool_use],
                stop_reason="tool_use",
                usage={"input_tokens": 50, "output_tokens": 20},
            ),
            claude.message(
                [claude.text("6 * 7 = 42")], usage={"input_tokens": 90, "output_tokens": 8}
            ),
            claude.message([claude.text("Still 42.")]),
        ],
    )
    host = PluginHost(strict=True)
    host.load()
    store = InMemoryStore()

    async with KoboiAgent.from_dict(config(server, stream=stream), host=host, store=store) as agent:
        result = await agent.run("What is 6 * 7?")
    assert result.ok, result.error
    assert result.output == "6 * 7 = 42"
    assert result.steps == 2
    assert (result.usage.input_tokens, result.usage.output_tokens) == (140, 28)

    first, second = (r.json() for r in server.requests[:2])
    assert server.requests[0].headers["x-api-key"] == api_key
    assert first["system"] == "Use the calculator for arithmetic."
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert [t["name"] for t in first["tools"]] == ["calculator"]
    assert first["tools"][0]["input_schema"]["type"] == "object"
    assert first["messages"] == [
        {"role": "user", "content": [claude.text("What is 6 * 7?")]},
    ]
    assert second["messages"][1:] == [
        {"role": "assistant", "content": [THINKING, claude.text("Computing."), tool_use]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": "42",
                    "is_error": False,
                }
            ],
        },
    ]

    # A new agent on the same store: the history, thinking block included, comes
    # back from the journal.
    async with KoboiAgent.from_dict(config(server, stream=stream), host=host, store=store) as again:
        later = await again.run("And again?", session_id=result.session_id)
    assert later.output == "Still 42."
    third = server.requests[2].json()
    assert third["messages"][1] == second["messages"][1]
    assert third["messages"][-1] == {"role": "user", "content": [claude.text("And again?")]}
    roles = [m["role"] for m in third["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
