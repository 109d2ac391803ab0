"""``CloudflareProvider``: Workers AI through its native REST endpoint.

``POST {base_url}/accounts/{account_id}/ai/run/{model}`` with a bearer API
token. The HTTP side (retries, timeouts, error wording, stream retry rules)
is ``koboi_http.HTTPProvider``'s; this module only speaks the API's JSON
(see :mod:`koboi_cloudflare.wire_format`).
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
    Usage,
)
from koboi_cloudflare import wire_format as wf
from koboi_cloudflare.config import CloudflareOptions
from koboi_http.provider import HTTPProvider
from koboi_http.sse import SSEEvent


class CloudflareProvider(HTTPProvider[CloudflareOptions]):
    """A Workers AI text-generation model (chat, and tool calls where the model has them)."""

    name = "cloudflare"
    #: As Workers AI lists them for its chat models; others: set ``context_window``.
    context_windows = {
        "@cf/meta/llama-3.3-70b-instruct-fp8-fast": 24_000,
        "@cf/meta/llama-3.1-8b-instruct": 7_968,
    }

    def endpoint(self, request: ModelRequest, *, stream: bool) -> str:
        # The model name keeps its slashes: Cloudflare routes on the path
        # /ai/run/@cf/<vendor>/<model>, and '@' is a legal path character, so
        # nothing is percent-encoded (the options validator admits only
        # characters that need no escaping).
        return f"accounts/{self.options.account_id}/ai/run/{self.options.model}"

    def auth_headers(self) -> dict[str, str]:
        if self.options.api_key is None:  # only under cache.mode replay: never called
            return {}
        return {"authorization": f"Bearer {self.options.api_key.get_secret_value()}"}

    def build_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        return wf.build_body(request, self.options.options, stream=stream)

    def error_message(self, body: Any) -> str | None:
        if isinstance(body, Mapping):
            found = wf.error_in(body)
            if found:
                return found
        return super().error_message(body)

    def parse_response(self, body: Any) -> ModelResponse:
        if not isinstance(body, Mapping):
            raise ProviderError(f"{self.name}: the reply is not a JSON object")
        problem = wf.error_in(body)
        if problem is not None:
            raise ProviderError(f"{self.name}: {self.redact(problem)}")
        # The envelope is {result, success, errors, messages}; a server that
        # answers with the bare result (a proxy, a gateway) is read as well.
        result = body.get("result") if "result" in body else body
        if not isinstance(result, Mapping):
            raise ProviderError(
                f"{self.name}: the reply has no result object (model {self.model!r} may not be "
                "a text-generation model)"
            )
        return self._response(wf.read_result(result))

    async def parse_stream(
        self, events: AsyncIterator[SSEEvent]
    ) -> AsyncIterator[ModelStreamEvent]:
        assembler = wf.StreamAssembler()
        async for event in events:
            data = event.data.strip()
            if data == "[DONE]":
                yield ResponseDone(response=self._response(assembler.result()))
                return
            if not data:
                continue
            if event.event == "error":
                raise ProviderError(
                    f"{self.name}: the stream reported an error: "
                    f"{self.redact(wf.error_in_text(data) or data)}"
                )
            chunk = self.decode_event_json(event)
            if not isinstance(chunk, Mapping):
                raise ProviderError(
                    f"{self.name}: the stream sent a chunk that is not a JSON object: "
                    f"{self.redact(data[:120])!r}"
                )
            problem = wf.error_in(chunk)
            if problem is not None:
                raise ProviderError(
                    f"{self.name}: the stream reported an error: {self.redact(problem)}"
                )
            text = assembler.feed(chunk)
            if text:
                yield TextDelta(text=text)
        raise ProviderError(f"{self.name}: the stream ended before its closing [DONE]")

    def _response(self, reply: wf.Reply) -> ModelResponse:
        calls = wf.finish_calls(reply)
        return ModelResponse(
            message=Message.assistant(reply.text, tool_calls=tuple(calls)),
            usage=reply.usage or Usage(requests=1),
            finish_reason=wf.finish_reason(reply, calls),
            model=reply.model or self.model,
        )
