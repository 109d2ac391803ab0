"""The ``briefing`` runner: registered for ``agent.runner``, the loop once per city, and a
resumed briefing that never asks a city twice."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from koboi_example_weather.briefing import Briefing
from koboi_example_weather.config import BriefingOptions

from koboi import ConfigError, KoboiAgent, PluginEvent, PluginHost, Runner, validate_config
from koboi import journal as J
from koboi.store import InMemoryStore, NewEvent
from koboi_testing.contracts import RunnerContract

RULES = [
    {
        "match": r"weather in (?P<city>\w+)",
        "tool": "weather_forecast",
        "arguments": {"city": "{city}"},
        "reply": "Forecast: {result}",
    }
]


def briefing(**options: Any) -> dict[str, Any]:
    return {
        "agent": {"runner": {"name": "briefing", **options}},
        "llm": {"provider": "scripted", "rules": RULES},
        "tools": {"builtin": ["weather_forecast"]},
    }


def test_the_runner_is_registered_with_its_options(host: PluginHost) -> None:
    entry = host.catalog().runners.get("briefing")
    assert entry is not None and entry.plugin == "weather"
    config = validate_config(briefing(cities=["Tokyo"]), host.catalog())
    assert config.runner_name == "briefing"
    assert config.runner_options == BriefingOptions(cities=["Tokyo"])
    with pytest.raises(ConfigError) as raised:
        validate_config(briefing(city=["Tokyo"]), host.catalog())
    assert "agent.runner.city" in str(raised.value)


@pytest.mark.anyio
async def test_a_briefing_asks_the_loop_once_per_city(host: PluginHost) -> None:
    async with KoboiAgent.from_dict(briefing(cities=["Tokyo", "Paris"]), host=host) as agent:
        result = await agent.run("Morning briefing, please.")
        events = await agent.store.read(result.session_id)
    assert result.outcome == "completed"
    assert result.output == "Forecast: Tokyo: 22.5 °C\nForecast: Paris: 18.0 °C"
    assert J.RUN_STARTED.of(events[0]).get("runner") == "briefing"
    mine = [(e.type, dict(e.data)) for e in events if e.type.startswith("weather.b")]
    assert mine == [
        ("weather.briefing", {"cities": ["Tokyo", "Paris"]}),
        ("weather.briefed", {"city": "Tokyo", "forecast": "Forecast: Tokyo: 22.5 °C"}),
        ("weather.briefed", {"city": "Paris", "forecast": "Forecast: Paris: 18.0 °C"}),
    ]
    continued = [J.RUN_CONTINUED.of(e) for e in events if e.type == J.RUN_CONTINUED]
    assert [(c["by"], c["message"], c.get("runner")) for c in continued] == [
        ("briefing", "What is the weather in Tokyo?", True),
        ("briefing", "What is the weather in Paris?", True),
    ]


@pytest.mark.anyio
async def test_the_stream_shows_the_briefings_progress(host: PluginHost) -> None:
    async with KoboiAgent.from_dict(briefing(cities=["Tokyo", "Paris"]), host=host) as agent:
        events = [e async for e in agent.stream("brief me")]
        journal = await agent.store.read(events[-1].result.session_id)  # type: ignore[attr-defined]
    plugin = [e for e in events if isinstance(e, PluginEvent)]
    progress = [(dict(e.data), e.event_id) for e in plugin if e.type == "weather.progress"]
    assert progress == [
        ({"city": "Tokyo", "done": 0, "of": 2}, None),  # streamed, never journaled
        ({"city": "Paris", "done": 1, "of": 2}, None),
    ]
    assert not [e for e in journal if e.type == "weather.progress"]
    # The recorded ones reach the stream too, with the seq that journaled them.
    briefed = [e for e in plugin if e.type == "weather.briefed"]
    assert [e.data["city"] for e in briefed] == ["Tokyo", "Paris"]
    assert all(e.event_id is not None for e in briefed)


@pytest.mark.anyio
async def test_without_cities_every_station_is_briefed(host: PluginHost) -> None:
    async with KoboiAgent.from_dict(briefing(), host=host) as agent:
        result = await agent.run("brief me")
    assert result.output.splitlines() == [
        "Forecast: Paris: 18.0 °C",
        "Forecast: Reykjavik: 4.0 °C",
        "Forecast: Tokyo: 22.5 °C",
    ]


class DiesAtTheToolCallFor(InMemoryStore):
    """The process "dies" when it would commit the start of the forecast for ``city``: the
    question is journaled (with its first model call), the answer is not."""

    def __init__(self, city: str) -> None:
        super().__init__()
        self.city = city

    async def append(self, session_id: str, events: Sequence[NewEvent], **kw: Any) -> Any:
        if any(
            e.type == J.TOOL_CALL_STARTED and e.data.get("arguments") == {"city": self.city}
            for e in events
        ):
            raise OSError("killed")
        return await super().append(session_id, events, **kw)


@pytest.mark.anyio
async def test_a_resumed_briefing_goes_on_with_the_city_it_was_asking(host: PluginHost) -> None:
    dying = DiesAtTheToolCallFor("Paris")
    config = briefing(cities=["Tokyo", "Paris", "Reykjavik"])
    async with KoboiAgent.from_dict(config, host=host, store=dying) as agent:
        with pytest.raises(OSError, match="killed"):
            await agent.run("Morning briefing", session_id="b1")
    # What the dead process left: Tokyo briefed, Paris asked and not answered.
    store = InMemoryStore()
    await store.create_session("b1")
    await store.append("b1", [NewEvent(e.type, e.data) for e in await dying.read("b1")])
    assert J.fold_state(await store.read("b1")).interrupted
    async with KoboiAgent.from_dict(config, host=host, store=store) as agent:
        result = await agent.resume_run("b1")
        events = await store.read("b1")
    assert result.outcome == "completed"
    assert result.output.splitlines() == [
        "Forecast: Tokyo: 22.5 °C",
        "Forecast: Paris: 18.0 °C",
        "Forecast: Reykjavik: 4.0 °C",
    ]
    asked = [e.data["city"] for e in events if e.type == "weather.asked"]
    assert asked == ["Tokyo", "Paris", "Reykjavik"]  # nobody asked twice
    forecasts = [e.data["city"] for e in events if e.type == "weather.forecast"]
    assert forecasts == ["Tokyo", "Paris", "Reykjavik"]  # Tokyo's tool call not run again
    assert [e.type for e in events].count(J.RUN_RESUMED) == 1


class TestBriefingRunnerContract(RunnerContract):
    """koboi-testing's runner suite, through a real agent."""

    @pytest.fixture
    def runner(self, host: PluginHost) -> Runner:
        return Briefing(["Paris"])

    @pytest.fixture
    def turns(self) -> list[Any]:
        return ["Paris: mild."]
