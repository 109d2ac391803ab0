"""Providers end to end, over real HTTP on 127.0.0.1: pools, the response cache, budgets.

Each provider plugin tests its own wire format; these tests put several of them
behind the kernel's pool, cache and budgets, through the agent and the CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from koboi import KoboiAgent
from koboi import journal as J
from koboi.store import InMemoryStore
from koboi_testing.wire import Received, Reply, WireServer

pytestmark = pytest.mark.anyio

ANTHROPIC_KEY = "sk-ant-api03-E2eTestKeyQx7Zk9Lm2Np4Rs6"


def openai_reply(text: str | None = None, *, call: dict[str, Any] | None = None) -> Reply:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if call is not None:
        message["tool_calls"] = [
            {
                "id": "call_e2e_1",
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
            }
        ]
    return Reply.json(
        {
            "id": "chatcmpl-e2e",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "gpt-4o-mini",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if call else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 100_000,
                "completion_tokens": 10_000,
                "total_tokens": 110_000,
            },
        }
    )


def anthropic_reply(text: str) -> Reply:
    return Reply.json(
        {
            "id": "msg_e2e",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 20, "output_tokens": 5},
        }
    )


@pytest.fixture
def openai_server() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


@pytest.fixture
def anthropic_server() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


def pool_config(primary: WireServer, backup: WireServer, *, cooldown: float) -> dict[str, Any]:
    return {
        "providers": {
            "local": {
                "provider": "openai",
                "model": "gpt-4o-mini",
                "base_url": primary.url + "/v1",
                "max_retries": 0,
            },
            "claude": {
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "base_url": backup.url,
                "api_key": ANTHROPIC_KEY,
                "max_retries": 0,
            },
            "main": {
                "pool": ["local", "claude"],
                "failure_threshold": 2,
                "cooldown_seconds": cooldown,
            },
        },
        "llm": "main",
        "agent": {"stream": False},
    }


async def _provider_events(store: InMemoryStore, session_id: str) -> list[dict[str, Any]]:
    return [e.data for e in await store.read(session_id) if e.type == J.PROVIDER_EVENT]


async def test_pool_fails_over_opens_the_breaker_and_closes_it_again(
    openai_server: WireServer, anthropic_server: WireServer
) -> None:
    openai_server.default = Reply.json({"error": {"message": "upstream down"}}, status=503)
    anthropic_server.default = anthropic_reply("from claude")
    store = InMemoryStore()
    cooldown = 1.0
    async with KoboiAgent.from_dict(
        pool_config(openai_server, anthropic_server, cooldown=cooldown), store=store
    ) as agent:
        first = await agent.run("hello")
        assert first.output == "from claude"
        events = await _provider_events(store, first.session_id)
        assert [e["kind"] for e in events] == ["failover"]
        assert events[0]["provider"] == "local"
        assert events[0]["next"] == "claude"
        assert "HTTP 503" in events[0]["reason"]
        assert "upstream down" in events[0]["reason"]

        second = await agent.run("hello again")
        assert second.output == "from claude"
        kinds = [e["kind"] for e in await _provider_events(store, second.session_id)]
        assert kinds == ["failover", "breaker_open"] or kinds == ["breaker_open", "failover"]
        assert len(openai_server.requests) == 2

        # Open: the failing server is not even asked.
        third = await agent.run("and again")
        assert third.output == "from claude"
        assert len(openai_server.requests) == 2
        assert await _provider_events(store, third.session_id) == []

        # The server recovers; after the cooldown one trial call goes through and closes it.
        openai_server.default = openai_reply("from local")
        await anyio.sleep(cooldown + 0.1)
        fourth = await agent.run("once more")
        assert fourth.output == "from local"
        closed = await _provider_events(store, fourth.session_id)
        assert [e["kind"] for e in closed] == ["breaker_closed"]
        assert closed[0]["provider"] == "local"
    # The backup always received the Anthropic wire format with its key.
    sent: Received = anthropic_server.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == ANTHROPIC_KEY


async def test_a_pool_whose_members_all_fail_fails_the_run_with_every_reason(
    openai_server: WireServer, anthropic_server: WireServer
) -> None:
    openai_server.default = Reply.json({"error": {"message": "down"}}, status=503)
    anthropic_server.default = Reply.json(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        status=529,
    )
    async with KoboiAgent.from_dict(
        pool_config(openai_server, anthropic_server, cooldown=30)
    ) as agent:
        result = await agent.run("hello")
    assert result.outcome == "failed"
    error = result.error or ""
    assert "every provider failed" in error
    assert "local:" in error and "claude:" in error
    assert "HTTP 529" in error
    assert ANTHROPIC_KEY not in error


async def test_cost_budget_stops_a_run_at_real_usage(openai_server: WireServer) -> None:
    # Each reply reports 100k prompt and 10k completion tokens: 0.25 + 0.10 USD at these prices.
    openai_server.default = openai_reply(
        call={"name": "calculator", "arguments": {"expression": "1+1"}}
    )
    config = {
        "llm": {
            "provider": "openai",
            "model": "gpt-4o-mini",
            "base_url": openai_server.url + "/v1",
            "pricing": {"input": 2.5, "output": 10.0},
        },
        "tools": {"builtin": ["calculator"]},
        "agent": {"max_cost_usd": 0.5, "stream": False},
    }
    store = InMemoryStore()
    async with KoboiAgent.from_dict(config, store=store) as agent:
        result = await agent.run("spend")
    assert result.outcome == "budget_exceeded"
    assert result.cost_usd == pytest.approx(0.70)
    assert len(openai_server.requests) == 2
    events = await store.read(result.session_id)
    finished = [e for e in events if e.type == J.MODEL_CALL_FINISHED]
    assert [e.data["response"]["cost_usd"] for e in finished] == pytest.approx([0.35, 0.35])
    assert events[-1].data["cost_usd"] == pytest.approx(0.70)


# -- record, then replay offline through the CLI -------------------------------------------


def _koboi(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "koboi_cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        env=env,
    )


@pytest.mark.e2e
def test_record_with_a_server_then_replay_with_no_server_no_key(tmp_path: Path) -> None:
    key = "sk-proj-E2eRecordKeyQx7Zk9Lm2Np4Rs6"
    config = tmp_path / "agent.yaml"
    with WireServer() as server:
        server.push(
            Reply.sse(
                [
                    {
                        "id": "c1",
                        "object": "chat.completion.chunk",
                        "created": 1,
                        "model": "gpt-4o-mini",
                        "choices": [
                            {
                                "index": 0,
                                "delta": {
                                    "role": "assistant",
                                    "tool_calls": [
                                        {
                                            "index": 0,
                                            "id": "call_1",
                                            "type": "function",
                                            "function": {
                                                "name": "calculator",
                                                "arguments": '{"expression": ',
                                            },
                                        }
                                    ],
                                },
                                "finish_reason": None,
                            }
                        ],
                    },
                    {
                        "id": "c1",
                        "object": "chat.completion.chunk",
                        "created": 1,
                        "model": "gpt-4o-mini",
                        "choices": [
                            {
                                "index": 0,
                                "delta": {
                                    "tool_calls": [
                                        {"index": 0, "function": {"arguments": '"6*7"}'}}
                                    ]
                                },
                                "finish_reason": "tool_calls",
                            }
                        ],
                    },
                    "[DONE]",
                ],
                chunk_size=9,
            ),
            Reply.sse(
                [
                    {
                        "id": "c2",
                        "object": "chat.completion.chunk",
                        "created": 1,
                        "model": "gpt-4o-mini",
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"content": "It is 42 ☀️"},
                                "finish_reason": "stop",
                            }
                        ],
                    },
                    "[DONE]",
                ],
                chunk_size=5,
            ),
        )
        config.write_text(
            "llm:\n"
            "  provider: openai\n"
            "  model: gpt-4o-mini\n"
            f"  base_url: {server.url}/v1\n"
            "  api_key: ${E2E_MODEL_KEY}\n"
            "tools: {builtin: [calculator]}\n"
            "store: {url: sqlite:///run.db}\n",
            encoding="utf-8",
        )
        base_env = {
            k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "KOBOI_CACHE"))
        }
        recorded = _koboi(
            "run",
            str(config),
            "-m",
            "What is 6*7?",
            "--json",
            "--cache-mode",
            "record",
            env={**base_env, "E2E_MODEL_KEY": key},
            cwd=tmp_path,
        )
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr
        assert len(server.requests) == 2
        assert server.requests[0].headers["authorization"] == f"Bearer {key}"
    # The server is gone and no key is set: replay serves every answer from the store.
    replayed = _koboi(
        "run",
        str(config),
        "-m",
        "What is 6*7?",
        "--json",
        "--cache-mode",
        "replay",
        env={**base_env, "E2E_MODEL_KEY": ""},
        cwd=tmp_path,
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    first = json.loads(recorded.stdout.strip().splitlines()[-1])
    again = json.loads(replayed.stdout.strip().splitlines()[-1])
    assert again["output"] == first["output"] == "It is 42 ☀️"
    assert again["usage"] == first["usage"]
    # A question never recorded is refused, naming the request, without a traceback.
    missed = _koboi(
        "run",
        str(config),
        "-m",
        "What is 7*8?",
        "--cache-mode",
        "replay",
        env={**base_env, "E2E_MODEL_KEY": ""},
        cwd=tmp_path,
    )
    output = missed.stdout + missed.stderr
    assert missed.returncode == 1, output
    assert "no recorded response" in output
    assert "What is 7*8?" in output
    assert "Traceback" not in output
    # The key never reached the store (database, WAL or journal file).
    for stored in tmp_path.glob("run.db*"):
        assert key.encode() not in stored.read_bytes(), stored


@pytest.mark.parametrize(
    "llm",
    [
        {"provider": "openai", "model": "gpt-4o-mini"},
        {"provider": "anthropic", "model": "claude-sonnet-4-5"},
        {"provider": "cloudflare", "model": "@cf/meta/llama-3.1-8b-instruct"},
    ],
    ids=["openai", "anthropic", "cloudflare"],
)
async def test_every_provider_opens_in_replay_mode_without_credentials(
    llm: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLOUDFLARE_API_TOKEN",
        "CLOUDFLARE_ACCOUNT_ID",
        "KOBOI_CACHE_MODE",
    ):
        monkeypatch.delenv(name, raising=False)
    config = {"llm": llm, "cache": {"mode": "replay"}}
    async with KoboiAgent.from_dict(config, store=InMemoryStore()) as agent:
        result = await agent.run("never recorded")
    assert result.outcome == "failed"
    assert "no recorded response" in (result.error or "")
