"""``OpenAIProvider``: OpenAI's Chat Completions API, and every server that speaks it.

``koboi_http.HTTPProvider`` does the HTTP (retries, timeouts, error wording,
key redaction); this class says what the API looks like.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from koboi.errors import ProviderError
from koboi.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ResponseDone,
    TextDelta,
)
from koboi_http.provider import HTTPProvider
from koboi_http.sse import SSEEvent
from koboi_openai.config import RESERVED_BODY_KEYS, OpenAIOptions
from koboi_openai.stream import StreamAssembler
from koboi_openai.wire import (
    error_is_transient,
    error_text,
    finish_from_wire,
    messages_to_wire,
    text_from_wire,
    tool_calls_from_wire,
    tools_to_wire,
    usage_from_wire,
)

#: Keys a request's own options may not set (``model`` they may: a per-call model switch).
_REQUEST_RESERVED = RESERVED_BODY_KEYS - {"model"}
#: Options that only mean something beside ``tools``.
_TOOL_ONLY_KEYS = ("tool_choice", "parallel_tool_calls")


class OpenAIProvider(HTTPProvider[OpenAIOptions]):
    """A :class:`~koboi.provider.ModelProvider` over ``POST {base_url}/chat/completions``."""

    name = "openai"
    #: As OpenAI publishes them; an OpenAI-compatible server's own models are unknown
    #: here (set ``context_window`` in the config).
    context_windows = {
        "gpt-3.5-turbo": 16_385,
        "gpt-4": 8_192,
        "gpt-4-turbo": 128_000,
        "gpt-4o": 128_000,
        "gpt-4.1": 1_047_576,
        "gpt-5": 400_000,
        "o1": 200_000,
        "o3": 200_000,
        "o4-mini": 200_000,
    }

    # -- HTTP -----------------------------------------------------------------

    def endpoint(self, request: ModelRequest, *, stream: bool) -> str:
        return "chat/completions"

    def auth_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        # No key (a local server): no Authorization header at all.
        if self.options.api_key is not None:
            headers["authorization"] = f"Bearer {self.options.api_key.get_secret_value()}"
        if self.options.organization:
            headers["openai-organization"] = self.options.organization
        if self.options.project:
            headers["openai-project"] = self.options.project
        return headers

    # -- requests ---------------------------------------------------------------

    def build_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        reserved = sorted(_REQUEST_RESERVED & request.options.keys())
        if reserved:
            raise ProviderError(
                f"{self.name}: request options may not set {', '.join(reserved)}; "
                "the provider sets them"
            )
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages_to_wire(request.messages, system_role=self.options.system_role),
        }
        body.update(self.options.options)
        if request.tools:
            body["tools"] = tools_to_wire(request.tools)
        if request.response_format is not None:
            # {"type": "json_schema", "json_schema": {...}} or {"type": "json_object"}, as given.
            body["response_format"] = request.response_format
        body.update(request.options)
        if not request.tools:
            # The API refuses these without tools (400), and a configured default
            # must not break the calls of an agent that offers none.
            for key in _TOOL_ONLY_KEYS:
                body.pop(key, None)
        if stream:
            body["stream"] = True
            if self.options.stream_usage:
                body["stream_options"] = {"include_usage": True}
        return body

    # -- responses --------------------------------------------------------------

    def parse_response(self, body: Any) -> ModelResponse:
        if not isinstance(body, Mapping):
            raise ProviderError(f"{self.name}: the reply is not a chat completion object")
        if body.get("error"):
            raise self._error_in_reply(body["error"])
        choices = body.get("choices")
        choice = (
            next((c for c in choices if isinstance(c, Mapping) and c.get("index", 0) == 0), None)
            if isinstance(choices, list)
            else None
        )
        if choice is None:
            raise ProviderError(f"{self.name}: the reply has no choices")
        raw_message = choice.get("message")
        raw_message = raw_message if isinstance(raw_message, Mapping) else {}
        calls = tool_calls_from_wire(raw_message)
        # A refusal (structured outputs) comes instead of content: show it.
        text = text_from_wire(raw_message.get("content")) or text_from_wire(
            raw_message.get("refusal")
        )
        model = body.get("model")
        return ModelResponse(
            message=Message.assistant(text, tool_calls=calls),
            usage=usage_from_wire(body.get("usage")),
            finish_reason=finish_from_wire(choice.get("finish_reason"), has_tool_calls=bool(calls)),
            model=model if isinstance(model, str) and model else self.model,
        )

    async def parse_stream(
        self, events: AsyncIterator[SSEEvent]
    ) -> AsyncIterator[ModelStreamEvent]:
        assembler = StreamAssembler()
        async for event in events:
            data = event.data.strip()
            if not data:
                continue
            if data == "[DONE]":
                yield ResponseDone(response=assembler.response(self.model))
                return
            chunk = self.decode_event_json(event)
            if not isinstance(chunk, dict):
                raise ProviderError(
                    f"{self.name}: the stream sent an event that is not a JSON object"
                )
            if chunk.get("error") or event.event == "error":
                raise self._error_in_reply(chunk.get("error") or chunk)
            for piece in assembler.add(chunk):
                yield TextDelta(text=piece)
        if assembler.finished:
            # Some servers end the stream without "[DONE]"; the reply said it was
            # complete, so it is. Without a finish reason the stream was cut.
            yield ResponseDone(response=assembler.response(self.model))

    # -- errors -----------------------------------------------------------------

    def error_message(self, body: Any) -> str | None:
        if isinstance(body, Mapping) and "error" in body:
            text = error_text(body["error"])
            if text is not None:
                return text
        return super().error_message(body)

    def _error_in_reply(self, error: Any) -> ProviderError:
        """An error the server sent inside a 200 reply or a stream."""
        text = error_text(error) or "the server reported an error"
        return ProviderError(
            f"{self.name}: the server reported an error: {self.redact(text)}",
            retryable=error_is_transient(error),
        )
