"""The shape of a request's history: turns, units, dropped ranges.

A request is its *head* (the system messages before anything else: the system
prompt, and blocks other plugins put there), then its *body*: the session's
conversation. Body positions are stable for a session (the conversation is
folded from the journal in the same order on resume and replay), so what a
strategy dropped is kept as ranges of body positions.

A *turn* is a user message and everything after it until the next one. A
*unit* is what can never be split: an assistant message together with the
results of every tool call it made (the model must see each call with its
result), or any other single message.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence

from koboi.messages import Message

Ranges = list[tuple[int, int]]


def head_length(messages: Sequence[Message]) -> int:
    """How many system messages open the request (never dropped)."""
    count = 0
    for message in messages:
        if message.role != "system":
            break
        count += 1
    return count


def merge(ranges: Ranges) -> Ranges:
    """Sorted, disjoint, adjacent ranges joined."""
    merged: Ranges = []
    for start, end in sorted(r for r in ranges if r[1] > r[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def kept_backward(length: int, dropped: Ranges) -> Iterator[int]:
    """Body positions not dropped, newest first (cost: what is kept, not the session)."""
    position = length - 1
    index = len(dropped) - 1
    while position >= 0:
        while index >= 0 and dropped[index][0] > position:
            index -= 1
        if index >= 0 and dropped[index][0] <= position < dropped[index][1]:
            position = dropped[index][0] - 1
            index -= 1
            continue
        yield position
        position -= 1


def turns_backward(length: int, dropped: Ranges, role: Callable[[int], str]) -> Iterator[list[int]]:
    """The kept positions of each turn, newest turn first, each in ascending order."""
    turn: list[int] = []
    for position in kept_backward(length, dropped):
        turn.append(position)
        if role(position) == "user":
            turn.reverse()
            yield turn
            turn = []
    if turn:  # what comes before the first user message
        turn.reverse()
        yield turn


def units(positions: Sequence[int], message: Callable[[int], Message]) -> list[list[int]]:
    """Group ascending positions into units: a tool result joins the message before it."""
    grouped: list[list[int]] = []
    for position in positions:
        if message(position).role == "tool" and grouped:
            grouped[-1].append(position)
        else:
            grouped.append([position])
    return grouped


def fingerprint(message: Message) -> str:
    """A short digest that tells whether a body position still holds the same message."""
    digest = hashlib.sha256()
    digest.update(message.role.encode())
    digest.update(str(len(message.content)).encode())
    digest.update(message.content[:256].encode())
    for call in message.tool_calls:
        digest.update(call.id.encode())
    digest.update((message.tool_call_id or "").encode())
    return digest.hexdigest()[:16]


def subtract(ranges: Ranges, minus: Ranges) -> Ranges:
    """The parts of ``ranges`` outside ``minus`` (both sorted)."""
    result: Ranges = []
    for start, end in ranges:
        cursor = start
        for low, high in minus:
            if high <= cursor or low >= end:
                continue
            if low > cursor:
                result.append((cursor, low))
            cursor = max(cursor, high)
            if cursor >= end:
                break
        if cursor < end:
            result.append((cursor, end))
    return result
