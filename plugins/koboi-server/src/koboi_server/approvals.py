"""Approvals over HTTP: pending requests and decisions kept in the store.

The kernel journals ``approval_requested`` (with its id, the arguments' hash
and a deadline) before it asks the approver, and ``approval_decided`` once it
has the answer. Beside the journal the server keeps two records per approval:

- ``server.approval`` (key: the approval id): what is asked — session, owner,
  step, call, tool, the arguments as the journal shows them (redacted like the
  journal), their hash, the deadline. Written by whoever first needs it (the
  approver, or a stream announcing ``pending_approval``); its content follows
  from the journal, so writing it twice is harmless.
- ``server.approval_decision`` (same key): the answer given over HTTP, stored
  with ``record_create`` — atomic across replicas — so of concurrent decisions
  exactly one is kept: an approval is decided once.

:class:`ServerApprover` waits for the decision record — woken at once when the
decision is posted to this process, polling the store when it was posted to
another replica — and hands the kernel a decision bound to the approval id,
the session and the arguments' hash. The kernel's deadline still applies: no
decision in time is a "no". A pending approval survives a restart: the
resumed run asks again under the same id and finds the same records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anyio

from koboi import journal as J
from koboi.approval import ApprovalDecision, ApprovalRequest, Approver
from koboi.errors import SessionNotFound, StoreError
from koboi.logs import get_logger
from koboi.store import JournalEvent, Store, records_of
from koboi_server.errors import ApiError, not_found
from koboi_server.keys import Principal

log = get_logger("koboi.server")

KIND = "server.approval"
DECISION_KIND = "server.approval_decision"

ApprovalStatus = Literal["pending", "approved", "denied", "expired"]


@dataclass
class _Folded:
    """What a session's journal says about one approval."""

    requested: JournalEvent
    arguments: Any
    decided: J.ApprovalDecidedData | None = None
    decided_seq: int | None = None

    @property
    def asked(self) -> J.ApprovalRequestedData:
        return J.APPROVAL_REQUESTED.of(self.requested)


def fold_approvals(events: Iterable[JournalEvent]) -> dict[str, _Folded]:
    """Every approval of a journal by id, with the arguments of its call and its outcome."""
    calls: dict[str, Any] = {}
    found: dict[str, _Folded] = {}
    for event in events:
        if event.type == J.MODEL_CALL_FINISHED:
            message = J.MODEL_CALL_FINISHED.of(event)["response"].get("message") or {}
            for call in message.get("tool_calls") or ():
                calls[str(call.get("id"))] = call.get("arguments", {})
        elif event.type == J.APPROVAL_REQUESTED:
            asked = J.APPROVAL_REQUESTED.of(event)
            approval_id = str(asked.get("approval_id") or "")
            if approval_id and approval_id not in found:
                found[approval_id] = _Folded(event, calls.get(str(asked["call_id"]), {}))
        elif event.type == J.APPROVAL_DECIDED:
            decided = J.APPROVAL_DECIDED.of(event)
            entry = found.get(str(decided.get("approval_id") or ""))
            if entry is not None:
                entry.decided, entry.decided_seq = decided, event.seq
    return found


def _record(owner: str | None, folded: _Folded) -> dict[str, Any]:
    asked = folded.asked
    return {
        "approval_id": asked["approval_id"],
        "session_id": folded.requested.session_id,
        "owner": owner,
        "step": asked["step"],
        "call_id": asked["call_id"],
        "tool": asked["name"],
        "arguments": folded.arguments,
        "arguments_hash": asked["arguments_hash"],
        "risk": asked["risk"],
        "reason": asked["reason"],
        "expires_at": float(asked.get("expires_at") or 0.0),
        "requested_event_id": folded.requested.seq,
    }


