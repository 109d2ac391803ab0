"""``Idempotency-Key`` of every keyed POST: chat, chat/stream, jobs, approval decisions, cancels.

**One key, one request.** A principal's key names exactly one request — its route
and its body — whichever route sees it next. Every route keeps the key in one
keyed record (kind :data:`KIND`, keyed by principal and key) whose ``digest`` is the
SHA-256 of the route and the body (:func:`body_hash`); every route creates that
record with ``record_create`` (one winner among racers, whatever their routes) and
answers 422 ``idempotency_key_reused`` when the record there has another digest.

Jobs also keep their key in the job itself (``Store.create_job``, in the job's own
transaction, with a hash of the body alone, which cannot change: keys stored before
the record existed must keep replaying). So a job request binds the record too
(:func:`bind`), and the other routes look the key up among the principal's jobs
first (:func:`_not_a_job`): a job created before this record existed, or whose
record expired, still owns its key.

Short POSTs store their response with the key (:func:`once`). A chat runs for a
while after the request arrives, so its key goes through three states, all kept
in the store (shared by replicas, surviving restarts):

- **claimed**: a keyed record (``record_create``: one winner among racers) names
  the request's body hash, the session the run goes to and the session's last
  event before it. It is written *before* the session is created or the run
  started; if either fails the claim is withdrawn, so a retry may try again.
- **in progress**: the claim exists and the session's journal has no
  ``run_finished`` after that event: a request with the same key and body is
  answered 409 ``idempotency_key_in_progress`` (with the session to follow).
- **done**: the ``run_finished`` is in the journal: a retry gets the run's result,
  rebuilt from the journal, with ``Idempotent-Replayed: true``; no second run.

Keys are the principal's own. A claim whose run never started (the process died
between the claim and the start) is abandoned after :data:`ABANDONED_AFTER` seconds
and may be claimed again; nothing ran under it, so nothing can run twice.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from koboi.errors import SessionNotFound
from koboi.journal import RUN_FINISHED, RUN_RESUMED, RUN_STARTED
from koboi.store import JournalEvent
from koboi_server.errors import ApiError
from koboi_server.state import ServerState

KIND = "idempotency"

#: Seconds after which a claim whose run never started is given up.
ABANDONED_AFTER = 30.0

_MAX_KEY = 255


def check_key(key: str | None) -> str | None:
    """The header's value, or a 422 saying what a key must look like."""
    if key is None:
        return None
    if not 0 < len(key) <= _MAX_KEY or not key.isprintable() or key != key.strip():
        raise ApiError(
            422,
            "invalid_request",
            f"Idempotency-Key must be 1 to {_MAX_KEY} printable characters without surrounding "
            "spaces (a UUID is a good key)",
        )
    return key


