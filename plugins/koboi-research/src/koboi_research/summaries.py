"""One line per ``research.*`` journal event, for ``koboi show``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def _quote(text: Any, limit: int = 60) -> str:
    flat = " ".join(str(text).split())
    return json.dumps(flat if len(flat) <= limit else flat[: limit - 1] + "…", ensure_ascii=False)


def summarize(event_type: str, data: Mapping[str, Any]) -> str | None:
    kind = event_type.removeprefix("research.")
    if kind == "planned":
        questions = data.get("questions", [])
        return f"{len(questions)} sub-question(s): " + "; ".join(questions)
    if kind == "searched":
        found = len(data.get("results", []))
        error = f" (error: {data['error']})" if data.get("error") else ""
        return f"round {data.get('round')}: {_quote(data.get('query'))} → {found} result(s){error}"
    if kind == "fetched":
        if data.get("ok"):
            return f"{data.get('address')} fetched"
        return f"{data.get('address')} not fetched: {data.get('error', '')}"
    if kind == "source":
        quotes = data.get("quotes", [])
        return (
            f"{data.get('address')} answers {_quote(data.get('question'))} ({len(quotes)} quote(s))"
        )
    if kind == "coverage":
        covered, missing = data.get("covered", []), data.get("missing", [])
        total = len(covered) + len(missing)
        rest = f"; missing: {'; '.join(missing)}" if missing else ""
        return f"round {data.get('round')}: {len(covered)}/{total} sub-questions covered{rest}"
    if kind == "stopped":
        return str(data.get("reason", ""))
    if kind == "report":
        claims, sources = data.get("claims", []), data.get("sources", [])
        dropped = data.get("dropped", [])
        note = f" ({data['note']})" if data.get("note") else ""
        return (
            f"{len(claims)} claim(s) citing {len(sources)} source(s), {len(dropped)} dropped{note}"
        )
    return None
