"""Server-sent events of a session, read from its journal.

Every journal event becomes exactly one SSE event whose ``id`` is the event's
``seq``, so the ids of a session are 1, 2, 3... with no hole. A client that
reconnects with ``Last-Event-ID: N`` (or ``?after=N``) gets every event with
``seq > N``, in order, and nothing it already had — on any replica, because
the events are read from the store.

These SSE events carry **no id** (they do not move the client's
cursor, and a reconnect never repeats or skips a journal event because of
them):

- ``text_delta``: text the model streams. It is not journaled; it belongs to
  the model call that journal event ``after_event_id`` started, at character
  ``offset`` (Unicode code points) within the text of that call. The complete
  text is in the ``step`` event that ends the call. A stream that starts in
  the middle of a call first sends the text so far as one delta at offset 0;
  only the replica running the session streams text (a stream on another
  replica gets the ``step`` events).
- live events of the run, also not journaled and only on the replica running
  it: ``plugin_event`` (a plugin's progress, ``run.emit``; a journaled plugin
  event is a ``plugin_event`` *with* an id, from the journal) and
  ``child_event`` (an event of a child run: a sub-agent or a runner's node,
  tagged with the parent's tool call), and a child run's ``pending_approval`` /
  ``approval_decided`` (with ``child_session_id``: the child's session has no
  stream of its own). ``after_event_id`` is the last journal event before it.
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
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from koboi import journal as J
from koboi.errors import StoreError
from koboi.events import (
    AgentEvent,
    ChildEvent,
    PluginEvent,
    StepEvent,
    TextDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from koboi.store import JournalEvent, SessionInfo, Store
from koboi_server.approvals import ApprovalBook, fold_approvals, view
from koboi_server.hub import Committed, Delta, Hub, Live
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
    "tool_suspended",
    "pending_approval",
    "approval_decided",
    "provider_event",
    "budget_exceeded",
    "context_added",
    "answer_replaced",
    "run_continued",
    "side_call_started",
    "side_call_finished",
    "side_call_failed",
    "tools_changed",
    "plugin_event",
    "child_event",
    "final",
    "error",
    "idle",
    "journal",
)

_PAGE = 500


def frame(event: str, data: Mapping[str, Any], event_id: int | None = None) -> bytes:
    """One SSE event. JSON escapes newlines, so ``data`` is always one line."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {text}\n\n".encode()


