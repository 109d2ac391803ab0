"""The ``briefing`` runner: the loop once per city, then one answer with every forecast.

It records its progress as the plugin's own events, so a run resumed after a crash
goes on with the city it was asking about and never asks a city twice:

- ``weather.briefing`` ``{"cities": [...]}``: the briefing begins;
- ``weather.asked`` ``{"city": ...}``: committed with that city's first model call;
- ``weather.briefed`` ``{"city": ..., "forecast": ...}``: committed once it is answered.

It also tells whoever follows the run how far it got, without journaling it:
``weather.progress`` ``{"city": ..., "done": n, "of": total}`` before each city.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from koboi import RunHandle, Runner
from koboi.events import AgentEvent
from koboi.store import JournalEvent
from koboi_example_weather.stations import stations_of


class Briefing(Runner):
    """Ask the loop for each city's weather, in order; finish with every forecast."""

    name = "briefing"

    def __init__(self, cities: Sequence[str] = ()) -> None:
        self.cities = list(cities)

    async def run(self, run: RunHandle) -> AsyncIterator[AgentEvent]:
        cities: list[str] = []
        answers: dict[str, str] = {}
        if run.resumed:
            cities, asking, answers = progress(run.plugin_events("weather"))
            # Settle what the crash left (the city being asked, if any) before going on.
            async for event in run.loop():
                yield event
            if asking is not None:
                if run.ending is None or run.ending.outcome != "completed":
                    return  # the loop failed, hit a limit or suspended: so ends the run
                answers[asking] = run.ending.output
                run.info.record("weather.briefed", {"city": asking, "forecast": run.ending.output})
                await run.commit()
        if not cities:  # a new briefing
            info = run.info
            cities = self.cities or sorted(stations_of(info.config, info.host))
            info.record("weather.briefing", {"cities": cities})
        for city in cities:
            if city in answers:
                continue  # briefed before a crash
            # Progress for the stream (a PluginEvent with no event_id): not journaled.
            run.info.emit(
                "weather.progress", {"city": city, "done": len(answers), "of": len(cities)}
            )
            # Committed with the city's first model call: a crash after it resumes this city.
            run.info.record("weather.asked", {"city": city})
            run.add_message(f"What is the weather in {city}?")
            async for event in run.loop():
                yield event
            if run.ending is None or run.ending.outcome != "completed":
                return
            answers[city] = run.ending.output
            run.info.record("weather.briefed", {"city": city, "forecast": run.ending.output})
            await run.commit()  # durable before the next city is asked
        run.finish("\n".join(answers[city] for city in cities))


def progress(events: Sequence[JournalEvent]) -> tuple[list[str], str | None, dict[str, str]]:
    """The last briefing's cities, the city it was asking about, and the forecasts it has."""
    cities: list[str] = []
    asking: str | None = None
    answers: dict[str, str] = {}
    for event in events:
        if event.type == "weather.briefing":
            cities, asking, answers = list(event.data["cities"]), None, {}
        elif event.type == "weather.asked":
            asking = str(event.data["city"])
        elif event.type == "weather.briefed":
            answers[str(event.data["city"])] = str(event.data["forecast"])
            asking = None
    return cities, asking, answers
