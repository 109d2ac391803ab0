"""``AnthropicProvider``: Claude through the Anthropic Messages API (``POST /v1/messages``).

What is about HTTP (retries, timeouts, errors, the SSE decoder) is
:class:`koboi_http.HTTPProvider`'s; the translation to and from the API's
JSON is in :mod:`koboi_anthropic.convert`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

from koboi.errors import ProviderError
from koboi.messages import ModelRequest, ModelResponse, ModelStreamEvent, ResponseDone, TextDelta
from koboi_anthropic import convert
from koboi_anthropic.options import AnthropicOptions
from koboi_http.provider import HTTPProvider
from koboi_http.sse import SSEEvent


class AnthropicProvider(HTTPProvider[AnthropicOptions]):
    """A :class:`~koboi.provider.ModelProvider` for Claude models."""

    name = "anthropic"
    #: Every Claude model takes 200k tokens (a larger beta window needs its header
    #: and a ``context_window`` in the config).
    context_windows = {"claude-": 200_000}

    def __init__(
        self, options: AnthropicOptions, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        super().__init__(options, transport=transport)
        # The base class redacts only options.api_key from error messages.
        if options.auth_token is not None:
            self._secrets = (*self._secrets, options.auth_token.get_secret_value())
        # options.headers (already set by the base class) may override these.
        self._client.headers.setdefault("anthropic-version", options.anthropic_version)
        self._client.headers.setdefault("content-type", "application/json")

    # -- the API -------------------------------------------------------------

    def endpoint(self, request: ModelRequest, *, stream: bool) -> str:
        return "v1/messages"

    def auth_headers(self) -> dict[str, str]:
        if self.options.auth_token is not None:
            return {"authorization": f"Bearer {self.options.auth_token.get_secret_value()}"}
        if self.options.api_key is not None:
            return {"x-api-key": self.options.api_key.get_secret_value()}
        return {}

    def build_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        instruction = convert.structured_output_instruction(request.response_format)
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.options.max_tokens}
        system = convert.system_prompt(request.messages, instruction)
        if system is not None:
            body["system"] = system
        body["messages"] = convert.to_messages(request.messages)
        if request.tools:
            body["tools"] = convert.tool_definitions(request.tools)
        body.update(self.options.options)
        body.update(request.options)
        # An option set to None removes the key (e.g. a request that drops temperature).
        body = {key: value for key, value in body.items() if value is not None}
        if stream:
            body["stream"] = True
        else:
            body.pop("stream", None)
        return body

    def parse_response(self, body: Any) -> ModelResponse:
        try:
            return convert.parse_message(body, self.model)
        except ProviderError as exc:
            raise self._redacted(exc) from None

    async def parse_stream(
        self, events: AsyncIterator[SSEEvent]
    ) -> AsyncIterator[ModelStreamEvent]:
        state = convert.StreamState(default_model=self.model)
        async for event in events:
            if event.event == "ping":
                continue
            try:
                text = state.feed(self.decode_event_json(event))
            except ProviderError as exc:
                # What the server said goes through the same redaction as HTTP errors.
                raise self._redacted(exc) from None
            if text:
                yield TextDelta(text=text)
            if state.done:
                yield ResponseDone(response=state.response())
                return

    def cache_identity(self) -> dict[str, Any]:
        # What changes the answer besides the request. Never the credential, nor
        # headers (a gateway's may carry one).
        return {
            **super().cache_identity(),
            "max_tokens": self.options.max_tokens,
            "anthropic_version": self.options.anthropic_version,
        }

    def error_message(self, body: Any) -> str | None:
        return convert.error_text(body) or super().error_message(body)

    def _redacted(self, exc: ProviderError) -> ProviderError:
        return ProviderError(
            self.redact(str(exc)),
            status=exc.status,
            retryable=exc.retryable,
            emitted=exc.emitted,
            retry_after=exc.retry_after,
        )