def _tool_calls(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    message = response.get("message") or {}
    return [
        {"id": c.get("id"), "name": c.get("name"), "arguments": c.get("arguments", {})}
        for c in message.get("tool_calls") or ()
    ]


def _text(response: Mapping[str, Any]) -> str:
    message = response.get("message") or {}
    return str(message.get("content") or "")


def final_data(data: J.RunFinishedData) -> dict[str, Any]:
    """What ``final`` (and a chat's result) says of a ``run_finished``."""
    return {
        "outcome": data["outcome"],
        "output": data.get("output", ""),
        "steps": data.get("steps", 0),
        "error": data.get("error"),
        "cost_usd": data.get("cost_usd"),
        "usage": data.get("usage") or {},
        "refused_by": data.get("refused_by"),
        "suspension": data.get("suspension"),
    }


def project(event: JournalEvent, calls: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The SSE name and data of a journal event (``pending_approval`` is completed later).

    ``calls`` collects the arguments of the tool calls seen so far, by call id.
    Every kernel event is read through its kind (:class:`koboi.journal.EventKind`);
    a plugin's event becomes a ``plugin_event``; an event of a newer kernel, a
    ``journal`` event with its type and data.
    """
    kind = event.type
    base: dict[str, Any] = {"event_id": event.seq, "session_id": event.session_id, "at": event.at}
    if kind == J.RUN_STARTED:
        started = J.RUN_STARTED.of(event)
        data: dict[str, Any] = {
            **base,
            "input": started.get("input", ""),
            "agent": started.get("agent"),
            "kind": started.get("kind", "message"),
        }
        if "call" in started:
            data["call"] = started["call"]
        if "tools" in started:
            data["tools"] = started["tools"]
        if "runner" in started:
            data["runner"] = started["runner"]
        if "trace" in started:
            data["trace"] = started["trace"]
        return "run_started", data
    if kind == J.RUN_RESUMED:
        resumed = J.RUN_RESUMED.of(event)
        data = {**base, "after_event_id": resumed.get("after_seq"), "step": resumed.get("step")}
        if "reply" in resumed:
            data["reply"] = resumed["reply"]
        if "trace" in resumed:
            data["trace"] = resumed["trace"]
        return "run_resumed", data
    if kind == J.MODEL_CALL_STARTED:
        return "step_started", {**base, "step": J.MODEL_CALL_STARTED.of(event)["step"]}
    if kind == J.MODEL_CALL_FINISHED:
        finished = J.MODEL_CALL_FINISHED.of(event)
        response = finished.get("response") or {}
        tool_calls = _tool_calls(response)
        for call in tool_calls:
            calls[str(call["id"])] = call["arguments"]
        return "step", {
            **base,
            "step": finished["step"],
            "text": _text(response),
            "tool_calls": tool_calls,
            "usage": response.get("usage") or {},
        }
    if kind == J.MODEL_CALL_FAILED:
        failed = J.MODEL_CALL_FAILED.of(event)
        return "step_failed", {**base, "step": failed["step"], "error": failed["error"]}
    if kind == J.TOOL_CALL_STARTED:
        started_call = J.TOOL_CALL_STARTED.of(event)
        return "tool_call", {
            **base,
            "step": started_call["step"],
            "call_id": started_call["call_id"],
            "name": started_call["name"],
            "arguments": started_call.get("arguments", {}),
        }
    if kind == J.TOOL_CALL_FINISHED:
        done = J.TOOL_CALL_FINISHED.of(event)
        return "tool_result", _tool_result(
            base, done["step"], done["call_id"], done["name"], done["content"], done["is_error"]
        )
    if kind == J.TOOL_CALL_REFUSED:
        refused = J.TOOL_CALL_REFUSED.of(event)
        return "tool_result", _tool_result(
            base,
            refused["step"],
            refused["call_id"],
            refused["name"],
            refused["reason"],
            True,
            refused_by=refused["stage"],
        )
    if kind == J.TOOL_CALL_INTERRUPTED:
        lost = J.TOOL_CALL_INTERRUPTED.of(event)
        return "tool_result", _tool_result(
            base,
            lost["step"],
            lost["call_id"],
            lost["name"],
            J.INTERRUPTED_RESULT,
            True,
            refused_by="resume",
        )
    if kind == J.TOOL_CALL_SUSPENDED:
        suspended = J.TOOL_CALL_SUSPENDED.of(event)
        return "tool_suspended", {**base, **suspended}
    if kind == J.APPROVAL_REQUESTED:
        asked = J.APPROVAL_REQUESTED.of(event)
        call_id = str(asked["call_id"])
        return "pending_approval", {
            **base,
            "approval_id": asked["approval_id"],
            "step": asked["step"],
            "call_id": call_id,
            "tool": asked["name"],
            "arguments": calls.get(call_id),
            "arguments_hash": asked["arguments_hash"],
            "risk": asked["risk"],
            "reason": asked["reason"],
            "expires_at": asked["expires_at"],
        }
    if kind == J.APPROVAL_DECIDED:
        decided = J.APPROVAL_DECIDED.of(event)
        return "approval_decided", {
            **base,
            "step": decided["step"],
            "call_id": decided["call_id"],
            "approval_id": decided["approval_id"],
            "approved": decided["approved"],
            "reason": decided["reason"],
            "decided_by": decided["decided_by"],
            "scope": decided.get("scope"),
        }
    if kind == J.PROVIDER_EVENT:
        return "provider_event", {**base, **J.PROVIDER_EVENT.of(event)}
    if kind == J.BUDGET_EXCEEDED:
        return "budget_exceeded", {**base, **J.BUDGET_EXCEEDED.of(event)}
    if kind == J.CONTEXT_ADDED:
        return "context_added", {**base, **J.CONTEXT_ADDED.of(event)}
    if kind == J.ANSWER_REPLACED:
        return "answer_replaced", {**base, **J.ANSWER_REPLACED.of(event)}
    if kind == J.RUN_CONTINUED:
        return "run_continued", {**base, **J.RUN_CONTINUED.of(event)}
    if kind == J.SIDE_CALL_STARTED:
        side = J.SIDE_CALL_STARTED.of(event)
        return "side_call_started", {**base, "step": side["step"], "purpose": side["purpose"]}
    if kind == J.SIDE_CALL_FINISHED:
        answered = J.SIDE_CALL_FINISHED.of(event)
        response = answered.get("response") or {}
        return "side_call_finished", {
            **base,
            "step": answered["step"],
            "purpose": answered["purpose"],
            "text": _text(response),
            "usage": response.get("usage") or {},
        }
    if kind == J.SIDE_CALL_FAILED:
        side_failed = J.SIDE_CALL_FAILED.of(event)
        return "side_call_failed", {
            **base,
            "step": side_failed["step"],
            "purpose": side_failed["purpose"],
            "error": side_failed["error"],
        }
    if kind == J.TOOLS_CHANGED:
        return "tools_changed", {**base, **J.TOOLS_CHANGED.of(event)}
    if kind == J.RUN_FINISHED:
        return "final", {**base, **final_data(J.RUN_FINISHED.of(event))}
    if J.is_plugin_event(kind):
        return "plugin_event", {**base, "type": kind, "data": dict(event.data)}
    return "journal", {**base, "type": kind, "data": dict(event.data)}


def _tool_result(
    base: Mapping[str, Any],
    step: int,
    call_id: str,
    name: str,
    content: str,
    is_error: bool,
    *,
    refused_by: str | None = None,
) -> dict[str, Any]:
    return {
        **base,
        "step": step,
        "call_id": call_id,
        "name": name,
        "content": content,
        "is_error": is_error,
        "refused_by": refused_by,
    }


def live_event(event: PluginEvent | ChildEvent) -> tuple[str, dict[str, Any]]:
    """The SSE name and data of a live event a local run yielded (no id: not journaled)."""
    if isinstance(event, PluginEvent):
        return "plugin_event", _plugin_data(event)
    return "child_event", _child_data(event)


def _plugin_data(event: PluginEvent) -> dict[str, Any]:
    return {
        "type": event.type,
        "data": dict(event.data),
        "step": event.step,
        "call_id": event.call_id,
    }


def _child_data(event: ChildEvent) -> dict[str, Any]:
    return {
        "parent_call_id": event.parent_call_id,
        "tag": event.tag,
        "child_session_id": event.session_id,
        "event": agent_event_data(event.event),
    }


def agent_event_data(event: AgentEvent) -> dict[str, Any]:
    """A caller event of the kernel (``agent.stream``) as JSON: what a ``child_event`` carries."""
    if isinstance(event, TextDeltaEvent):
        return {"kind": "text_delta", "step": event.step, "text": event.text}
    if isinstance(event, ToolCallEvent):
        call = event.call
        return {
            "kind": "tool_call",
            "step": event.step,
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
        }
    if isinstance(event, ToolResultEvent):
        return {
            "kind": "tool_result",
            "step": event.step,
            "call_id": event.call_id,
            "name": event.name,
            "content": event.content,
            "is_error": event.is_error,
            "refused_by": event.refused_by,
            "event_id": event.event_id,
        }
    if isinstance(event, StepEvent):
        return {
            "kind": "step",
            "step": event.step,
            "usage": event.usage.model_dump(),
            "tool_calls": event.tool_calls,
            "event_id": event.event_id,
        }
    if isinstance(event, PluginEvent):
        return {"kind": "plugin", **_plugin_data(event), "event_id": event.event_id}
    if isinstance(event, ChildEvent):
        return {"kind": "child", **_child_data(event)}
    result = event.result
    return {
        "kind": "final",
        "event_id": event.event_id,
        "outcome": result.outcome,
        "output": result.output,
        "steps": result.steps,
        "error": result.error,
        "usage": result.usage.model_dump(),
        "cost_usd": result.cost_usd,
        "refused_by": result.refused_by,
        "suspension": dict(result.suspension) if result.suspension is not None else None,
    }


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
        #: ``follow`` only: True while a run is on its way that the journal does not show
        #: yet (a queued job's): the stream waits for it instead of ending ``idle``.
        self.still_coming: Callable[[], Awaitable[bool]] | None = None

    async def frames(self) -> AsyncGenerator[bytes, None]:
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
                elif isinstance(item, Live) and not self.finished:
                    # Not journaled, so never repeated by a replay: sent late rather than
                    # dropped when the stream read past it while it waited.
                    sent = True
                    yield frame(
                        item.name,
                        {"session_id": self.sid, "after_event_id": item.after_seq, **item.data},
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
        if self.still_coming is not None and await self.still_coming():
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
