"""``HTTPProvider``: the part of a model provider that is about HTTP, not about the API.

A subclass describes its API:

- :meth:`HTTPProvider.endpoint` and :meth:`HTTPProvider.auth_headers`;
- :meth:`HTTPProvider.build_body` turns a :class:`~koboi.messages.ModelRequest`
  into the JSON body;
- :meth:`HTTPProvider.parse_response` turns a JSON body into a
  :class:`~koboi.messages.ModelResponse`;
- :meth:`HTTPProvider.parse_stream` turns the SSE events of a streamed reply
  into text deltas and one final ``ResponseDone``.

The base class owns everything else: one pooled ``httpx.AsyncClient`` (made
by :func:`koboi_http.client` with peer ``provider``, so every request runs the
plugins' request hooks and carries the run's trace context), timeouts, retries with backoff and ``Retry-After``, readable errors with the
key redacted, and the rule for streams: a stream that fails before anything
reached the caller is retried from scratch; one that fails after raises a
``ProviderError`` with ``emitted=True`` that says how much had been delivered.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar, Generic, TypeVar

import anyio
import httpx

from koboi.errors import ProviderError
from koboi.messages import (
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ResponseDone,
    TextDelta,
    loads_json,
)
from koboi.provider import ModelProvider, report
from koboi_http.hooks import PROVIDER
from koboi_http.options import HTTPProviderOptions
from koboi_http.outbound import client
from koboi_http.retry import RetryPolicy, is_retryable_status, retry_after_seconds
from koboi_http.sse import SSEEvent, aiter_sse

O = TypeVar("O", bound=HTTPProviderOptions)  # noqa: E741

_MAX_ERROR_TEXT = 300


class HTTPProvider(ModelProvider, Generic[O]):
    """Base class of HTTP model providers; see the module docstring."""

    #: Context windows of the models this API serves, by model-name prefix: the
    #: longest prefix of ``model`` found here is the window :meth:`context_window`
    #: states (None for a model it does not know; a config sets ``context_window``).
    context_windows: ClassVar[Mapping[str, int]] = {}

    def __init__(self, options: O, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.options = options
        self.model = options.model
        self.policy = RetryPolicy(
            max_retries=options.max_retries,
            initial_delay=options.retry_initial_delay,
            max_delay=options.retry_max_delay,
            max_retry_after=options.max_retry_after_seconds,
        )
        self._secrets = tuple(
            s for s in (options.api_key.get_secret_value() if options.api_key else None,) if s
        )
        timeout = httpx.Timeout(
            options.timeout_seconds,
            connect=options.connect_timeout_seconds,
        )
        self._client = client(
            peer=PROVIDER,
            base_url=options.base_url.rstrip("/") + "/",
            timeout=timeout,
            transport=transport,
            headers={"user-agent": "koboi", **self.auth_headers(), **options.headers},
            follow_redirects=False,
        )

    # -- what a subclass says about its API ------------------------------

    @abstractmethod
    def endpoint(self, request: ModelRequest, *, stream: bool) -> str:
        """Path of the call, relative to ``base_url``."""

    @abstractmethod
    def auth_headers(self) -> dict[str, str]:
        """Headers that carry the credential (they never appear in any message)."""

    @abstractmethod
    def build_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """The JSON body for ``request``."""

    @abstractmethod
    def parse_response(self, body: Any) -> ModelResponse:
        """Turn a decoded JSON reply into a response; raise ``ProviderError`` if it is not one."""

    @abstractmethod
    def parse_stream(self, events: AsyncIterator[SSEEvent]) -> AsyncIterator[ModelStreamEvent]:
        """Turn SSE events into text deltas and one final ``ResponseDone``.

        Raise ``ProviderError`` for an error event or a stream that ends
        without its final event.
        """

    def error_message(self, body: Any) -> str | None:
        """The human-readable message in an error body, if the API put one there."""
        if isinstance(body, Mapping):
            error = body.get("error")
            if isinstance(error, Mapping) and isinstance(error.get("message"), str):
                return str(error["message"])
            if isinstance(error, str):
                return error
            errors = body.get("errors")
            if isinstance(errors, list) and errors and isinstance(errors[0], Mapping):
                message = errors[0].get("message")
                if isinstance(message, str):
                    return message
            for key in ("message", "detail"):
                if isinstance(body.get(key), str):
                    return str(body[key])
        return None

    # -- ModelProvider -----------------------------------------------------

    async def complete(self, request: ModelRequest) -> ModelResponse:
        body = self.build_body(request, stream=False)
        path = self.endpoint(request, stream=False)
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._client.post(path, json=body)
                if response.status_code >= 400:
                    raise self._status_error(response, await response.aread())
                payload = self._decode_json(response.content)
                return self.parse_response(payload)
            except (httpx.HTTPError, ProviderError) as exc:
                error = self._as_provider_error(exc)
                await self._backoff_or_raise(error, attempt, exc)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        body = self.build_body(request, stream=True)
        path = self.endpoint(request, stream=True)
        attempt = 0
        while True:
            attempt += 1
            delivered = 0
            try:
                async with self._client.stream("POST", path, json=body) as response:
                    if response.status_code >= 400:
                        raise self._status_error(response, await response.aread())
                    content_type = response.headers.get("content-type", "")
                    if "text/event-stream" not in content_type:
                        # Some compatible servers ignore "stream": answer with JSON.
                        payload = self._decode_json(await response.aread())
                        final = self.parse_response(payload)
                        if final.message.content:
                            yield TextDelta(text=final.message.content)
                        yield ResponseDone(response=final)
                        return
                    async for item in self.parse_stream(aiter_sse(response.aiter_bytes())):
                        if isinstance(item, TextDelta):
                            delivered += len(item.text)
                        yield item
                        if isinstance(item, ResponseDone):
                            return
                raise ProviderError(f"{self.name}: the stream ended without a final event")
            except (httpx.HTTPError, ProviderError) as exc:
                error = self._as_provider_error(exc)
                if delivered:
                    raise ProviderError(
                        f"{error} (the stream broke after {delivered} characters had been "
                        "delivered; not retried, since a retry would repeat them)",
                        status=error.status,
                        retryable=False,
                        emitted=True,
                    ) from None
                await self._backoff_or_raise(error, attempt, exc)

    async def aclose(self) -> None:
        await self._client.aclose()

    def context_window(self) -> int | None:
        known = [prefix for prefix in self.context_windows if self.model.startswith(prefix)]
        return self.context_windows[max(known, key=len)] if known else None

    def cache_identity(self) -> dict[str, Any]:
        # The options sent in every body (temperature, seed...) change the answers;
        # the endpoint, timeouts and credentials do not.
        return {**super().cache_identity(), "options": self.options.options}

    # -- failures ----------------------------------------------------------

    async def _backoff_or_raise(self, error: ProviderError, attempt: int, cause: Exception) -> None:
        retry_after = error.retry_after
        if not error.retryable or attempt > self.policy.max_retries:
            if error.retryable and attempt > 1:
                raise ProviderError(
                    f"{error} (gave up after {attempt} attempts)",
                    status=error.status,
                    retryable=True,
                ) from None
            raise error from None
        if retry_after is not None and retry_after > self.policy.max_retry_after:
            raise ProviderError(
                f"{error} (the server asked to wait {retry_after:.0f} s, more than "
                f"max_retry_after_seconds={self.policy.max_retry_after:g})",
                status=error.status,
                retryable=True,
            ) from None
        delay = self.policy.delay(attempt, retry_after)
        report(
            "retry",
            provider=self.name,
            model=self.model,
            attempt=attempt,
            delay_seconds=round(delay, 3),
            reason=str(error),
        )
        await anyio.sleep(delay)

    def _as_provider_error(self, exc: Exception) -> ProviderError:
        if isinstance(exc, ProviderError):
            return exc
        if isinstance(exc, httpx.TimeoutException):
            kind = "connecting" if isinstance(exc, httpx.ConnectTimeout) else "waiting for data"
            limit = (
                self.options.connect_timeout_seconds
                if isinstance(exc, httpx.ConnectTimeout)
                else self.options.timeout_seconds
            )
            return ProviderError(
                f"{self.name}: timed out after {limit:g} s {kind} from {self._where()}",
                retryable=True,
            )
        if isinstance(exc, httpx.TransportError):
            what = type(exc).__name__
            detail = self.redact(str(exc)) or "no detail"
            return ProviderError(
                f"{self.name}: connection to {self._where()} failed ({what}: {detail})",
                retryable=True,
            )
        return ProviderError(f"{self.name}: {self.redact(str(exc)) or type(exc).__name__}")

    def _status_error(self, response: httpx.Response, raw: bytes) -> ProviderError:
        status = response.status_code
        try:
            detail = self.error_message(json.loads(raw)) if raw else None
        except ValueError:
            detail = None
        if detail is None:
            detail = raw[:_MAX_ERROR_TEXT].decode("utf-8", "replace").strip() or None
        detail_text = f": {self.redact(detail)}" if detail else ""
        if status in (401, 403):
            what = "was rejected" if status == 401 else "is not allowed to do this"
            message = (
                f"{self.name}: HTTP {status}, the API key {what}{detail_text} "
                f"(check {self.options.key_hint})"
            )
        elif status == 404:
            message = (
                f"{self.name}: HTTP 404, model {self.model!r} or the endpoint was not found "
                f"at {self._where()}{detail_text}"
            )
        elif status == 429:
            message = f"{self.name}: HTTP 429, rate limited{detail_text}"
        elif status >= 500:
            message = f"{self.name}: HTTP {status}, server error{detail_text}"
        else:
            message = f"{self.name}: HTTP {status}, the request was refused{detail_text}"
        return ProviderError(
            message,
            status=status,
            retryable=is_retryable_status(status),
            retry_after=retry_after_seconds(response.headers),
        )

    def _decode_json(self, raw: bytes) -> Any:
        try:
            return loads_json(raw)
        except ValueError:
            snippet = self.redact(raw[:120].decode("utf-8", "replace"))
            raise ProviderError(
                f"{self.name}: the server's reply is not valid JSON: {snippet!r}"
            ) from None

    def decode_event_json(self, event: SSEEvent) -> Any:
        """The JSON in an SSE event's data, or a ``ProviderError`` saying it is malformed."""
        try:
            return loads_json(event.data)
        except ValueError:
            snippet = self.redact(event.data[:120])
            raise ProviderError(
                f"{self.name}: the stream sent an event that is not valid JSON: {snippet!r}"
            ) from None

    def _where(self) -> str:
        return str(self._client.base_url).rstrip("/")

    def redact(self, text: str) -> str:
        """``text`` shortened, with this provider's credentials removed wherever they appear.

        Use it on any server text that goes into an error (an error event in a
        stream, an error inside a 200 reply). Subclasses with more than one
        credential add them to ``self._secrets``.
        """
        for secret in self._secrets:
            text = text.replace(secret, "***")
        text = " ".join(text.split())
        return text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT] + "..."
