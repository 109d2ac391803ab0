"""Server-sent events of a session, read from its journal.

Every journal event becomes exactly one SSE event whose ``id`` is the event's
``seq``, so the ids of a session are 1, 2, 3... with no hole. A client that
reconnects with ``Last-Event-ID: N`` (or ``?after=N``) gets every event with
``seq > N``, in order, and nothing it already had — on any replica, because
the events are read from the store.

Three kinds of SSE events carry **no id** (they do not move the client's
cursor, and a reconnect never repeats or skips a journal event because of
them):

- ``text_delta``: text the model streams. It is not journaled; it belongs to
  the model call that journal event ``after_event_id`` started, at character
  ``offset`` (Unicode code points) within the text of that call. The complete
  text is in the ``step`` event that ends the call. A stream that starts in
  the middle of a call first sends the text so far as one delta at offset 0;
  only the replica running the session streams text (a stream on another
  replica gets the ``step`` events).
- a redelivered ``pending_approval`` (``"redelivered": true``): an approval
  requested at or before the client's cursor and still undecided, sent again
  on every (re)connection so a client that reconnects knows what waits for it.
- the terminal ``error`` and ``idle`` events.

Every stream ends with one terminal event: ``final`` (the run finished; in
``/v1/sessions/{id}/events``, the last run of the session), ``error`` (code
and message: the key was revoked, the server is shutting down...) or ``idle``
(nothing runs in the session and nothing is newer than the cursor).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

from koboi import journal as J
from koboi.errors import StoreError
from koboi.store import JournalEvent, SessionInfo, Store
from koboi_server.approvals import ApprovalBook, fold_approvals, view
from koboi_server.hub import Committed, Delta, Hub
from koboi_server.keys import KeyRing, Principal

if TYPE_CHECKING:
    from koboi_server.runs import RunRegistry
    from koboi_server.settings import ServerSettings

#: Event names of the projection, for the docs and the OpenAPI description.
EVENT_NAMES = (
    "run_started",
    "run_resumed",
    "step_started",
    "text_delta",
    "step",
    "step_failed",
    "tool_call",
    "tool_result",
    "pending_approval",
    "approval_decided",
    "provider_event",
    "budget_exceeded",
    "final",
    "error",
    "idle",
    "journal",
)

_PAGE = 500


def frame(event: str, data: Mapping[str, Any], event_id: int | None = None) -> bytes:
    """One SSE event. JSON escapes newlines, so ``data`` is always one line."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {text}\n\n".encode()


def _usage(data: Mapping[str, Any]) -> Any:
    return data.get("usage") or {}


