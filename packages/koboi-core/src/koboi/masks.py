"""Every redaction the interceptors provide, applied together (free when there is none).

The kernel masks with them each journal event and audit record before they are
stored, and each event a run yields: streamed text through a stream redactor,
which may hold back the start of a possible secret until the next piece.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from koboi.interceptors import Redaction, StreamRedaction


class Masks:
    """The active redactions, in order."""

    __slots__ = ("active", "redactions")

    def __init__(self, redactions: Sequence[Redaction]) -> None:
        self.redactions = [r for r in redactions if r.active]
        self.active = bool(self.redactions)

    def text(self, text: str) -> str:
        for redaction in self.redactions:
            text = redaction.redact(text)
        return text

    def data(self, data: Any) -> Any:
        for redaction in self.redactions:
            data = redaction.redact_data(data)
        return data

    def stream(self) -> StreamMasks | None:
        return StreamMasks([r.stream() for r in self.redactions]) if self.active else None


class StreamMasks:
    """Each redaction's stream, chained: what one emits, the next is fed."""

    __slots__ = ("streams",)

    def __init__(self, streams: list[StreamRedaction]) -> None:
        self.streams = streams

    def feed(self, text: str) -> str:
        for stream in self.streams:
            text = stream.feed(text)
        return text

    def flush(self) -> str:
        text = ""
        for stream in self.streams:
            text = stream.feed(text) + stream.flush() if text else stream.flush()
        return text
