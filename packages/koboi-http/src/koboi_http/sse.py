"""An incremental Server-Sent Events decoder.

Follows the WHATWG event-stream rules: lines end in CRLF, LF or CR (a CR at
the end of one chunk and an LF at the start of the next are one line end);
``data`` lines of one event are joined with newlines; comment lines (``:``)
are skipped; an event is dispatched on an empty line; an event left without
its closing empty line when the stream ends is dropped. Bytes are decoded as
UTF-8 incrementally, so a character split across two network chunks is
decoded whole.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator
from typing import NamedTuple


class SSEEvent(NamedTuple):
    """One dispatched event. ``event`` is ``"message"`` when the stream named none.

    A named tuple, not a frozen dataclass: one is made per streamed token, and
    a tuple is several times cheaper to build.
    """

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Feed bytes in, get whole events out."""

    __slots__ = ("_data", "_decoder", "_event", "_id", "_pending", "_retry", "_trailing_cr")

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._trailing_cr = False
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode ``chunk``; return the events it completed (possibly none)."""
        text = self._decoder.decode(chunk)
        if not text:
            return []
        if self._trailing_cr:
            # The previous chunk ended in CR and that line was already ended;
            # an LF right after it belongs to the same line end.
            self._trailing_cr = False
            if text[0] == "\n":
                text = text[1:]
        if "\r" in text:
            self._trailing_cr = text.endswith("\r")
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        text = self._pending + text
        lines = text.split("\n")
        self._pending = lines.pop()
        events: list[SSEEvent] = []
        for line in lines:
            if line.startswith("data: "):
                # The usual line, by far: skip the general field parsing.
                self._data.append(line[6:])
            elif line:
                self._field(line)
            elif self._data:
                events.append(
                    SSEEvent("\n".join(self._data), self._event or "message", self._id, self._retry)
                )
                self._data = []
                self._event = ""
                self._retry = None
            else:
                self._event = ""
        return events

    def _field(self, line: str) -> None:
        if line[0] == ":":
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)

    @property
    def has_partial_event(self) -> bool:
        """True when bytes of an event were seen but not its closing empty line."""
        return bool(self._data or self._pending)


async def aiter_sse(chunks: AsyncIterator[bytes]) -> AsyncIterator[SSEEvent]:
    """The events of a byte stream (``httpx.Response.aiter_bytes()``, for instance)."""
    decoder = SSEDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
