"""``ForecastMemory``: what the forecast already told this session, from its own events.

The forecast tool records ``weather.forecast`` for each city it reports. When a
run begins in a session that has such events, the kernel hands them back
(:meth:`restore`), and the interceptor tells the model, for that run's first
model call, which cities were already reported.
"""

from __future__ import annotations

from collections.abc import Sequence

from koboi import Interceptor, Refusal, RunInfo
from koboi.store import JournalEvent


class ForecastMemory(Interceptor):
    name = "weather.memory"
    event_namespace = "weather"

    async def restore(self, events: Sequence[JournalEvent], run: RunInfo) -> None:
        run.state["weather.reported"] = sorted(
            {str(e.data["city"]) for e in events if e.type == "weather.forecast"}
        )

    async def on_run_start(self, run: RunInfo) -> Refusal | None:
        reported = run.state.get("weather.reported")
        if reported:
            run.add_context(
                "Forecasts already reported in this conversation: " + ", ".join(reported),
                scope="call",
            )
        return None
