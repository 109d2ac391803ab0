"""HTTP failures through the shared layer: retries, refusals, timeouts, no token leaks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from koboi.errors import ProviderError
from koboi.messages import Message, ModelRequest
from koboi_cloudflare.provider import CloudflareProvider
from koboi_testing.wire import WireServer

Make = Callable[..., CloudflareProvider]
ASK = ModelRequest(messages=[Message.user("hi")])


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("headers", "wait"),
    [({"retry-after": "1"}, 1.0), ({"retry-after-ms": "300"}, 0.3)],
    ids=["retry-after", "retry-after-ms"],
)
async def test_429_is_retried_after_the_wait_it_asks_for(
    server: WireServer, make_provider: Make, cf: Any, headers: dict[str, str], wait: float
) -> None:
    server.push(cf.failure(3040, "Capacity temporarily exceeded", status=429, headers=headers))
    server.push(cf.ok({"response": "after the wait"}))
    started = time.monotonic()
    response = await make_provider().complete(ASK)
    assert time.monotonic() - started >= wait
    assert response.message.content == "after the wait"
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_500_then_success(server: WireServer, make_provider: Make, cf: Any) -> None:
    server.push(cf.failure(3043, "Internal server error", status=500))
    server.push(cf.sse([{"response": "fine"}]))
    events = [e async for e in make_provider().stream(ASK)]
    assert events[-1].kind == "done"
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_persistent_5xx_gives_up_after_max_retries(
    server: WireServer, make_provider: Make, cf: Any
) -> None:
    server.default = cf.failure(3043, "Internal server error", status=503)
    with pytest.raises(ProviderError) as caught:
        await make_provider(max_retries=2).complete(ASK)
    assert "gave up after 3 attempts" in str(caught.value)
    assert "Internal server error (code 3043)" in str(caught.value)
    assert len(server.requests) == 3


@pytest.mark.anyio
@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_client_errors_are_not_retried(
    server: WireServer, make_provider: Make, cf: Any, status: int
) -> None:
    # Cloudflare's own words for a bad token echo nothing of it; a careless
    # proxy might, so the reply here does, and the message must still not.
    server.default = cf.failure(10000, f"Authentication error for {cf.token}", status=status)
    with pytest.raises(ProviderError) as caught:
        await make_provider().complete(ASK)
    message = str(caught.value)
    assert len(server.requests) == 1
    assert caught.value.status == status
    assert cf.token not in message
    assert "***" in message
    if status == 401:
        assert "the API key was rejected" in message
        assert "CLOUDFLARE_API_TOKEN" in message
    if status == 404:
        assert cf.model in message


@pytest.mark.anyio
async def test_hung_server_times_out(server: WireServer, make_provider: Make, cf: Any) -> None:
    server.default = cf.ok({"response": "too late"}, hang_before=3.0)
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        await make_provider(timeout_seconds=0.3, max_retries=0).complete(ASK)
    assert time.monotonic() - started < 2.5
    assert "timed out after 0.3 s" in str(caught.value)
    assert caught.value.retryable is True
