"""``HTTPProvider`` against a real loopback server: retries, errors, timeouts, streams."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from koboi.config import validate_config
from koboi.errors import ConfigError, ProviderError
from koboi.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ResponseDone,
    TextDelta,
)
from koboi.provider import collect_reports
from koboi_http import HTTPProvider, HTTPProviderOptions, SSEEvent
from koboi_http.keys import looks_like_placeholder, resolve_api_key
from koboi_http.retry import RetryPolicy, retry_after_seconds
from koboi_testing.wire import Reply, WireServer

pytestmark = pytest.mark.anyio

KEY = "kb-Zq8vW2nR5tY7uI9oP1aS3dF6gH8jK0lX"
REQUEST = ModelRequest(messages=[Message.user("hi")])


class EchoOptions(HTTPProviderOptions):
    api_key_env = ("ECHO_API_KEY",)


class Echo(HTTPProvider[EchoOptions]):
    """A minimal API: POST /chat; JSON {"text"}; stream: data {"t"} ... data [DONE]."""

    name = "echo"

    def endpoint(self, request: ModelRequest, *, stream: bool) -> str:
        return "chat"

    def auth_headers(self) -> dict[str, str]:
        assert self.options.api_key is not None
        return {"authorization": f"Bearer {self.options.api_key.get_secret_value()}"}

    def build_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        return {"input": request.messages[-1].content, "stream": stream}

    def parse_response(self, body: Any) -> ModelResponse:
        if not isinstance(body, dict) or not isinstance(body.get("text"), str):
            raise ProviderError(f"echo: unexpected reply {body!r}")
        return ModelResponse(message=Message.assistant(body["text"]))

    async def parse_stream(
        self, events: AsyncIterator[SSEEvent]
    ) -> AsyncIterator[ModelStreamEvent]:
        text = ""
        async for event in events:
            if event.data == "[DONE]":
                yield ResponseDone(response=ModelResponse(message=Message.assistant(text)))
                return
            piece = self.decode_event_json(event)["t"]
            text += piece
            yield TextDelta(text=piece)


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer() as wire:
        yield wire


def echo(server: WireServer, **options: Any) -> Echo:
    settings: dict[str, Any] = {
        "model": "m",
        "base_url": server.url,
        "api_key": KEY,
        "retry_initial_delay": 0.01,
        "retry_max_delay": 0.02,
        **options,
    }
    return Echo(EchoOptions(**settings))


async def complete(provider: Echo) -> ModelResponse:
    try:
        return await provider.complete(REQUEST)
    finally:
        await provider.aclose()


async def stream(provider: Echo) -> list[ModelStreamEvent]:
    events: list[ModelStreamEvent] = []
    try:
        async for event in provider.stream(REQUEST):
            events.append(event)
    finally:
        await provider.aclose()
    return events


# -- success ----------------------------------------------------------------------------


async def test_complete_sends_the_body_and_the_credential(server: WireServer) -> None:
    server.push(Reply.json({"text": "hello"}))
    response = await complete(echo(server, headers={"x-team": "blue"}))
    assert response.message.content == "hello"
    sent = server.requests[0]
    assert (sent.method, sent.path) == ("POST", "/chat")
    assert sent.json() == {"input": "hi", "stream": False}
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["x-team"] == "blue"


async def test_stream_reassembles_text_split_anywhere(server: WireServer) -> None:
    server.push(Reply.sse([{"t": "héllo "}, {"t": "wörld ☀️"}, "[DONE]"], chunk_size=3))
    events = await stream(echo(server))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["héllo ", "wörld ☀️"]
    assert isinstance(events[-1], ResponseDone)


async def test_a_server_that_ignores_stream_is_read_as_json(server: WireServer) -> None:
    server.push(Reply.json({"text": "whole"}))
    events = await stream(echo(server))
    assert [type(e) for e in events] == [TextDelta, ResponseDone]


# -- retries ----------------------------------------------------------------------------


async def test_500_then_success_is_retried_and_reported(server: WireServer) -> None:
    server.push(Reply.json({"error": {"message": "oops"}}, status=500), Reply.json({"text": "ok"}))
    with collect_reports() as reports:
        response = await complete(echo(server))
    assert response.message.content == "ok"
    assert len(server.requests) == 2
    assert [r.kind for r in reports] == ["retry"]
    assert reports[0].data["attempt"] == 1
    assert "HTTP 500" in reports[0].data["reason"]


@pytest.mark.parametrize("header", [{"retry-after": "1"}, {"retry-after-ms": "1000"}])
async def test_429_honours_retry_after(server: WireServer, header: dict[str, str]) -> None:
    server.push(
        Reply.json({"error": {"message": "slow down"}}, status=429, headers=header),
        Reply.json({"text": "ok"}),
    )
    started = time.monotonic()
    response = await complete(echo(server))
    assert time.monotonic() - started >= 1.0
    assert response.message.content == "ok"
    assert len(server.requests) == 2


async def test_a_retry_after_beyond_the_cap_fails_instead_of_waiting(server: WireServer) -> None:
    server.push(
        Reply.json({"error": {"message": "later"}}, status=429, headers={"retry-after": "3600"})
    )
    started = time.monotonic()
    with pytest.raises(ProviderError, match="asked to wait 3600 s"):
        await complete(echo(server, max_retry_after_seconds=5))
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("status", [408, 409, 429, 502, 503, 529])
async def test_retryable_statuses(server: WireServer, status: int) -> None:
    server.push(Reply.json({"error": {"message": "x"}}, status=status), Reply.json({"text": "ok"}))
    assert (await complete(echo(server))).message.content == "ok"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_other_4xx_are_not_retried(server: WireServer, status: int) -> None:
    server.default = Reply.json({"error": {"message": "no"}}, status=status)
    with pytest.raises(ProviderError) as info:
        await complete(echo(server))
    assert len(server.requests) == 1
    assert info.value.status == status
    assert not info.value.retryable


async def test_gives_up_after_max_retries_and_says_so(server: WireServer) -> None:
    server.default = Reply.json({"error": {"message": "down"}}, status=503)
    with pytest.raises(ProviderError, match=r"HTTP 503.*down.*gave up after 3 attempts"):
        await complete(echo(server, max_retries=2))
    assert len(server.requests) == 3


async def test_connection_refused_is_retried_then_explained() -> None:
    with WireServer() as gone:
        url = gone.url
    provider = Echo(EchoOptions(model="m", base_url=url, api_key=KEY, retry_initial_delay=0.01))
    with pytest.raises(ProviderError, match=r"connection to .* failed"):
        await complete(provider)


# -- errors -----------------------------------------------------------------------------


async def test_401_says_the_key_was_rejected_and_never_shows_it(server: WireServer) -> None:
    server.push(
        Reply.json({"error": {"message": f"Incorrect API key provided: {KEY}"}}, status=401)
    )
    with pytest.raises(ProviderError) as info:
        await complete(echo(server))
    text = str(info.value)
    assert "the API key was rejected" in text
    assert "ECHO_API_KEY" in text
    assert KEY not in text


async def test_404_names_the_model(server: WireServer) -> None:
    server.push(Reply.json({"error": {"message": "no such model"}}, status=404))
    with pytest.raises(ProviderError, match="model 'm' or the endpoint was not found"):
        await complete(echo(server))


async def test_malformed_json_body_is_a_clear_error(server: WireServer) -> None:
    server.push(Reply.raw("{not json"))
    with pytest.raises(ProviderError, match=re.escape("not valid JSON: '{not json'")):
        await complete(echo(server))
    assert len(server.requests) == 1


async def test_malformed_sse_data_is_a_clear_error(server: WireServer) -> None:
    server.push(Reply.sse(["{broken"]))
    with pytest.raises(ProviderError, match="event that is not valid JSON"):
        await stream(echo(server))


async def test_hung_server_times_out(server: WireServer) -> None:
    server.push(Reply.json({"text": "late"}, hang_before=10))
    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"timed out after 0.3 s"):
        await complete(echo(server, timeout_seconds=0.3, max_retries=0))
    assert time.monotonic() - started < 3


async def test_stream_that_stalls_midway_times_out_after_delivering_text(
    server: WireServer,
) -> None:
    server.push(Reply.sse([{"t": "a"}, {"t": "b"}, "[DONE]"], stall_after=1, stall_seconds=5))
    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"timed out after 0\.3 s") as info:
        await stream(echo(server, timeout_seconds=0.3))
    assert info.value.emitted
    assert time.monotonic() - started < 3
    assert len(server.requests) == 1


# -- streams that break -------------------------------------------------------------------


async def test_stream_broken_before_any_text_is_retried_from_scratch(server: WireServer) -> None:
    server.push(
        Reply.sse([{"t": "a"}, "[DONE]"], drop_after=0),
        Reply.sse([{"t": "whole"}, "[DONE]"]),
    )
    events = await stream(echo(server))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "whole"
    assert len(server.requests) == 2


async def test_stream_broken_after_text_fails_cleanly_without_retry(server: WireServer) -> None:
    server.push(Reply.sse([{"t": "The answer "}, {"t": "is"}, "[DONE]"], drop_after=1))
    seen: list[ModelStreamEvent] = []

    async def consume() -> None:
        provider = echo(server)
        try:
            async for event in provider.stream(REQUEST):
                seen.append(event)
        finally:
            await provider.aclose()

    with pytest.raises(ProviderError) as info:
        await consume()
    assert info.value.emitted
    assert "after 11 characters had been delivered" in str(info.value)
    assert len(server.requests) == 1
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["The answer "]


async def test_stream_without_its_final_event_is_an_error(server: WireServer) -> None:
    server.push(Reply.sse([]))
    with pytest.raises(ProviderError, match="ended without a final event"):
        await stream(echo(server, max_retries=0))


# -- keys, options, policy --------------------------------------------------------------------


def test_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ECHO_API_KEY", KEY)
    options = EchoOptions(model="m", base_url="http://x")
    assert options.api_key is not None
    assert options.api_key.get_secret_value() == KEY
    assert KEY not in repr(options)


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ECHO_API_KEY", raising=False)
    with pytest.raises(ValueError, match="set ECHO_API_KEY"):
        EchoOptions(model="m", base_url="http://x")


@pytest.mark.parametrize(
    "value",
    [
        "",
        "sk-...",
        "sk-xxxx",
        "<your key>",
        "your-api-key-here",
        "changeme",
        "${KEY}",
        "your-cloudflare-api-token-here",
        "sk-proj-REPLACE_WITH_YOUR_KEY_0123456789",
    ],
)
def test_placeholders_are_refused(value: str) -> None:
    assert looks_like_placeholder(value)
    with pytest.raises(ValueError, match=r"placeholder|no API key") as info:
        resolve_api_key(SecretStr(value) if value else None, ["ECHO_API_KEY"])
    assert "ECHO_API_KEY" in str(info.value)


@pytest.mark.parametrize(
    "value", [KEY, "sk-proj-abcDEF123ghiJKL456mnoPQR789here", "sk-ant-api03-Zx9_Yw8-Vu7"]
)
def test_real_looking_keys_are_accepted(value: str) -> None:
    assert not looks_like_placeholder(value)


def test_replay_mode_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ECHO_API_KEY", raising=False)
    options = EchoOptions.model_validate(
        {"model": "m", "base_url": "http://x"}, context={"cache_mode": "replay"}
    )
    assert options.api_key is None


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert (
        retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470) == 10
    )
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(initial_delay=1.0, max_delay=4.0)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 4.0)]:
        delays = [policy.delay(attempt) for _ in range(50)]
        assert all(0 <= d <= ceiling for d in delays)
    assert policy.delay(1, retry_after=3.0) >= 3.0


def test_a_config_with_a_missing_key_fails_validation_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Through the kernel: the openai plugin, if installed, uses this same base.
    pytest.importorskip("koboi_openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        validate_config({"llm": {"provider": "openai", "model": "gpt-4o-mini"}})
