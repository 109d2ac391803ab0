"""Key facts: one line for each message a strategy dropped, newest kept first.

A pure function of the dropped messages, so resume and replay rebuild the same
block without any journal entry of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from koboi.messages import Message

HEADING = "Key facts from earlier in this conversation (older turns were dropped):"
_CHARS = 160


def _one_line(text: str, limit: int = _CHARS) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def fact_lines(message: Message, calls: dict[str, str]) -> list[str]:
    """The facts of one message; ``calls`` maps call ids to ``name(arguments)``."""
    if message.role == "tool":
        call = calls.get(message.tool_call_id or "", message.name or "a tool")
        outcome = "failed: " if message.is_error else ""
        return [f"{call} -> {outcome}{_one_line(message.content)}"]
    if message.role == "user":
        return [f"the user said: {_one_line(message.content)}"]
    if message.role == "assistant" and message.content.strip():
        return [f"the assistant said: {_one_line(message.content)}"]
    if message.role == "system" and message.content.strip():
        return [f"note: {_one_line(message.content)}"]
    return []


def describe_call(message: Message) -> dict[str, str]:
    return {
        call.id: f"{call.name}({_one_line(json.dumps(call.arguments, sort_keys=True), 80)})"
        for call in message.tool_calls
    }


def facts_block(
    dropped_backward: Iterator[int],
    message: Callable[[int], Message],
    size: Callable[[str], int],
    room: int,
) -> str | None:
    """The block of facts of the dropped messages (walked newest first) whose lines fit
    ``room`` tokens (``size`` counts a text; the caller checks the whole block)."""
    lines: list[str] = []  # newest first
    used = size(HEADING) + 1
    results: list[Message] = []  # tool results whose call is not reached yet
    for position in dropped_backward:
        current = message(position)
        if current.role == "tool":
            results.append(current)
            continue
        calls = describe_call(current)
        added = [line for result in results for line in fact_lines(result, calls)]
        added.extend(fact_lines(current, calls))
        results = []
        for line in added:
            cost = size(f"- {line}") + 1
            if used + cost > room:
                return render(lines)
            lines.append(line)
            used += cost
    for line in (line for r in results for line in fact_lines(r, {})):
        cost = size(f"- {line}") + 1
        if used + cost > room:
            break
        lines.append(line)
        used += cost
    return render(lines)


def render(newest_first: list[str]) -> str | None:
    """The block of ``newest_first`` lines, oldest first; None without any."""
    if not newest_first:
        return None
    return HEADING + "\n" + "\n".join(f"- {line}" for line in reversed(newest_first))
