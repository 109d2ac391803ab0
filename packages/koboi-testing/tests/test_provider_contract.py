"""The provider contract, run against a tiny in-process provider that serves the scenarios."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence

import anyio
import pytest

from koboi.errors import ProviderError
from koboi.messages import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ResponseDone,
    TextDelta,
    ToolCall,
    Usage,
)
from koboi.provider import ModelProvider
from koboi_testing.contracts import (
    HELLO_TEXT,
    LENGTH_TEXT,
    PARIS,
    TOKYO,
    USAGE_INPUT_TOKENS,
    USAGE_OUTPUT_TOKENS,
    ProviderContract,
    Scenario,
)


class ScenarioProvider(ModelProvider):
    """Answers every request with one scenario; streams text word by word."""

    name = "scenario"

    def __init__(self, scenario: str, *, use_default_stream: bool = False) -> None:
        self.scenario = scenario
        self.model = f"scenario-{scenario}"
        self.last_request: ModelRequest | None = None
        self.use_default_stream = use_default_stream
        self.closed = False

    def _response(self) -> ModelResponse:
        usage = Usage(input_tokens=3, output_tokens=2, requests=1)
        if self.scenario in ("text", "usage", "length"):
            text = LENGTH_TEXT if self.scenario == "length" else HELLO_TEXT
            if self.scenario == "usage":
                usage = Usage(input_tokens=USAGE_INPUT_TOKENS, output_tokens=USAGE_OUTPUT_TOKENS)
            finish: FinishReason = "length" if self.scenario == "length" else "stop"
            return ModelResponse(
                message=Message.assistant(text),
                usage=usage,
                finish_reason=finish,
                model=self.model,
            )
        if self.scenario in ("tool_call", "two_tool_calls"):
            calls = [ToolCall(id="call_1", name="get_weather", arguments=dict(PARIS))]
            if self.scenario == "two_tool_calls":
                calls.append(ToolCall(id="call_2", name="get_weather", arguments=dict(TOKYO)))
            return ModelResponse(
                message=Message.assistant("", tool_calls=tuple(calls)),
                usage=usage,
                finish_reason="tool_calls",
                model=self.model,
            )
        raise ProviderError(f"scenario backend failed: HTTP 500 ({self.scenario})")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.last_request = request
        await anyio.lowlevel.checkpoint()
        return self._response()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        if self.use_default_stream:
            async for event in super().stream(request):
                yield event
            return
        self.last_request = request
        response = self._response()
        words = response.message.content.split(" ")
        for i, word in enumerate(words):
            await anyio.lowlevel.checkpoint()
            yield TextDelta(text=word if i == len(words) - 1 else word + " ")
        yield ResponseDone(response=response)

    async def aclose(self) -> None:
        self.closed = True


class TestScenarioProvider(ProviderContract):
    @pytest.fixture
    def provider_for(self) -> Callable[[str], ModelProvider]:
        return ScenarioProvider

    def tool_names_sent(self, provider: ModelProvider) -> Sequence[str] | None:
        assert isinstance(provider, ScenarioProvider)
        assert provider.last_request is not None
        return [t.name for t in provider.last_request.tools]


class TestDefaultStreamImplementation(ProviderContract):
    """``ModelProvider.stream``'s default (one delta from ``complete``) meets the contract;
    the factory here is async, which the suite must accept too."""

    skip_scenarios = frozenset({"two_tool_calls"})

    @pytest.fixture
    def provider_for(self) -> Callable[[str], object]:
        async def make(scenario: str) -> ModelProvider:
            await anyio.lowlevel.checkpoint()
            return ScenarioProvider(scenario, use_default_stream=True)

        return make


@pytest.mark.anyio
@pytest.mark.parametrize("scenario", ["text", "tool_call"])
async def test_suite_closes_every_provider(scenario: Scenario) -> None:
    made: list[ScenarioProvider] = []

    def factory(name: str) -> ModelProvider:
        made.append(ScenarioProvider(name))
        return made[-1]

    suite = TestScenarioProvider()
    await suite._complete(factory, scenario)
    await suite._stream(factory, scenario)
    assert len(made) == 2
    assert all(p.closed for p in made)


@pytest.mark.anyio
async def test_suite_catches_a_stream_that_disagrees_with_its_final_response() -> None:
    class Garbled(ScenarioProvider):
        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
            yield TextDelta(text="Hello")
            yield ResponseDone(response=self._response())

    suite = TestScenarioProvider()
    with pytest.raises(AssertionError):
        await suite.test_stream_text_deltas_concatenate_to_the_final_content(Garbled)


@pytest.mark.anyio
async def test_suite_catches_a_transport_error_leaking_out() -> None:
    class Leaky(ScenarioProvider):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            raise ConnectionResetError("peer reset")

    suite = TestScenarioProvider()
    with pytest.raises(ConnectionResetError):
        await suite.test_backend_failure_raises_provider_error(Leaky)
