"""Fixtures: a scripted loopback server speaking Workers AI, and providers pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

import pytest

from koboi_cloudflare.config import CloudflareOptions
from koboi_cloudflare.provider import CloudflareProvider
from koboi_testing.wire import Reply, WireServer

ACCOUNT = "0123456789abcdef0123456789abcdef"
# Shaped like a real token (40 URL-safe characters), so the placeholder check lets it through.
TOKEN = "Zq3VtR8nXw2LpK7mYc4BhD9sFj6GaE1uTo5NiQ0r"
MODEL = "@cf/meta/llama-3.3-70b-instruct-fp8-fast"


class CF:
    """What the tests need to speak the API: ids, the run path, reply builders."""

    account = ACCOUNT
    token = TOKEN
    model = MODEL
    path = f"/client/v4/accounts/{ACCOUNT}/ai/run/{MODEL}"

    @staticmethod
    def envelope(result: Any) -> dict[str, Any]:
        return {"result": result, "success": True, "errors": [], "messages": []}

    @staticmethod
    def ok(result: Any, **kw: Any) -> Reply:
        return Reply.json(CF.envelope(result), **kw)

    @staticmethod
    def failure(code: int, message: str, *, status: int = 400, **kw: Any) -> Reply:
        body = {"result": None, "success": False, "errors": [{"code": code, "message": message}]}
        return Reply.json(body, status=status, **kw)

    @staticmethod
    def sse(chunks: Iterable[Any], *, done: bool = True, **kw: Any) -> Reply:
        return Reply.sse([*chunks, *(["[DONE]"] if done else [])], **kw)


@pytest.fixture
def cf() -> type[CF]:
    return CF


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer() as wire:
        yield wire


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No Cloudflare variables from the developer's shell."""
    monkeypatch.delenv("CLOUDFLARE_API_TOKEN", raising=False)
    monkeypatch.delenv("CLOUDFLARE_ACCOUNT_ID", raising=False)
    return monkeypatch


def options_for(url: str, **overrides: Any) -> CloudflareOptions:
    settings: dict[str, Any] = {
        "model": MODEL,
        "base_url": url + "/client/v4",
        "api_key": TOKEN,
        "account_id": ACCOUNT,
        "timeout_seconds": 5.0,
        "connect_timeout_seconds": 2.0,
        "retry_initial_delay": 0.01,
        "retry_max_delay": 0.05,
        **overrides,
    }
    return CloudflareOptions.model_validate(settings)


@pytest.fixture
async def make_provider(
    server: WireServer, clean_env: pytest.MonkeyPatch
) -> AsyncIterator[Callable[..., CloudflareProvider]]:
    """``make_provider(**options)``: a provider for ``server``; closed after the test."""
    made: list[CloudflareProvider] = []

    def make(**overrides: Any) -> CloudflareProvider:
        provider = CloudflareProvider(options_for(server.url, **overrides))
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()