def project(event: JournalEvent, calls: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The SSE name and data of a journal event (``pending_approval`` is completed later).

    ``calls`` collects the arguments of the tool calls seen so far, by call id.
    """
    data = event.data
    kind = event.type
    base: dict[str, Any] = {"event_id": event.seq, "session_id": event.session_id, "at": event.at}
    if kind == J.RUN_STARTED:
        return "run_started", {**base, "input": data.get("input", ""), "agent": data.get("agent")}
    if kind == J.RUN_RESUMED:
        return "run_resumed", {
            **base,
            "after_event_id": data.get("after_seq"),
            "step": data.get("step"),
        }
    if kind == J.MODEL_CALL_STARTED:
        return "step_started", {**base, "step": data.get("step")}
    if kind == J.MODEL_CALL_FINISHED:
        response = data.get("response") or {}
        message = response.get("message") or {}
        tool_calls = [
            {"id": c.get("id"), "name": c.get("name"), "arguments": c.get("arguments", {})}
            for c in message.get("tool_calls") or ()
        ]
        for call in tool_calls:
            calls[str(call["id"])] = call["arguments"]
        return "step", {
            **base,
            "step": data.get("step"),
            "text": message.get("content") or "",
            "tool_calls": tool_calls,
            "usage": _usage(response),
        }
    if kind == J.MODEL_CALL_FAILED:
        return "step_failed", {**base, "step": data.get("step"), "error": data.get("error")}
    if kind == J.TOOL_CALL_STARTED:
        return "tool_call", {
            **base,
            "step": data.get("step"),
            "call_id": data.get("call_id"),
            "name": data.get("name"),
            "arguments": data.get("arguments", {}),
        }
    if kind in (J.TOOL_CALL_FINISHED, J.TOOL_CALL_REFUSED, J.TOOL_CALL_INTERRUPTED):
        if kind == J.TOOL_CALL_FINISHED:
            content, is_error, refused_by = (
                data.get("content", ""),
                bool(data.get("is_error")),
                None,
            )
        elif kind == J.TOOL_CALL_REFUSED:
            content, is_error, refused_by = data.get("reason", ""), True, data.get("stage")
        else:
            content, is_error, refused_by = J.INTERRUPTED_RESULT, True, "resume"
        return "tool_result", {
            **base,
            "step": data.get("step"),
            "call_id": data.get("call_id"),
            "name": data.get("name"),
            "content": content,
            "is_error": is_error,
            "refused_by": refused_by,
        }
    if kind == J.APPROVAL_REQUESTED:
        call_id = str(data.get("call_id"))
        return "pending_approval", {
            **base,
            "approval_id": data.get("approval_id"),
            "step": data.get("step"),
            "call_id": call_id,
            "tool": data.get("name"),
            "arguments": calls.get(call_id),
            "arguments_hash": data.get("arguments_hash"),
            "risk": data.get("risk"),
            "reason": data.get("reason"),
            "expires_at": data.get("expires_at"),
        }
    if kind == J.APPROVAL_DECIDED:
        return "approval_decided", {
            **base,
            **{
                k: data.get(k)
                for k in ("step", "call_id", "approval_id", "approved", "reason", "decided_by")
            },
            "scope": data.get("scope"),
        }
    if kind == J.PROVIDER_EVENT:
        return "provider_event", {**base, **dict(data)}
    if kind == J.BUDGET_EXCEEDED:
        return "budget_exceeded", {**base, **dict(data)}
    if kind == J.RUN_FINISHED:
        return "final", {
            **base,
            **{k: data.get(k) for k in ("outcome", "output", "steps", "error", "cost_usd")},
            "usage": _usage(data),
        }
    return "journal", {**base, "type": kind, "data": dict(data)}


class SessionStream:
    """The SSE stream of one session after a cursor.

    ``mode="run"`` (``POST /v1/chat/stream``) ends with the first ``final`` after
    the cursor: the run the request started. ``mode="follow"``
    (``GET /v1/sessions/{id}/events``) ends once it has delivered the last run's
    ``final``, or at once with ``idle`` when nothing runs and nothing is newer.
    """

    def __init__(
        self,
        *,
        store: Store,
        hub: Hub,
        book: ApprovalBook,
        keys: KeyRing,
        registry: RunRegistry,
        settings: ServerSettings,
        session: SessionInfo,
        after: int,
        principal: Principal,
        token: str | None,
        mode: Literal["run", "follow"],
    ) -> None:
        self.store = store
        self.hub = hub
        self.book = book
        self.keys = keys
        self.registry = registry
        self.settings = settings
        self.session = session
        self.sid = session.id
        self.cursor = after
        self.principal = principal
        self.token = token
        self.mode = mode
        self.start = after
        self.finished = False
        self._calls: dict[str, Any] = {}
        self._last_type: str | None = None
        self._delivered = 0

    async def frames(self) -> AsyncIterator[bytes]:
        """The stream's bytes; ends with a terminal event."""
        yield b"retry: 2000\n\n"
        with self.hub.subscribe(self.sid) as sub:
            try:
                async for chunk in self._frames(sub):
                    yield chunk
            except StoreError as exc:
                yield frame(
                    "error",
                    {
                        "code": "store_unavailable",
                        "message": f"the store failed while streaming ({exc}); reconnect with "
                        f"Last-Event-ID: {self.cursor}",
                        "last_event_id": self.cursor,
                    },
                )

    async def _frames(self, sub: Any) -> AsyncIterator[bytes]:
        settings = self.settings
        clock = time.monotonic
        next_keepalive = clock() + settings.keepalive_seconds
        next_key_check = clock() + settings.key_recheck_seconds

        async for chunk in self._open():
            yield chunk
        if self.finished:
            return
        while True:
            if self.registry.draining:
                yield self._error(
                    "shutting_down",
                    "this server is shutting down; reconnect (to another replica) with "
                    f"Last-Event-ID: {self.cursor}",
                )
                return
            sent = False
            items = sub.take()
            for item in items:
                # Both kinds say how far the journal is known to go: read up to there first,
                # so a delta is sent right after the step_started it belongs to.
                known = item.seq if isinstance(item, Committed) else item.after_seq
                if known > self.cursor:
                    async for chunk in self._catch_up(upto=known):
                        sent = True
                        yield chunk
                if isinstance(item, Delta) and item.after_seq == self.cursor and not self.finished:
                    sent = True
                    yield frame(
                        "text_delta",
                        {
                            "session_id": self.sid,
                            "step": item.step,
                            "after_event_id": item.after_seq,
                            "offset": item.offset,
                            "text": item.text,
                        },
                    )
                if self.finished:
                    return
            if not items or not self.hub.local(self.sid):
                # Woken without news (a poll, a run that ended here) or following a run
                # on another replica: read whatever the store has.
                async for chunk in self._catch_up(upto=None):
                    sent = True
                    yield chunk
                if self.finished:
                    return
                if self.mode == "follow" and await self._settled():
                    if not self._delivered:
                        yield self._idle_event()
                    return
            now = clock()
            if sent:
                next_keepalive = now + settings.keepalive_seconds
            elif now >= next_keepalive:
                yield b": keepalive\n\n"
                next_keepalive = now + settings.keepalive_seconds
            if now >= next_key_check:
                next_key_check = now + settings.key_recheck_seconds
                if not await self._key_still_valid():
                    yield self._error(
                        "unauthorized", "the API key of this stream was revoked; stream ended"
                    )
                    return
            wait = min(next_keepalive, next_key_check) - clock()
            if not self.hub.local(self.sid):
                wait = min(wait, settings.poll_seconds)
            await sub.wait(max(0.0, wait))

    async def _open(self) -> AsyncIterator[bytes]:
        """The events after the cursor, then approvals still waiting from before it."""
        redeliver: list[dict[str, Any]] = []
        if self.mode == "follow" and self.cursor > 0 and self.session.status == "running":
            events = await self.store.read(self.sid)
            folded = fold_approvals(events)
            for approval_id, entry in folded.items():
                if entry.requested.seq > self.cursor or entry.decided is not None:
                    continue
                record = await self.book.ensure(self.session.owner, entry)
                current = view(record, entry, await self.book.decision(approval_id))
                if current["status"] == "pending":
                    redeliver.append(current)
            for event in events:
                if event.seq <= self.cursor and event.type == J.MODEL_CALL_FINISHED:
                    project(event, self._calls)
        async for chunk in self._catch_up(upto=None):
            yield chunk
        if self.finished:
            return
        for pending in redeliver:
            name, data = (
                "pending_approval",
                {
                    "session_id": self.sid,
                    **pending,
                    "event_id": pending.get("requested_event_id"),
                    "redelivered": True,
                },
            )
            data.pop("requested_event_id", None)
            yield frame(name, data)
        if self.mode == "follow" and await self._settled():
            if not self._delivered:
                yield self._idle_event()
            self.finished = True

    async def _catch_up(self, *, upto: int | None) -> AsyncIterator[bytes]:
        """Journal events after the cursor (up to ``upto``), as frames; stops at a terminal."""
        while not self.finished:
            limit = _PAGE if upto is None else min(_PAGE, upto - self.cursor)
            if limit <= 0:
                return
            events = await self.store.read(self.sid, after=self.cursor, limit=limit)
            for event in events:
                yield await self._frame_of(event)
                self._delivered += 1
                self.cursor = event.seq
                self._last_type = event.type
                if event.type == J.RUN_FINISHED and await self._ends_here(event):
                    self.finished = True
                    return
            if len(events) < limit:
                return

    async def _frame_of(self, event: JournalEvent) -> bytes:
        name, data = project(event, self._calls)
        if name == "pending_approval":
            # The approval must be answerable (its record written) before it is announced.
            approval_id = str(data.get("approval_id"))
            record = await self.book.get(approval_id)
            if record is None:
                record = await self.book.ensure_from_journal(self.sid, approval_id)
            if record is not None:
                data["arguments"] = record.get("arguments")
        return frame(name, data, event.seq)

    async def _ends_here(self, event: JournalEvent) -> bool:
        if self.mode == "run":
            return event.seq > self.start
        if self.hub.local(self.sid):
            return False
        return not await self.store.read(self.sid, after=event.seq, limit=1)

    async def _settled(self) -> bool:
        """Nothing runs in the session and the cursor is at its end (after a ``final``)."""
        if self.hub.local(self.sid) or self.sid in self.registry.runs:
            return False
        if await self.store.read(self.sid, after=self.cursor, limit=1):
            return False
        if self.cursor == 0:
            return True
        if self._last_type is None:
            last = await self.store.read(self.sid, after=self.cursor - 1, limit=1)
            self._last_type = last[0].type if last else None
        return self._last_type in (None, J.RUN_FINISHED)

    def _idle_event(self) -> bytes:
        return frame(
            "idle",
            {
                "session_id": self.sid,
                "last_event_id": self.cursor,
                "message": "nothing runs in this session and there is nothing newer",
            },
        )

    def _error(self, code: str, message: str) -> bytes:
        return frame(
            "error",
            {
                "session_id": self.sid,
                "code": code,
                "message": message,
                "last_event_id": self.cursor,
            },
        )

    async def _key_still_valid(self) -> bool:
        if self.token is None:
            return True
        try:
            principal = await self.keys.verify(self.token)
        except StoreError:
            return True  # cannot tell now; the next check will
        return principal is not None and principal.name == self.principal.name
