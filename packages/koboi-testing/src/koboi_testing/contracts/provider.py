"""Contract suite for :class:`koboi.provider.ModelProvider` implementations."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Final, Literal, TypeAlias

import pytest

from koboi.errors import ProviderError
from koboi.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ResponseDone,
    TextDelta,
    ToolCall,
    ToolSpec,
    Usage,
)
from koboi.provider import ModelProvider

Scenario: TypeAlias = Literal["text", "tool_call", "two_tool_calls", "usage", "length", "error"]
"""The canned situations a provider under test must be able to reproduce."""

SCENARIOS: Final[tuple[Scenario, ...]] = (
    "text",
    "tool_call",
    "two_tool_calls",
    "usage",
    "length",
    "error",
)

#: Text of the ``text`` and ``usage`` scenarios.
HELLO_TEXT: Final = "Hello there"
#: Text of the ``length`` scenario (the reply was cut by the token limit).
LENGTH_TEXT: Final = "Hello"
#: Usage the ``usage`` scenario must report.
USAGE_INPUT_TOKENS: Final = 11
USAGE_OUTPUT_TOKENS: Final = 7

#: The one tool the tool scenarios call.
WEATHER_TOOL: Final = ToolSpec(
    name="get_weather",
    description="Current weather in a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name."}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
#: Arguments of the call in ``tool_call``, and of the first call in ``two_tool_calls``.
PARIS: Final = {"city": "Paris"}
#: Arguments of the second call in ``two_tool_calls``.
TOKYO: Final = {"city": "Tokyo"}

ProviderFactory: TypeAlias = Callable[[str], "ModelProvider | Awaitable[ModelProvider]"]


def scenario_request(
    scenario: Scenario, *, tools: Sequence[ToolSpec] = (WEATHER_TOOL,)
) -> ModelRequest:
    """The request the suite sends for ``scenario`` (a system prompt and one user turn)."""
    question = {
        "text": "Say hello.",
        "usage": "Say hello.",
        "length": "Say hello.",
        "error": "Say hello.",
        "tool_call": "What is the weather in Paris?",
        "two_tool_calls": "What is the weather in Paris and in Tokyo?",
    }[scenario]
    return ModelRequest(
        messages=[Message.system("You are a contract test."), Message.user(question)],
        tools=tools,
    )


def _calls(response: ModelResponse) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, c.arguments) for c in response.message.tool_calls]


class ProviderContract:
    """Behaviour every :class:`~koboi.provider.ModelProvider` must show.

    Real providers are tested against a loopback server that speaks their wire
    format, so this suite is built around *scenarios*: the subclass arranges for
    its backend to give a canned answer, and the suite checks that the provider
    turns it into the right koboi types, through both ``complete()`` and
    ``stream()``.

    **Required fixture** ``provider_for``: a callable taking a scenario name and
    returning a ``ModelProvider`` (or an awaitable of one) whose backend answers
    *every* request with that scenario. The suite asks for a fresh provider for
    each request it makes and ``aclose()``-s it afterwards. The scenarios:

    ``"text"``
        The assistant replies ``"Hello there"`` (:data:`HELLO_TEXT`), calls no
        tool, and stops normally (``finish_reason == "stop"``).
    ``"tool_call"``
        The assistant calls ``get_weather`` once with ``{"city": "Paris"}``
        (``finish_reason == "tool_calls"``). Any text alongside is allowed.
    ``"two_tool_calls"``
        The assistant calls ``get_weather`` twice in one turn: first with
        ``{"city": "Paris"}``, then ``{"city": "Tokyo"}``; the two calls have
        different ids. ``finish_reason == "tool_calls"``.
    ``"usage"``
        Like ``"text"``, and the backend reports 11 input tokens and 7 output
        tokens (:data:`USAGE_INPUT_TOKENS`, :data:`USAGE_OUTPUT_TOKENS`).
    ``"length"``
        The reply ``"Hello"`` (:data:`LENGTH_TEXT`) was cut by the token limit:
        ``finish_reason == "length"``.
    ``"error"``
        The backend fails (an HTTP 500, a malformed body...). ``complete()`` and
        ``stream()`` must raise :class:`~koboi.errors.ProviderError`, not the
        transport's own exception.

    A streaming backend should split the text over several deltas, so that the
    reassembly is actually exercised.

    **Optional**:

    - ``skip_scenarios``: class attribute, scenario names the backend cannot
      express at all (e.g. ``{"two_tool_calls"}`` for an API without parallel
      tool calls); their tests are skipped.
    - :meth:`tool_names_sent`: override it to return the tool names the backend
      received in the provider's last request, to check tools reach the wire.
    """

    skip_scenarios: frozenset[str] = frozenset()

    def tool_names_sent(self, provider: ModelProvider) -> Sequence[str] | None:
        """Tool names the backend of ``provider`` received in its last request.

        Return ``None`` (the default) when the backend does not record requests;
        :meth:`test_tools_reach_the_backend` is then skipped.
        """
        return None

    # -- helpers ---------------------------------------------------------

    async def _make(self, provider_for: ProviderFactory, scenario: Scenario) -> ModelProvider:
        if scenario in self.skip_scenarios:
            pytest.skip(f"the backend cannot express scenario {scenario!r} (skip_scenarios)")
        made = provider_for(scenario)
        provider = await made if inspect.isawaitable(made) else made
        assert isinstance(provider, ModelProvider), (
            f"provider_for({scenario!r}) returned {provider!r}, not a ModelProvider"
        )
        return provider

    async def _complete(
        self, provider_for: ProviderFactory, scenario: Scenario, request: ModelRequest | None = None
    ) -> ModelResponse:
        provider = await self._make(provider_for, scenario)
        try:
            response = await provider.complete(request or scenario_request(scenario))
        finally:
            await provider.aclose()
        assert isinstance(response, ModelResponse), f"complete() returned {response!r}"
        return response

    async def _stream(
        self, provider_for: ProviderFactory, scenario: Scenario, request: ModelRequest | None = None
    ) -> list[ModelStreamEvent]:
        provider = await self._make(provider_for, scenario)
        events: list[ModelStreamEvent] = []
        try:
            stream: AsyncIterator[ModelStreamEvent] = provider.stream(
                request or scenario_request(scenario)
            )
            async for event in stream:
                events.append(event)
        finally:
            await provider.aclose()
        return events

    @staticmethod
    def _done(events: Sequence[ModelStreamEvent]) -> ModelResponse:
        for event in events:
            assert isinstance(event, TextDelta | ResponseDone), f"unexpected stream event {event!r}"
        dones = [e for e in events if isinstance(e, ResponseDone)]
        assert len(dones) == 1, f"stream must end with exactly one ResponseDone, got {len(dones)}"
        assert isinstance(events[-1], ResponseDone), "ResponseDone must be the last event"
        return dones[0].response

    @staticmethod
    def _check_tool_call(call: ToolCall, arguments: dict[str, Any]) -> None:
        assert isinstance(call.id, str)
        assert call.id, "a tool call must carry a non-empty id (the result echoes it)"
        assert call.name == WEATHER_TOOL.name
        assert isinstance(call.arguments, dict), "arguments must be decoded to a dict"
        assert call.arguments == arguments
        assert call.raw_arguments is None, "raw_arguments is only for undecodable argument text"

    # -- identity --------------------------------------------------------

    @pytest.mark.anyio
    async def test_has_a_name(self, provider_for: ProviderFactory) -> None:
        provider = await self._make(provider_for, "text")
        try:
            assert isinstance(provider.name, str)
            assert provider.name
            assert isinstance(provider.model, str)
        finally:
            await provider.aclose()

    # -- text ------------------------------------------------------------

    @pytest.mark.anyio
    async def test_text_reply(self, provider_for: ProviderFactory) -> None:
        response = await self._complete(provider_for, "text")
        assert response.message.role == "assistant"
        assert response.message.content == HELLO_TEXT
        assert response.message.tool_calls == ()
        assert response.finish_reason == "stop"
        assert isinstance(response.model, str)

    @pytest.mark.anyio
    async def test_text_reply_without_tools_offered(self, provider_for: ProviderFactory) -> None:
        response = await self._complete(provider_for, "text", scenario_request("text", tools=()))
        assert response.message.content == HELLO_TEXT

    @pytest.mark.anyio
    async def test_stream_text_deltas_concatenate_to_the_final_content(
        self, provider_for: ProviderFactory
    ) -> None:
        events = await self._stream(provider_for, "text")
        final = self._done(events)
        deltas = [e for e in events if isinstance(e, TextDelta)]
        assert deltas, "a text reply must be streamed as at least one TextDelta"
        assert all(d.text for d in deltas), "empty TextDeltas are noise; do not yield them"
        assert "".join(d.text for d in deltas) == final.message.content == HELLO_TEXT
        assert final.finish_reason == "stop"

    @pytest.mark.anyio
    async def test_history_with_tool_results_is_accepted(
        self, provider_for: ProviderFactory
    ) -> None:
        call = ToolCall(id="call_prev_1", name="get_weather", arguments=dict(PARIS))
        failed = ToolCall(id="call_prev_2", name="get_weather", arguments={"city": "Nowhere"})
        request = ModelRequest(
            messages=[
                Message.system("You are a contract test."),
                Message.user("What is the weather in Paris? ☀️"),
                Message.assistant("Let me check.", tool_calls=(call, failed)),
                Message.tool_result(call, "sunny, 21 °C"),
                Message.tool_result(failed, "unknown city", is_error=True),
                Message.user("Thanks. Now say hello."),
            ],
            tools=[WEATHER_TOOL],
        )
        response = await self._complete(provider_for, "text", request)
        assert response.message.content == HELLO_TEXT

    # -- tool calls --------------------------------------------------------

    @pytest.mark.anyio
    async def test_one_tool_call(self, provider_for: ProviderFactory) -> None:
        response = await self._complete(provider_for, "tool_call")
        assert response.message.role == "assistant"
        assert len(response.message.tool_calls) == 1
        self._check_tool_call(response.message.tool_calls[0], PARIS)
        assert response.finish_reason == "tool_calls"

    @pytest.mark.anyio
    async def test_two_tool_calls_in_order_with_distinct_ids(
        self, provider_for: ProviderFactory
    ) -> None:
        response = await self._complete(provider_for, "two_tool_calls")
        calls = response.message.tool_calls
        assert len(calls) == 2
        self._check_tool_call(calls[0], PARIS)
        self._check_tool_call(calls[1], TOKYO)
        assert calls[0].id != calls[1].id
        assert response.finish_reason == "tool_calls"

    @pytest.mark.anyio
    @pytest.mark.parametrize("scenario", ["text", "tool_call", "two_tool_calls", "length"])
    async def test_stream_ends_with_the_same_response_as_complete(
        self, provider_for: ProviderFactory, scenario: Scenario
    ) -> None:
        completed = await self._complete(provider_for, scenario)
        events = await self._stream(provider_for, scenario)
        streamed = self._done(events)
        assert streamed.message.role == "assistant"
        assert streamed.message.content == completed.message.content
        assert _calls(streamed) == _calls(completed)
        assert all(c.id for c in streamed.message.tool_calls)
        assert streamed.finish_reason == completed.finish_reason
        deltas = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert deltas == streamed.message.content

    @pytest.mark.anyio
    async def test_tools_reach_the_backend(self, provider_for: ProviderFactory) -> None:
        provider = await self._make(provider_for, "tool_call")
        try:
            await provider.complete(scenario_request("tool_call"))
            sent = self.tool_names_sent(provider)
        finally:
            await provider.aclose()
        if sent is None:
            pytest.skip("tool_names_sent() is not implemented for this backend")
        assert list(sent) == [WEATHER_TOOL.name]

    # -- finish reasons, usage ---------------------------------------------

    @pytest.mark.anyio
    async def test_length_limit_is_reported(self, provider_for: ProviderFactory) -> None:
        response = await self._complete(provider_for, "length")
        assert response.finish_reason == "length"
        assert response.message.content == LENGTH_TEXT

    @pytest.mark.anyio
    @pytest.mark.parametrize("mode", ["complete", "stream"])
    async def test_usage_is_reported(self, provider_for: ProviderFactory, mode: str) -> None:
        if mode == "complete":
            response = await self._complete(provider_for, "usage")
        else:
            response = self._done(await self._stream(provider_for, "usage"))
        assert isinstance(response.usage, Usage)
        assert response.usage.input_tokens == USAGE_INPUT_TOKENS
        assert response.usage.output_tokens == USAGE_OUTPUT_TOKENS
        assert response.message.content == HELLO_TEXT

    @pytest.mark.anyio
    @pytest.mark.parametrize("scenario", ["text", "tool_call", "two_tool_calls", "usage"])
    async def test_usage_fields_are_non_negative_ints(
        self, provider_for: ProviderFactory, scenario: Scenario
    ) -> None:
        for response in (
            await self._complete(provider_for, scenario),
            self._done(await self._stream(provider_for, scenario)),
        ):
            for field, value in response.usage.model_dump().items():
                assert type(value) is int, f"usage.{field} is {value!r}"
                assert value >= 0, f"usage.{field} is negative"

    @pytest.mark.anyio
    @pytest.mark.parametrize("scenario", ["text", "tool_call", "two_tool_calls"])
    async def test_response_survives_a_json_round_trip(
        self, provider_for: ProviderFactory, scenario: Scenario
    ) -> None:
        # The journal stores responses as JSON (provider_data included) and
        # replays them; anything that does not survive JSON breaks resumption.
        response = await self._complete(provider_for, scenario)
        assert ModelResponse.model_validate_json(response.model_dump_json()) == response

    # -- failures ----------------------------------------------------------

    @pytest.mark.anyio
    async def test_backend_failure_raises_provider_error(
        self, provider_for: ProviderFactory
    ) -> None:
        with pytest.raises(ProviderError):
            await self._complete(provider_for, "error")

    @pytest.mark.anyio
    async def test_backend_failure_while_streaming_raises_provider_error(
        self, provider_for: ProviderFactory
    ) -> None:
        with pytest.raises(ProviderError):
            await self._stream(provider_for, "error")
