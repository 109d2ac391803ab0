"""ForecastGuide: argument rewrites, a journaled side call, and before_finish sending a run on."""

from __future__ import annotations

from typing import Any

import pytest

from koboi import KoboiAgent, PluginHost
from koboi import journal as J

pytestmark = pytest.mark.anyio

WEATHER_RULE = {
    "match": r"weather in (?P<city>\w+)",
    "tool": "weather_forecast",
    "arguments": {"city": "{city}"},
    "reply": "Forecast: {result}",
}
# What the run's model answers to the guide's side call (its prompt names the city).
SIDE_CALL_RULES = [
    {"match": r"does 'Tokio' mean", "reply": "Tokyo"},
    {"match": r"does '\w+' mean", "reply": "none"},
]


def config(*rules: dict[str, Any], fallback: str = "I cannot say.") -> dict[str, Any]:
    return {
        "llm": {"provider": "scripted", "rules": [*rules], "fallback": fallback},
        "tools": {"builtin": ["weather_forecast"]},
    }


async def run(host: PluginHost, message: str, data: dict[str, Any]) -> tuple[Any, list[Any]]:
    async with KoboiAgent.from_dict(data, host=host) as agent:
        result = await agent.run(message)
        return result, await agent.store.read(result.session_id)


def started(events: list[Any]) -> list[dict[str, Any]]:
    return [dict(J.TOOL_CALL_STARTED.of(e)) for e in events if e.type == J.TOOL_CALL_STARTED]


async def test_a_city_is_rewritten_to_the_spelling_of_its_station(host: PluginHost) -> None:
    result, events = await run(host, "weather in paris", config(WEATHER_RULE))
    assert result.output == "Forecast: Paris: 18.0 °C"
    (call,) = started(events)
    assert call["arguments"] == {"city": "Paris"}  # what the tool (and the journal) saw
    assert call["rewritten_by"] == ["weather.guide"]
    assert call["original_arguments_hash"]
    assert not [e for e in events if e.type == J.SIDE_CALL_STARTED]  # known: nothing to ask
    # Control: a city already spelled as its station is left alone.
    _, events = await run(host, "weather in Paris", config(WEATHER_RULE))
    (call,) = started(events)
    assert call["arguments"] == {"city": "Paris"} and "rewritten_by" not in call


async def test_an_unknown_name_is_asked_of_the_runs_model_in_a_side_call(
    host: PluginHost,
) -> None:
    result, events = await run(host, "weather in Tokio", config(*SIDE_CALL_RULES, WEATHER_RULE))
    assert result.output == "Forecast: Tokyo: 22.5 °C"
    asked = [J.SIDE_CALL_STARTED.of(e) for e in events if e.type == J.SIDE_CALL_STARTED]
    assert [a["purpose"] for a in asked] == ["weather.city"]
    answered = next(J.SIDE_CALL_FINISHED.of(e) for e in events if e.type == J.SIDE_CALL_FINISHED)
    assert answered["response"]["message"]["content"] == "Tokyo"
    (call,) = started(events)
    assert call["arguments"] == {"city": "Tokyo"} and call["rewritten_by"] == ["weather.guide"]
    # Control: when the model knows no such station, the call goes through unchanged and the
    # tool says which cities it knows.
    _, events = await run(host, "weather in Atlantis", config(*SIDE_CALL_RULES, WEATHER_RULE))
    (call,) = started(events)
    assert call["arguments"] == {"city": "Atlantis"} and "rewritten_by" not in call
    finished = next(J.TOOL_CALL_FINISHED.of(e) for e in events if e.type == J.TOOL_CALL_FINISHED)
    assert finished["is_error"] and "known cities: Paris, Reykjavik, Tokyo" in finished["content"]


async def test_an_answer_without_a_forecast_is_sent_on_once(host: PluginHost) -> None:
    result, events = await run(host, "Is it warm in Tokyo today?", config(WEATHER_RULE))
    assert result.output == "Forecast: Tokyo: 22.5 °C"
    (continued,) = [J.RUN_CONTINUED.of(e) for e in events if e.type == J.RUN_CONTINUED]
    assert continued["by"] == "weather.guide"
    assert continued["message"] == "What is the weather in Tokyo? Answer with its forecast."
    # Only once: a model that still names no forecast keeps its answer.
    stubborn = {"match": r"weather in Tokyo", "reply": "Ask someone else."}
    result, events = await run(host, "Is it warm in Tokyo today?", config(stubborn))
    assert result.output == "Ask someone else."
    assert sum(e.type == J.RUN_CONTINUED for e in events) == 1
    # Control: a question about no known station is answered as it is.
    result, events = await run(host, "Is it warm in Atlantis?", config(WEATHER_RULE))
    assert result.output == "I cannot say."
    assert not [e for e in events if e.type == J.RUN_CONTINUED]


async def test_with_cite_on_an_answer_that_gives_a_forecast_says_where_it_comes_from(
    host: PluginHost,
) -> None:
    cited = {**config(WEATHER_RULE), "weather": {"cite": True}}
    result, events = await run(host, "weather in Paris", cited)
    assert result.output == "Forecast: Paris: 18.0 °C (source: the offline weather table)"
    (replaced,) = [J.ANSWER_REPLACED.of(e) for e in events if e.type == J.ANSWER_REPLACED]
    assert replaced["by"] == "weather.guide" and replaced["text"] == result.output
    assert J.fold_messages(events)[-1].content == result.output  # the conversation keeps it
    # Control: without cite (the default) the answer stands as the model gave it.
    result, events = await run(host, "weather in Paris", config(WEATHER_RULE))
    assert result.output == "Forecast: Paris: 18.0 °C"
    assert not [e for e in events if e.type == J.ANSWER_REPLACED]
