"""Fixtures: a loopback server speaking the Messages API's wire format, and providers aimed at it.

``claude`` builds replies exactly as the API sends them: a ``message`` JSON
object, or the SSE events of the same message (``message_start``, one
``content_block_start``/``_delta``/``_stop`` group per block, with text,
tool input and thinking cut into pieces, a ``ping``, ``message_delta`` and
``message_stop``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest
from pydantic import SecretStr

from koboi_anthropic.options import AnthropicOptions
from koboi_anthropic.provider import AnthropicProvider
from koboi_testing.wire import Received, Reply, WireServer

#: A key shaped like a real one (a placeholder would be refused).
API_KEY = "sk-ant-api03-Qm7Vd2Lx9Rk4Tz8Wp1Hn6Jc3Yb5Gs0Ff"
AUTH_TOKEN = "sk-ant-oat01-Zt4Xw8Nq2Ke6Rm1Vy9Pb3Lc7Hd5Ja0Gu"
MODEL = "claude-test-1"


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class Claude:
    """Builders of Messages API replies."""

    @staticmethod
    def text(text: str) -> dict[str, Any]:
        return {"type": "text", "text": text}

    @staticmethod
    def tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}

    @staticmethod
    def thinking(thinking: str, signature: str = "EqQBCkYIARgCIkCsig==") -> dict[str, Any]:
        return {"type": "thinking", "thinking": thinking, "signature": signature}

    @staticmethod
    def redacted(data: str = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xl") -> dict[str, Any]:
        return {"type": "redacted_thinking", "data": data}

    @staticmethod
    def message(
        content: Sequence[dict[str, Any]],
        *,
        stop_reason: str | None = "end_turn",
        usage: Mapping[str, Any] | None = None,
        model: str = MODEL,
    ) -> dict[str, Any]:
        return {
            "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": list(content),
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": dict(usage or {"input_tokens": 12, "output_tokens": 6}),
        }

    @staticmethod
    def events(message: Mapping[str, Any], *, piece: int = 3) -> list[Any]:
        """The SSE events (``(event, data)`` pairs) that stream ``message``."""
        usage = dict(message["usage"])
        start_usage = {k: v for k, v in usage.items() if k != "output_tokens"}
        start_usage["output_tokens"] = 1
        start = {**message, "content": [], "stop_reason": None, "usage": start_usage}
        events: list[Any] = [("message_start", {"type": "message_start", "message": start})]
        events.append(("ping", {"type": "ping"}))
        for index, block in enumerate(message["content"]):
            kind = block["type"]
            if kind == "text":
                opening: dict[str, Any] = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"], piece)]
            elif kind == "tool_use":
                opening = {**block, "input": {}}
                raw = json.dumps(block["input"], ensure_ascii=False) if block["input"] else ""
                deltas = [
                    {"type": "input_json_delta", "partial_json": p} for p in _pieces(raw, piece)
                ]
            elif kind == "thinking":
                opening = {"type": "thinking", "thinking": ""}
                deltas = [
                    {"type": "thinking_delta", "thinking": p}
                    for p in _pieces(block["thinking"], piece)
                ]
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
            else:
                opening, deltas = dict(block), []
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": opening},
                )
            )
            events += [
                ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
                for d in deltas
            ]
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                    "usage": {"output_tokens": usage.get("output_tokens", 0)},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    @staticmethod
    def error(kind: str, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": kind, "message": message}}


@pytest.fixture
def claude() -> type[Claude]:
    return Claude


@pytest.fixture
def api_key() -> str:
    """The key the ``make_provider`` providers use."""
    return API_KEY


@pytest.fixture
def auth_token() -> str:
    """A bearer token shaped like a real one."""
    return AUTH_TOKEN


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer() as wire:
        yield wire


def answer_with(
    server: WireServer, message: Mapping[str, Any], *, piece: int = 3, **sse: Any
) -> None:
    """Answer every request with ``message``: as JSON, or as SSE when the body asks to stream."""

    def reply(request: Received) -> Reply:
        if request.json().get("stream"):
            return Reply.sse(Claude.events(message, piece=piece), **sse)
        return Reply.json(message)

    server.handler = reply


@pytest.fixture
def answer(server: WireServer) -> Callable[..., None]:
    """``answer(message, piece=3, **sse_options)``: what ``server`` replies to every request."""

    def set_answer(message: Mapping[str, Any], **kw: Any) -> None:
        answer_with(server, message, **kw)

    return set_answer


@pytest.fixture
def provider_options() -> Callable[..., AnthropicOptions]:
    """``provider_options(base_url, **overrides)``: test options (a real-looking key, no retries)."""
    return options


def options(base_url: str, **overrides: Any) -> AnthropicOptions:
    settings: dict[str, Any] = {
        "model": MODEL,
        "base_url": base_url,
        "api_key": SecretStr(API_KEY),
        "max_retries": 0,
        "retry_initial_delay": 0.01,
        "retry_max_delay": 0.05,
        "timeout_seconds": 5.0,
        "connect_timeout_seconds": 5.0,
    }
    settings.update(overrides)
    return AnthropicOptions(**settings)


@pytest.fixture
async def make_provider(
    server: WireServer, anyio_backend: str
) -> AsyncIterator[Callable[..., AnthropicProvider]]:
    """``make_provider(**option_overrides)``: a provider aimed at ``server``, closed afterwards."""
    made: list[AnthropicProvider] = []

    def make(**overrides: Any) -> AnthropicProvider:
        provider = AnthropicProvider(options(server.url, **overrides))
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests decide which credential variables are set, whatever the machine has."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("KOBOI_STORE", "memory://")
