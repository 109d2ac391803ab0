"""Summaries of dropped turns, written by the run's own model through side calls.

A side call (``run.model.complete(..., purpose="context.summary")``) is journaled
and answered from the journal when a resumed run asks it again; the summary it
produced is journaled with the compaction (``context.compacted``), so later runs,
a resume and a replay reuse it instead of asking again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from koboi.interceptors import RunInfo
from koboi.messages import Message, ModelRequest

PURPOSE = "context.summary"

DEFAULT_PROMPT = (
    "You keep the memory of a long conversation between a user and an assistant that "
    "uses tools. Write an updated summary: keep every fact, name, number, decision, "
    "result and open task that later turns may need; drop pleasantries. Write plain "
    "sentences, at most {words} words. Answer with the summary only."
)


def render(message: Message, limit: int) -> str:
    """One message as a line of the text to summarise, cut to ``limit`` characters."""
    text = " ".join(message.content.split())
    if message.tool_calls:
        calls = "; ".join(
            f"{c.name}({json.dumps(c.arguments, sort_keys=True)})" for c in message.tool_calls
        )
        text = f"{text} [called {calls}]".strip()
    who = message.role if message.role != "tool" else f"tool {message.name or ''}".strip()
    line = f"{who}: {text}"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def chunks(lines: Sequence[str], size: Callable[[str], int], room: int) -> list[str]:
    """Consecutive lines grouped so each group fits one summary call: each line counted
    once, with a token for its line break (joining texts never makes them longer than
    that). A line longer than ``room`` alone is cut to fit."""
    groups: list[str] = []
    current: list[str] = []
    used = 0
    for line in lines:
        tokens = size(line) + 1
        while tokens > room and len(line) > 1:  # one huge message: keep its beginning
            line = line[: len(line) * room // tokens]
            tokens = size(line) + 1
        if current and used + tokens > room:
            groups.append("\n".join(current))
            current, used = [], 0
        current.append(line)
        used += tokens
    if current:
        groups.append("\n".join(current))
    return groups


async def summarise(
    run: RunInfo,
    previous: str | None,
    lines: Sequence[str],
    *,
    prompt: str,
    words: int,
    size: Callable[[str], int],
    room: int,
) -> str:
    """The summary of ``previous`` and the dropped ``lines``, one side call per chunk.

    ``room``: the tokens of text one call may carry beside the prompt and a summary of
    the longest allowed size (the caller's budget); ``size`` counts them."""
    system = prompt.replace("{words}", str(words))
    summary = previous
    for chunk in chunks(lines, size, room):
        request = ModelRequest(
            messages=[Message.system(system), Message.user(_user(summary, chunk))]
        )
        response = await run.model.complete(request, purpose=PURPOSE)
        summary = response.message.content.strip() or summary
    return summary or ""


def _user(previous: str | None, text: str) -> str:
    earlier = previous if previous else "(nothing yet)"
    return f"Summary so far:\n{earlier}\n\nConversation to add to it:\n{text}"
