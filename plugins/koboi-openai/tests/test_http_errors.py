"""HTTP failures as the OpenAI API produces them: retries, Retry-After, refusals, hangs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from koboi.errors import ProviderError
from koboi.messages import Message, ModelRequest, TextDelta
from koboi_openai.provider import OpenAIProvider
from koboi_testing.wire import Reply, WireServer

Maker = Callable[..., OpenAIProvider]
ASK = ModelRequest(messages=[Message.user("hi")])


async def _call(provider: OpenAIProvider, mode: str) -> None:
    if mode == "complete":
        await provider.complete(ASK)
    else:
        [e async for e in provider.stream(ASK)]


def _rate_limited(wire: Any, headers: dict[str, str]) -> Reply:
    return Reply.json(
        wire.error(
            "Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit 3, Used 3.",
            "requests",
            "rate_limit_exceeded",
        ),
        status=429,
        headers=headers,
    )


@pytest.mark.anyio
async def test_429_with_retry_after_is_retried_after_the_wait(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.push(_rate_limited(wire, {"retry-after": "1"}), Reply.json(wire.completion("ok")))
    started = time.monotonic()
    response = await make_provider().complete(ASK)
    elapsed = time.monotonic() - started
    assert response.message.content == "ok"
    assert len(server.requests) == 2
    assert elapsed >= 1.0


@pytest.mark.anyio
async def test_429_with_retry_after_ms_while_streaming(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.push(
        _rate_limited(wire, {"retry-after-ms": "300"}), Reply.sse(wire.text_chunks(["o", "k"]))
    )
    started = time.monotonic()
    events = [e async for e in make_provider().stream(ASK)]
    assert time.monotonic() - started >= 0.3
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "ok"
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_500_then_success(server: WireServer, make_provider: Maker, wire: Any) -> None:
    server.push(
        Reply.json(wire.error("The server had an error", "server_error"), status=500),
        Reply.json(wire.completion("ok")),
    )
    assert (await make_provider().complete(ASK)).message.content == "ok"
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_persistent_503_gives_up_after_the_retries(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    server.default = Reply.json(wire.error("Overloaded", "server_error"), status=503)
    with pytest.raises(ProviderError) as caught:
        await make_provider(max_retries=2).complete(ASK)
    assert caught.value.status == 503
    assert "gave up after 3 attempts" in str(caught.value)
    assert len(server.requests) == 3


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "error", "says"),
    [
        (400, ("Invalid 'messages[1].content'", "invalid_request_error", None), "refused"),
        (
            404,
            ("The model `gpt-9` does not exist", "invalid_request_error", "model_not_found"),
            "not found",
        ),
        (422, ("Unprocessable", "invalid_request_error", None), "refused"),
    ],
)
async def test_client_errors_are_not_retried(
    server: WireServer,
    make_provider: Maker,
    wire: Any,
    status: int,
    error: tuple[str, str, str | None],
    says: str,
) -> None:
    server.default = Reply.json(wire.error(*error), status=status)
    with pytest.raises(ProviderError) as caught:
        await make_provider().complete(ASK)
    message = str(caught.value)
    assert caught.value.status == status
    assert caught.value.retryable is False
    assert says in message
    assert error[0] in message
    if error[2]:
        assert f"code: {error[2]}" in message
    assert len(server.requests) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["complete", "stream"])
async def test_401_says_the_key_was_rejected_and_where_it_came_from(
    server: WireServer, make_provider: Maker, wire: Any, mode: str, secret: str
) -> None:
    # OpenAI echoes a masked key; a careless server might echo all of it.
    server.default = Reply.json(
        wire.error(
            f"Incorrect API key provided: {secret}.", "invalid_request_error", "invalid_api_key"
        ),
        status=401,
    )
    provider = make_provider()
    with pytest.raises(ProviderError) as caught:
        await _call(provider, mode)
    message = str(caught.value)
    assert "API key was rejected" in message
    assert "check api_key" in message
    assert secret not in message
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_401_from_a_keyless_compatible_server_says_openai_key_was_not_sent(
    server: WireServer, make_provider: Maker, wire: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-REALUSERKEY0123456789abcdef")
    server.default = Reply.json(wire.error("Missing API key", "auth_error"), status=401)
    with pytest.raises(ProviderError) as caught:
        await make_provider(api_key=None).complete(ASK)
    message = str(caught.value)
    assert "OPENAI_API_KEY is never sent" in message
    assert "api_key_env_var" in message
    assert "REALUSERKEY" not in message


@pytest.mark.anyio
async def test_401_names_the_variable_the_key_came_from(
    server: WireServer, make_provider: Maker, wire: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KOBOI_TEST_KEY", "sk-or-v1-0123456789abcdef0123456789")
    server.default = Reply.json(wire.error("No auth credentials found", code=401), status=401)
    with pytest.raises(ProviderError) as caught:
        await make_provider(api_key=None, api_key_env_var="KOBOI_TEST_KEY").complete(ASK)
    assert "check KOBOI_TEST_KEY" in str(caught.value)
    assert "0123456789abcdef0123456789" not in str(caught.value)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["complete", "stream"])
async def test_a_hung_server_times_out(
    server: WireServer, make_provider: Maker, wire: Any, mode: str
) -> None:
    server.default = Reply.json(wire.completion("too late"), hang_before=1.0)
    provider = make_provider(timeout_seconds=0.2, max_retries=0)
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        await _call(provider, mode)
    assert time.monotonic() - started < 0.9
    assert "timed out" in str(caught.value)
    assert caught.value.retryable is True


@pytest.mark.anyio
async def test_a_stream_that_stalls_between_chunks_times_out(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    # Headers at once, then each event 0.6 s apart: longer than the read timeout.
    server.default = Reply.sse(wire.text_chunks(["a", "b"]), delay=0.6)
    started = time.monotonic()
    with pytest.raises(ProviderError, match="timed out"):
        [e async for e in make_provider(timeout_seconds=0.2, max_retries=0).stream(ASK)]
    assert time.monotonic() - started < 1.5


@pytest.mark.anyio
async def test_a_dropped_connection_is_retried_when_nothing_was_delivered(
    server: WireServer, make_provider: Maker, wire: Any
) -> None:
    broken = Reply.sse(wire.text_chunks(["never"]), drop_after=0)
    server.push(broken, Reply.sse(wire.text_chunks(["fine"])))
    events = [e async for e in make_provider().stream(ASK)]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "fine"
    assert len(server.requests) == 2