def view(
    record: Mapping[str, Any],
    folded: _Folded | None,
    decision: Mapping[str, Any] | None,
    *,
    now: float | None = None,
) -> dict[str, Any]:
    """The API's picture of an approval: the record, and its status from journal and decision."""
    now = time.time() if now is None else now
    status: ApprovalStatus = "pending"
    decided: dict[str, Any] = {
        "scope": None,
        "decided_by": None,
        "decision_reason": None,
        "decided_event_id": None,
    }
    journal_decision = folded.decided if folded is not None else None
    if journal_decision is not None:
        by = journal_decision["decided_by"]
        approved = journal_decision["approved"]
        status = "approved" if approved else ("expired" if by == "deadline" else "denied")
        decided.update(
            scope=journal_decision.get("scope"),
            decided_by=by,
            decision_reason=journal_decision.get("reason"),
            decided_event_id=folded.decided_seq if folded is not None else None,
        )
    elif decision is not None:
        status = "approved" if decision.get("approved") else "denied"
        decided.update(
            scope=decision.get("scope"),
            decided_by=decision.get("decided_by"),
            decision_reason=decision.get("reason"),
        )
    elif now >= float(record.get("expires_at") or 0.0):
        status = "expired"
    keys = (
        "approval_id",
        "session_id",
        "step",
        "call_id",
        "tool",
        "arguments",
        "arguments_hash",
        "risk",
        "reason",
        "expires_at",
        "requested_event_id",
    )
    return {**{k: record.get(k) for k in keys}, "status": status, **decided}