def body_hash(route: str, body: Any) -> str:
    """sha256 of the route and the body's canonical JSON: what a retry must match."""
    canonical = json.dumps(
        [route, body], sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def key_reused() -> ApiError:
    return ApiError(
        422,
        "idempotency_key_reused",
        "this Idempotency-Key was already used for another request (another body or another "
        "route); use a new key for a new request",
    )


def in_progress(message: str, session_id: str | None = None) -> ApiError:
    """409 ``idempotency_key_in_progress``: retry after a second (and follow the session)."""
    extra = {"session_id": session_id} if session_id is not None else {}
    return ApiError(
        409, "idempotency_key_in_progress", message, headers={"Retry-After": "1"}, **extra
    )


#: When claims of one key keep changing hands under a request (rare: racing retries).
RACING = "requests with this Idempotency-Key keep racing; retry later"


def _record_key(principal: str, key: str) -> str:
    # Hashed: principal names and keys may hold any printable character.
    return hashlib.sha256(json.dumps([principal, key]).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Claim:
    """A key's claim: the run it stands for is the first one in ``session_id`` after ``after``."""

    principal: str
    key: str
    digest: str
    session_id: str
    after: int
    claimed_at: float


@dataclass(frozen=True)
class Finished:
    """The run a key stands for ended: its ``run_finished`` event."""

    claim: Claim
    event: JournalEvent


async def _not_a_job(state: ServerState, principal: str, key: str) -> None:
    """422 when the key is a job's (the routes other than ``POST /v1/jobs`` ask this first).

    A job's key is stored with the job; the keyed record :func:`bind` adds may be
    missing (a job submitted before it existed) or expired (a job outlives
    ``idempotency_retention_seconds``): the job still owns the key.
    """
    if await state.jobs.find_job(owner=principal, idempotency_key=key) is not None:
        raise key_reused()


async def bind(state: ServerState, principal: str, key: str, route: str, digest: str) -> None:
    """Bind ``key`` to this request (``route`` and body ``digest``) for every route.

    For ``POST /v1/jobs``, before its job is created: the record is created if
    absent (of racers on any routes, one wins) and must name this request
    otherwise (422 ``idempotency_key_reused``). Concurrent requests for the same job
    all pass; the job's own key, stored with it, makes them one job. The record is
    not withdrawn when the request is refused afterwards (429, 503): the key stays
    this request's, so its retry is the only thing it can be used for — withdrawing
    it could let a request on another route take the key while a concurrent twin of
    this one creates the job.
    """
    record = _record_key(principal, key)
    for _ in range(3):
        now = time.time()
        data = {"route": route, "digest": digest, "claimed_at": now}
        expires = now + state.settings.idempotency_retention_seconds
        if await state.records.record_create(KIND, record, data, expires_at=expires):
            return
        found = await state.records.record_get(KIND, record)
        if found is None:
            continue  # withdrawn (or expired) between the two calls: try again
        if found.get("digest") != digest:
            raise key_reused()
        return
    raise in_progress(RACING)


async def find(state: ServerState, principal: str, key: str, digest: str) -> Claim | None:
    """The key's claim, or None; 422 when it was used for another request (or is a job's)."""
    await _not_a_job(state, principal, key)
    found = await state.records.record_get(KIND, _record_key(principal, key))
    if found is None:
        return None
    if found.get("digest") != digest:
        raise key_reused()
    return Claim(
        principal=principal,
        key=key,
        digest=digest,
        session_id=str(found["session_id"]),
        after=int(found["after"]),
        claimed_at=float(found["claimed_at"]),
    )


async def claim(
    state: ServerState, principal: str, key: str, digest: str, session_id: str, after: int
) -> bool:
    """Claim ``key`` for a run in ``session_id`` after event ``after``; False if taken."""
    now = time.time()
    data = {"digest": digest, "session_id": session_id, "after": after, "claimed_at": now}
    expires = now + state.settings.idempotency_retention_seconds
    return await state.records.record_create(
        KIND, _record_key(principal, key), data, expires_at=expires
    )


async def withdraw(state: ServerState, principal: str, key: str) -> None:
    """Give a claim up: its run did not start, so a retry may claim the key again."""
    await state.records.record_delete(KIND, _record_key(principal, key))


async def outcome(state: ServerState, claim_: Claim) -> Finished | None:
    """The claim's ``run_finished`` when its run ended.

    While the run goes on, raises 409 ``idempotency_key_in_progress``. A claim that
    was abandoned (no run ever started under it) is withdrawn instead, and None is
    returned: the caller may claim the key again.
    """
    try:
        events = await state.store.read(claim_.session_id, after=claim_.after)
    except SessionNotFound:
        events = []  # claimed a moment ago: its session is not created yet
    started = False
    for event in events:
        # A message to a suspended session continues its run: run_resumed, not run_started.
        if event.type in (RUN_STARTED, RUN_RESUMED):
            started = True
        elif event.type == RUN_FINISHED and started:
            return Finished(claim_, event)
    running = claim_.session_id in state.registry.runs  # this replica's; others: started
    if not started and not running and time.time() - claim_.claimed_at > ABANDONED_AFTER:
        await withdraw(state, claim_.principal, claim_.key)
        return None
    raise in_progress(
        "a request with this Idempotency-Key is still in progress; retry later for its "
        f"answer, or follow GET /v1/sessions/{claim_.session_id}/events",
        claim_.session_id,
    )


# -- quick POSTs: the response itself is stored ---------------------------------------


async def once(
    state: ServerState,
    principal: str,
    key: str | None,
    route: str,
    body: Any,
    produce: Callable[[], Awaitable[BaseModel]],
) -> Any:
    """Answer a short POST (an approval decision, a cancel) once per ``key``.

    The key is claimed, ``produce()`` gives the response, and the response is
    stored with the claim; a retry gets it back with ``Idempotent-Replayed: true``
    (200), a concurrent one 409 while the first is being answered, another body 422.
    When ``produce`` raises, the claim is withdrawn (a retry tries again). Without a
    key, ``produce()`` is simply answered.
    """
    if key is None:
        return await produce()
    await _not_a_job(state, principal, key)
    digest = body_hash(route, body)
    record = _record_key(principal, key)
    for _ in range(3):
        found = await state.records.record_get(KIND, record)
        if found is not None:
            if found.get("digest") != digest:
                raise key_reused()
            if "response" in found:
                return JSONResponse(
                    content=found["response"], headers={"Idempotent-Replayed": "true"}
                )
            if time.time() - float(found.get("claimed_at", 0)) <= ABANDONED_AFTER:
                raise in_progress(
                    "a request with this Idempotency-Key is still in progress; retry later "
                    "for its answer"
                )
            # The process answering it died before storing the answer: try again.
            await state.records.record_delete(KIND, record)
            continue
        now = time.time()
        expires = now + state.settings.idempotency_retention_seconds
        claimed = {"route": route, "digest": digest, "claimed_at": now}
        if not await state.records.record_create(KIND, record, claimed, expires_at=expires):
            continue  # a concurrent request claimed it first
        try:
            response = await produce()
        except BaseException:  # whatever stopped the answer, the key must be free for a retry
            with anyio.CancelScope(shield=True):
                await state.records.record_delete(KIND, record)
            raise
        stored = {**claimed, "response": response.model_dump(mode="json")}
        await state.records.record_put(KIND, record, stored, expires_at=expires)
        return response
    raise in_progress(RACING)
