"""In-process fan-out of what runs on this replica: journal commits, streamed text, live events.

Streams never take journal events from here — they read them from the store,
which is the truth and is shared by every replica. The hub only *wakes* a
stream when a run of this process commits (so it reads at once instead of at
its next poll) and carries what the journal does not keep: the text a model
streams while it answers, and *live* events — a plugin's progress
(``run.emit``) and the events of child runs (sub-agents, a runner's nodes) —
that exist only while the run executes.

Text of a model call is tied to the journal event that started it
(``model_call_started``, its seq ``after_event_id``) and numbered by character
``offset`` within that call. A stream that subscribes in the middle of a call
first gets everything streamed so far (one delta at offset 0), so a client
that reconnects after event N sees the partial text of the call N started,
and can drop what it already had by offset.

A live event is tied to the last journal event the run had committed when it
happened (``after_seq``): a stream sends it once it has sent that event, so it
comes after what preceded it. Live events are not replayed to a stream that
subscribes later (they are progress, not history).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

#: Items a subscriber may hold before its oldest text or live event is dropped (a
#: slow client; the text is in the journal's ``step`` event anyway); journal
#: wake-ups are never dropped.
MAX_PENDING = 4096


@dataclass(frozen=True, slots=True)
class Committed:
    """A run of this process committed events up to ``seq``."""

    seq: int


@dataclass(frozen=True, slots=True)
class Delta:
    """Streamed text of the model call started by journal event ``after_seq``."""

    after_seq: int
    step: int
    offset: int
    text: str


@dataclass(frozen=True, slots=True)
class Live:
    """An event that is streamed but not journaled (``plugin_event``, ``child_event``).

    ``after_seq`` is the last journal event the run had committed when it happened.
    """

    after_seq: int
    name: str
    data: Mapping[str, Any]


Item = Committed | Delta | Live


@dataclass
class _Streaming:
    """The model call a local run is streaming now."""

    after_seq: int = 0
    step: int = 0
    parts: list[str] = field(default_factory=list)
    length: int = 0
    #: The last journal event the run committed.
    last_seq: int = 0


class Subscription:
    """What a stream of one session receives, in the order it happened."""

    def __init__(self, hub: Hub, session_id: str) -> None:
        self._hub = hub
        self.session_id = session_id
        self._items: deque[Item] = deque()
        self._ready = anyio.Event()
        self.closed = False

    def push(self, item: Item) -> None:
        if len(self._items) >= MAX_PENDING:
            for index, old in enumerate(self._items):
                if not isinstance(old, Committed):
                    del self._items[index]
                    break
        self._items.append(item)
        self._ready.set()

    def wake(self) -> None:
        self._ready.set()

    def take(self) -> list[Item]:
        items = list(self._items)
        self._items.clear()
        return items

    async def wait(self, timeout: float) -> None:
        """Until something arrives or is signalled, or ``timeout`` seconds pass."""
        if not self._items:
            with anyio.move_on_after(timeout):
                await self._ready.wait()
        self._ready = anyio.Event()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._hub._unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Hub:
    """Subscriptions per session, and the text being streamed by each local run."""

    def __init__(self) -> None:
        self._subscribers: dict[str, set[Subscription]] = {}
        self._streaming: dict[str, _Streaming] = {}

    def local(self, session_id: str) -> bool:
        """True while a run of this process works on the session."""
        return session_id in self._streaming

    def subscribe(self, session_id: str) -> Subscription:
        sub = Subscription(self, session_id)
        self._subscribers.setdefault(session_id, set()).add(sub)
        streaming = self._streaming.get(session_id)
        if streaming is not None and streaming.parts:
            text = "".join(streaming.parts)
            sub.push(Delta(streaming.after_seq, streaming.step, 0, text))
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        subs = self._subscribers.get(sub.session_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subscribers[sub.session_id]

    def _push(self, session_id: str, item: Item) -> None:
        for sub in self._subscribers.get(session_id, ()):
            sub.push(item)

    # -- what runs of this process report -------------------------------------------

    def run_started(self, session_id: str) -> None:
        self._streaming[session_id] = _Streaming()

    def run_ended(self, session_id: str) -> None:
        self._streaming.pop(session_id, None)
        self.wake(session_id)

    def committed(self, session_id: str, seq: int, *, model_call_step: int | None = None) -> None:
        """Journal event ``seq`` was committed; a ``model_call_started`` names its step."""
        streaming = self._streaming.get(session_id)
        if streaming is not None and model_call_step is not None:
            streaming = self._streaming[session_id] = _Streaming(
                after_seq=seq, step=model_call_step
            )
        if streaming is not None:
            streaming.last_seq = max(streaming.last_seq, seq)
        self._push(session_id, Committed(seq))

    def text(self, session_id: str, step: int, text: str) -> None:
        """A piece of text the model streamed in ``step``."""
        streaming = self._streaming.get(session_id)
        if streaming is None or streaming.step != step or not streaming.after_seq:
            return
        offset = streaming.length
        streaming.parts.append(text)
        streaming.length += len(text)
        self._push(session_id, Delta(streaming.after_seq, step, offset, text))

    def live(self, session_id: str, name: str, data: Mapping[str, Any]) -> None:
        """A live event (``name``: its SSE event) of a local run of ``session_id``."""
        streaming = self._streaming.get(session_id)
        if streaming is None:
            return
        self._push(session_id, Live(streaming.last_seq, name, data))

    def wake(self, session_id: str) -> None:
        for sub in self._subscribers.get(session_id, ()):
            sub.wake()

    def wake_all(self) -> None:
        for subs in self._subscribers.values():
            for sub in subs:
                sub.wake()