class ApprovalBook:
    """The approval records of one store, and in-process wake-ups for decisions."""

    def __init__(self, store: Store, *, retention_seconds: float) -> None:
        self.store = store
        self.records = records_of(store, "approvals over HTTP (koboi serve)")
        self.retention = retention_seconds
        self._waiters: dict[str, set[anyio.Event]] = {}

    def _expiry(self, record: Mapping[str, Any]) -> float:
        return float(record.get("expires_at") or time.time()) + self.retention

    async def get(self, approval_id: str) -> dict[str, Any] | None:
        return await self.records.record_get(KIND, approval_id)

    async def decision(self, approval_id: str) -> dict[str, Any] | None:
        return await self.records.record_get(DECISION_KIND, approval_id)

    async def ensure(
        self, owner: str | None, folded: _Folded, *, existing: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The pending record of a journaled approval, written if it is not there yet."""
        if existing is None:
            existing = await self.get(folded.asked["approval_id"])
        if existing is not None:
            return dict(existing)
        record = _record(owner, folded)
        expires = self._expiry(record)
        if expires > time.time():
            await self.records.record_put(KIND, record["approval_id"], record, expires_at=expires)
        return record

    async def ensure_from_journal(
        self, session_id: str, approval_id: str, *, near_seq: int | None = None
    ) -> dict[str, Any] | None:
        """The record of ``approval_id`` in ``session_id``, from the store or made from the journal.

        ``near_seq`` (the seq of its ``approval_requested``) lets it read only the end of a
        long journal: the call's arguments are in the model response just before.
        """
        existing = await self.get(approval_id)
        if existing is not None:
            return existing
        folded = None
        if near_seq is not None:
            recent = await self.store.read(session_id, after=max(0, near_seq - 64))
            folded = fold_approvals(recent).get(approval_id)
        if folded is None or (folded.arguments == {} and near_seq is not None and near_seq > 64):
            folded = fold_approvals(await self.store.read(session_id)).get(approval_id)
        if folded is None:
            return None
        info = await self.store.get_session(session_id)
        return await self.ensure(info.owner, folded, existing=None)

    async def for_session(self, session_id: str, owner: str | None) -> list[dict[str, Any]]:
        """Every approval of a session, oldest first, with its status."""
        folded = fold_approvals(await self.store.read(session_id))
        views = []
        now = time.time()
        for approval_id, entry in folded.items():
            record = await self.ensure(owner, entry)
            decision = await self.decision(approval_id) if entry.decided is None else None
            views.append(view(record, entry, decision, now=now))
        return views

    async def find(self, approval_id: str, principal: Principal) -> dict[str, Any]:
        """One approval of ``principal`` with its status; 404 for anyone else's or none."""
        record = await self.get(approval_id) if approval_id.startswith("ap_") else None
        if record is None or record.get("owner") != principal.name:
            raise not_found("approval", approval_id)
        try:
            events = await self.store.read(str(record["session_id"]))
        except SessionNotFound:
            raise not_found("approval", approval_id) from None
        folded = fold_approvals(events).get(approval_id)
        decision = await self.decision(approval_id)
        return view(record, folded, decision)

    async def decide(
        self,
        approval_id: str,
        principal: Principal,
        *,
        approve: bool,
        scope: str,
        reason: str,
    ) -> dict[str, Any]:
        """Record the one decision of a pending approval; 409 when it is not pending any more."""
        current = await self.find(approval_id, principal)
        if current["status"] != "pending":
            raise ApiError(
                409,
                "approval_not_pending",
                f"approval {approval_id} is {current['status']}; a decision counts only once, "
                "before the deadline",
                approval_status=current["status"],
            )
        record = await self.get(approval_id)
        assert record is not None  # find() read it
        decided_by = f"http:{principal.name}" + (f":{principal.key_id}" if principal.key_id else "")
        decision = {
            "approved": approve,
            "scope": scope,
            "reason": reason
            or f"{'approved' if approve else 'denied'} over HTTP by {principal.name}",
            "decided_by": decided_by,
            "decided_at": time.time(),
        }
        # The decision record is its own claim: of concurrent decisions (on any replica)
        # exactly one is stored, in one atomic operation.
        created = await self.records.record_create(
            DECISION_KIND, approval_id, decision, expires_at=self._expiry(record)
        )
        if not created:
            raise ApiError(
                409,
                "approval_not_pending",
                f"approval {approval_id} was already decided; a decision counts only once",
            )
        self.notify(approval_id)
        return view(record, None, decision)

    # -- wake-ups within this process ------------------------------------------------

    def notify(self, approval_id: str) -> None:
        for event in self._waiters.pop(approval_id, set()):
            event.set()

    async def wait(self, approval_id: str, timeout: float) -> None:
        event = anyio.Event()
        self._waiters.setdefault(approval_id, set()).add(event)
        try:
            with anyio.move_on_after(timeout):
                await event.wait()
        finally:
            waiters = self._waiters.get(approval_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[approval_id]


class ServerApprover(Approver):
    """Asks the session's owner over HTTP: records the request, waits for the decision.

    ``on_wait(session_id, approval_id, waiting)`` is told when a run starts and
    stops waiting (the server answers a JSON chat with 202 then, and may suspend
    a waiting run at once when it shuts down).
    """

    name = "http"

    def __init__(
        self,
        book: ApprovalBook,
        *,
        poll_seconds: float,
        on_wait: Callable[[str, str, bool], None] | None = None,
    ) -> None:
        self.book = book
        self.poll_seconds = poll_seconds
        self.on_wait = on_wait

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        record = await self.book.ensure_from_journal(request.session_id, request.approval_id)
        if record is None:
            # Not in the journal: never asked through the loop, so nobody could see it.
            return ApprovalDecision(
                approved=False,
                reason=f"approval {request.approval_id} is not in the session's journal",
                decided_by=self.name,
            )
        if self.on_wait is not None:
            self.on_wait(request.session_id, request.approval_id, True)
        failing = False
        try:
            while True:
                try:
                    decision = await self.book.decision(request.approval_id)
                except StoreError as exc:
                    # Keep waiting: the kernel's deadline still bounds the wait. Said once
                    # while the store fails, not at every poll.
                    if not failing:
                        log.warning(
                            "reading approval %s: %s (still waiting; said again when the "
                            "store answers)",
                            request.approval_id,
                            exc,
                        )
                    failing = True
                    decision = None
                else:
                    if failing:
                        log.warning(
                            "reading approval %s: the store answers again", request.approval_id
                        )
                    failing = False
                if decision is not None:
                    return ApprovalDecision(
                        approved=bool(decision.get("approved")),
                        reason=str(decision.get("reason", "")),
                        scope="always" if decision.get("scope") == "always" else "once",
                        decided_by=str(decision.get("decided_by", self.name)),
                        approval_id=request.approval_id,
                        session_id=str(record.get("session_id", "")),
                        arguments_hash=str(record.get("arguments_hash", "")),
                    )
                await self.book.wait(request.approval_id, self.poll_seconds)
        finally:
            if self.on_wait is not None:
                self.on_wait(request.session_id, request.approval_id, False)
