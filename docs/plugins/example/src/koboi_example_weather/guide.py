"""``ForecastGuide``: city names the forecast knows, and answers that give one.

Three per-step seams on real work:

- ``before_tool_call`` rewrites the ``city`` argument of ``weather_forecast`` to the
  spelling of its station (``paris`` -> ``Paris``), and for a name no station has
  (``Tokio``) asks the run's own model, in a side call journaled with the purpose
  ``weather.city``, which station it means;
- ``before_finish`` sends the run on, once, when its answer names no forecast
  although the user asked about a city that has a station; and with
  ``weather.cite`` on, replaces an answer that gives a forecast with the same answer
  saying where the forecast comes from.
"""

from __future__ import annotations

import re

from koboi import FinishDecision, Interceptor, PendingToolCall, RunInfo, Verdict
from koboi_example_weather.stations import settings_of, stations_of

#: How an answer says where its forecast comes from (``weather.cite``).
SOURCE = "(source: the offline weather table)"


class ForecastGuide(Interceptor):
    name = "weather.guide"

    async def before_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
        city = pending.call.arguments.get("city")
        if pending.tool.name != "weather_forecast" or not isinstance(city, str):
            return None
        stations = sorted(stations_of(run.config, run.host))
        known = {name.casefold(): name for name in stations}
        station = known.get(city.strip().casefold())
        if station is None:
            # A side call: the run's own model, journaled, served from the journal on resume.
            answer = await run.model.ask(
                f"Which of these cities does {city!r} mean: {', '.join(stations)}? "
                "Answer with the city's name only, or 'none'.",
                purpose="weather.city",
            )
            station = known.get(answer.strip().strip(".").casefold())
        if station is None or station == city:
            return None  # unknown (the tool says which cities it knows), or already right
        # Re-validated against the tool's schema; journaled with rewritten_by.
        return Verdict("allow", f"{city!r} is the station {station!r}", arguments={"city": station})

    async def before_finish(self, answer: str, run: RunInfo) -> FinishDecision | None:
        if "°" in answer:  # a forecast is named
            if settings_of(run.config).cite and SOURCE not in answer:
                # Journaled as answer_replaced; the conversation keeps the new text.
                return FinishDecision.replace(f"{answer} {SOURCE}", reason="cites its source")
            return None
        if run.state.get("weather.nudged"):
            return None  # the run was sent on once already
        asked = [
            city
            for city in sorted(stations_of(run.config, run.host))
            if re.search(rf"\b{re.escape(city)}\b", run.input, re.IGNORECASE)
        ]
        if not asked:
            return None
        run.state["weather.nudged"] = True
        # At most agent.max_continuations per run, whatever an interceptor asks.
        return FinishDecision.continue_with(
            f"What is the weather in {asked[0]}? Answer with its forecast."
        )
