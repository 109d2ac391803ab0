"""HTTP failures: retries, statuses that must not be retried, timeouts, and no credential leaks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import SecretStr

from koboi.errors import ProviderError
from koboi.messages import Message, ModelRequest
from koboi_anthropic.provider import AnthropicProvider
from koboi_testing.wire import Reply, WireServer

MakeProvider = Callable[..., AnthropicProvider]
REQUEST = ModelRequest(messages=[Message.user("Hi")])


async def call(provider: AnthropicProvider, mode: str) -> str:
    if mode == "complete":
        return (await provider.complete(REQUEST)).message.content
    text = ""
    async for event in provider.stream(REQUEST):
        text += getattr(event, "text", "")
    return text


MODES = pytest.mark.parametrize("mode", ["complete", "stream"])


def ok(claude: Any, server: WireServer) -> Callable[[Any], Reply]:
    """Replies with "Recovered", in the form the request asks for."""
    message = claude.message([claude.text("Recovered")])

    def reply(request: Any) -> Reply:
        if request.json().get("stream"):
            return Reply.sse(claude.events(message))
        return Reply.json(message)

    return reply


@pytest.mark.anyio
@MODES
@pytest.mark.parametrize(
    "headers", [{"retry-after": "1"}, {"retry-after-ms": "1000"}], ids=["seconds", "ms"]
)
async def test_429_waits_for_retry_after(
    make_provider: MakeProvider,
    server: WireServer,
    claude: Any,
    mode: str,
    headers: dict[str, str],
) -> None:
    server.push(
        Reply.json(
            claude.error("rate_limit_error", "Number of requests exceeded"),
            status=429,
            headers=headers,
        )
    )
    server.handler = ok(claude, server)
    started = time.monotonic()
    assert await call(make_provider(max_retries=2), mode) == "Recovered"
    assert time.monotonic() - started >= 1.0
    assert len(server.requests) == 2


@pytest.mark.anyio
@MODES
@pytest.mark.parametrize("status", [500, 529])
async def test_server_errors_are_retried(
    make_provider: MakeProvider, server: WireServer, claude: Any, mode: str, status: int
) -> None:
    kind = "overloaded_error" if status == 529 else "api_error"
    server.push(Reply.json(claude.error(kind, "try again"), status=status))
    server.handler = ok(claude, server)
    assert await call(make_provider(max_retries=2), mode) == "Recovered"
    assert len(server.requests) == 2


@pytest.mark.anyio
@MODES
async def test_overloaded_until_out_of_retries(
    make_provider: MakeProvider, server: WireServer, claude: Any, mode: str
) -> None:
    server.default = Reply.json(claude.error("overloaded_error", "Overloaded"), status=529)
    with pytest.raises(ProviderError) as caught:
        await call(make_provider(max_retries=2), mode)
    message = str(caught.value)
    assert "HTTP 529" in message and "overloaded_error: Overloaded" in message
    assert "gave up after 3 attempts" in message
    assert len(server.requests) == 3


@pytest.mark.anyio
@MODES
@pytest.mark.parametrize(
    ("status", "kind", "expected"),
    [
        (400, "invalid_request_error", "the request was refused"),
        (401, "authentication_error", "the API key was rejected"),
        (403, "permission_error", "not allowed"),
        (404, "not_found_error", "model 'claude-test-1'"),
    ],
)
async def test_client_errors_are_not_retried(
    make_provider: MakeProvider,
    server: WireServer,
    claude: Any,
    api_key: str,
    mode: str,
    status: int,
    kind: str,
    expected: str,
) -> None:
    # A server that echoes the key back must not get it into the message.
    server.default = Reply.json(claude.error(kind, f"bad request for key {api_key}"), status=status)
    with pytest.raises(ProviderError) as caught:
        await call(make_provider(max_retries=3), mode)
    message = str(caught.value)
    assert f"HTTP {status}" in message and expected in message
    assert f"{kind}: bad request for key ***" in message
    assert api_key not in message
    assert not caught.value.retryable
    assert len(server.requests) == 1
    if status == 401:
        assert "ANTHROPIC_API_KEY" in message


@pytest.mark.anyio
@MODES
async def test_bearer_token_is_redacted_and_named(
    make_provider: MakeProvider, server: WireServer, claude: Any, auth_token: str, mode: str
) -> None:
    server.default = Reply.json(
        claude.error("authentication_error", f"invalid bearer token {auth_token}"), status=401
    )
    provider = make_provider(api_key=None, auth_token=SecretStr(auth_token))
    with pytest.raises(ProviderError) as caught:
        await call(provider, mode)
    message = str(caught.value)
    assert auth_token not in message
    assert "invalid bearer token ***" in message
    assert "ANTHROPIC_AUTH_TOKEN" in message


@pytest.mark.anyio
async def test_token_echoed_in_a_stream_error_is_redacted(
    make_provider: MakeProvider, server: WireServer, claude: Any, auth_token: str
) -> None:
    server.default = Reply.sse(
        [("error", claude.error("invalid_request_error", f"token {auth_token} is not allowed"))]
    )
    provider = make_provider(api_key=None, auth_token=SecretStr(auth_token))
    with pytest.raises(ProviderError) as caught:
        await call(provider, "stream")
    assert auth_token not in str(caught.value)
    assert "token *** is not allowed" in str(caught.value)


@pytest.mark.anyio
@MODES
async def test_a_hung_server_times_out(
    make_provider: MakeProvider, server: WireServer, claude: Any, mode: str
) -> None:
    server.default = Reply.json(claude.message([claude.text("late")]), hang_before=1.5)
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        await call(make_provider(timeout_seconds=0.3, max_retries=0), mode)
    assert time.monotonic() - started < 1.4
    assert "timed out after 0.3 s" in str(caught.value)
    assert caught.value.retryable


@pytest.mark.anyio
async def test_nothing_listening(provider_options: Callable[..., Any]) -> None:
    with WireServer() as gone:
        url = gone.url
    provider = AnthropicProvider(provider_options(url, max_retries=0))
    try:
        with pytest.raises(ProviderError, match=r"connection to .* failed"):
            await provider.complete(REQUEST)
    finally:
        await provider.aclose()
