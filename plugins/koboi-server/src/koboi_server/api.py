"""The routes: health, chat, sessions and their events, approvals.

Every ``/v1`` route acts for the principal of the request's key (see
:mod:`koboi_server.middleware`). Whatever belongs to another principal answers
exactly as what does not exist: 404 ``not_found``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Depends, Header, Query, Request, Security
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPBearer

from koboi import journal as J
from koboi.errors import SessionNotFound, StoreError
from koboi.store import SessionInfo, SessionStatus, new_session_id
from koboi.tracing import TraceContext
from koboi_server import idempotency
from koboi_server.budgets import check_budget
from koboi_server.errors import ApiError, not_found, unauthorized
from koboi_server.keys import Principal
from koboi_server.middleware import PRINCIPAL_KEY
from koboi_server.models import (
    ApprovalList,
    ApprovalView,
    ChatRequest,
    ChatResult,
    DecisionRequest,
    ErrorEnvelope,
    Health,
    Ready,
    SessionList,
    SessionView,
    Suspension,
)
from koboi_server.runs import ORIGIN, ActiveRun, Slot
from koboi_server.sse import SessionStream, final_data
from koboi_server.state import ServerState

_bearer = HTTPBearer(auto_error=False, description="An API key from 'koboi keys create'.")


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    meaning = {
        400: "The body could not be read (it is not UTF-8 JSON).",
        401: "Missing, malformed or revoked API key.",
        404: "No such object, or it belongs to another principal.",
        409: "The object is not in a state that allows this.",
        413: "The body is larger than server.max_body_bytes.",
        422: "The request is not valid (the message says what to fix).",
        429: "Too many runs in progress; retry after Retry-After seconds.",
        503: "The server is shutting down, or its store is unreachable.",
    }
    return {s: {"model": ErrorEnvelope, "description": meaning[s]} for s in statuses}


_SSE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-sent events; see docs/server.md for the events and their ids.",
        "content": {
            "text/event-stream": {
                # One server-sent event: its fields, as text.
                "schema": {
                    "type": "object",
                    "properties": {
                        "event": {"type": "string"},
                        "data": {"type": "string"},
                        "id": {"type": "string"},
                    },
                    "required": ["data"],
                }
            }
        },
    }
}


def state_of(request: Request) -> ServerState:
    state: ServerState = request.app.state.koboi
    return state


def principal_of(request: Request) -> Principal:
    principal = request.scope.get(PRINCIPAL_KEY)
    if not isinstance(principal, Principal):
        raise unauthorized("this route needs an API key: send 'Authorization: Bearer <key>'")
    return principal


def current_principal(request: Request) -> Principal:
    """Dependency for routes added with ``extra_routes``: who the request acts for."""
    return principal_of(request)


StateDep = Annotated[ServerState, Depends(state_of)]
PrincipalDep = Annotated[Principal, Depends(principal_of)]


def trace_of(traceparent: str | None, tracestate: str | None) -> TraceContext | None:
    """The W3C trace context of a request's ``traceparent`` (and ``tracestate``) headers.

    None when there is none or it is invalid: the run then starts a new trace (the
    spec's rule; a bad header is never an error).
    """
    if not traceparent:
        return None
    return TraceContext.parse(traceparent, tracestate or "")


def _token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def owned_session(state: ServerState, session_id: str, principal: Principal) -> SessionInfo:
    """The session if it is the principal's; 404 otherwise (also when it does not exist)."""
    if not 0 < len(session_id) <= 200:
        raise not_found("session", session_id[:200])
    try:
        info = await state.store.get_session(session_id)
    except SessionNotFound:
        raise not_found("session", session_id) from None
    if info.owner != principal.name:
        raise not_found("session", session_id)
    return info


def running_here(state: ServerState, session_id: str) -> bool:
    """Whether this process runs the session now: a chat's run, or a job's."""
    if session_id in state.registry.runs:
        return True
    return state.runner is not None and state.runner.runs_session(session_id)


async def _session_view(state: ServerState, info: SessionInfo) -> SessionView:
    totals = info.totals
    if totals is None:  # a store that keeps no totals (or an older session): its journal says
        totals = J.totals_of(await state.store.read(info.id))
    return SessionView(
        id=info.id,
        status=info.status,
        created_at=info.created_at,
        updated_at=info.updated_at,
        last_event_id=info.last_seq,
        running_here=running_here(state, info.id),
        runs=totals.runs,
        input_tokens=totals.input_tokens,
        output_tokens=totals.output_tokens,
        cost_usd=round(totals.cost_usd, 10),
    )


def _not_a_job_session(info: SessionInfo) -> None:
    """409 ``job_session`` for a chat on a job's session: a job is answered through its routes."""
    job_id = info.metadata.get("job")
    if job_id is None:
        return
    raise ApiError(
        409,
        "job_session",
        f"session {info.id} belongs to job {job_id}, which chat cannot continue: answer a job "
        f"that waits for input with POST /v1/jobs/{job_id}/input, and follow it with "
        f"GET /v1/jobs/{job_id}/events",
        session_id=info.id,
        job_id=str(job_id),
    )


def _sse(stream: SessionStream) -> StreamingResponse:
    return StreamingResponse(
        stream.frames(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


# -- health ----------------------------------------------------------------------------

health = APIRouter(tags=["health"])


@health.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Health:
    return Health(status="ok")


@health.get(
    "/readyz",
    response_model=Ready,
    summary="The store is reachable and the server accepts work",
    responses=_errors(503),
)
async def readyz(state: StateDep) -> Ready:
    if state.registry.draining:
        raise ApiError(
            503, "draining", "this server is shutting down", headers={"Retry-After": "5"}
        )
    try:
        with anyio.fail_after(5):
            await state.store.list_sessions(limit=1)
            revision = getattr(state.store, "schema_revision", None)
            current = await revision() if callable(revision) else None
    except (StoreError, TimeoutError) as exc:
        raise ApiError(
            503, "store_unavailable", f"the store is not reachable: {exc or 'timed out'}"
        ) from None
    return Ready(status="ready", store=state.store.name, schema_revision=current)


# -- chat ---------------------------------------------------------------------------------

v1 = APIRouter(prefix="/v1", dependencies=[Security(_bearer)])


def _check_message(state: ServerState, message: str) -> None:
    limit = state.settings.max_message_chars
    if len(message) > limit:
        raise ApiError(
            422,
            "invalid_request",
            f"message: {len(message)} characters, more than the {limit} allowed "
            "(server.max_message_chars)",
        )


async def _new_session(state: ServerState, principal: Principal, sid: str | None) -> SessionInfo:
    config = state.config
    return await state.store.create_session(
        sid,
        config_name=config.agent.name,
        config_hash=config.config_hash,
        owner=principal.name,
        metadata={"origin": ORIGIN},
    )


async def start_run(
    state: ServerState,
    principal: Principal,
    message: str,
    session_id: str | None = None,
    *,
    create: bool = False,
    trace: TraceContext | None = None,
) -> tuple[SessionInfo, ActiveRun]:
    """Start a chat's run of ``message`` for ``principal``, exactly as ``POST /v1/chat`` does
    without an ``Idempotency-Key``; the session and the started run.

    ``session_id`` names an existing session of the principal (404 for anyone else's, 409
    for a job's); with ``create``, a new session is made with that id (None: a random
    one). Without ``session_id`` a new session is made. The limits (429), a key's spent
    budget (402), a draining server (503), a busy session (409) and an over-long message
    (422) raise
    :class:`ApiError`; a refused new run leaves no session behind.
    """
    _check_message(state, message)
    await check_budget(state.store, principal)
    registry = state.registry
    if session_id is not None and not create:
        info = await owned_session(state, session_id, principal)
        _not_a_job_session(info)
        return info, await registry.start(info.id, principal.name, message, trace=trace)
    # The place is held before the session exists: a chat refused by the limits
    # (429) or a draining server (503) creates nothing.
    slot = registry.reserve(principal.name)
    try:
        info = await _new_session(state, principal, session_id)
        run = await registry.start(info.id, principal.name, message, trace=trace, slot=slot)
    finally:
        registry.release(slot)  # a no-op once the run has it
    return info, run


async def _start_chat(
    state: ServerState,
    body: ChatRequest,
    principal: Principal,
    key: str | None,
    route: str,
    trace: TraceContext | None,
) -> tuple[SessionInfo, ActiveRun] | idempotency.Finished:
    """Start the chat's run; with an Idempotency-Key, or give back the run the key stands for.

    Returns the session and the started run, or the earlier run's end (a retry of
    a finished request). Raises 409 while the key's request is in progress and 422
    when the key was used with another body. In a session whose last run is
    suspended, the message is the reply: the kernel continues that run with it.
    """
    if key is None:
        return await start_run(state, principal, body.message, body.session_id, trace=trace)
    _check_message(state, body.message)
    await check_budget(state.store, principal)
    registry = state.registry
    digest = idempotency.body_hash(route, body.model_dump(mode="json"))
    for _ in range(3):
        earlier = await idempotency.find(state, principal.name, key, digest)
        if earlier is not None:
            finished = await idempotency.outcome(state, earlier)
            if finished is not None:
                return finished
            continue  # abandoned (its run never started) and withdrawn: claim it anew
        existing: SessionInfo | None = None
        held: Slot | None = None
        if body.session_id is not None:
            existing = await owned_session(state, body.session_id, principal)
            _not_a_job_session(existing)
            sid, after = existing.id, existing.last_seq
        else:
            # Held before the key is claimed and the session created (see above).
            held = registry.reserve(principal.name)
            sid, after = new_session_id(), 0
        try:
            if not await idempotency.claim(state, principal.name, key, digest, sid, after):
                continue  # a concurrent request with this key claimed it first
            try:
                info = existing or await _new_session(state, principal, sid)
                return info, await registry.start(
                    info.id, principal.name, body.message, trace=trace, slot=held
                )
            except BaseException:  # whatever stopped the start, nothing ran under the claim
                # Give it up so that a retry can start the run.
                with anyio.CancelScope(shield=True):
                    await idempotency.withdraw(state, principal.name, key)
                raise
        finally:
            if held is not None:
                registry.release(held)  # a no-op once the run has it
    raise idempotency.in_progress(idempotency.RACING)


#: The cursor of the event streams: a header (SSE clients resend it) or a query parameter.
LastEventIdHeader = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID",
        description="Resume strictly after this event id (what the stream last sent).",
    ),
]
AfterQuery = Annotated[
    int | None,
    Query(ge=0, description="Same as Last-Event-ID, for clients that cannot set it."),
]

TraceparentHeader = Annotated[
    str | None,
    Header(
        alias="traceparent",
        description="W3C trace context: the run joins this trace (journaled in "
        "run_started.trace). Invalid or absent: the run starts a new trace.",
    ),
]
TracestateHeader = Annotated[
    str | None,
    Header(alias="tracestate", description="W3C tracestate, kept with traceparent."),
]

_IDEMPOTENCY_KEY = Header(
    alias="Idempotency-Key",
    description="Send the same key again (with the same body) to get the first answer back "
    "instead of acting twice: 409 while the first request is in progress, 422 if the body "
    "differs. Scoped to your key's principal; remembered for "
    "server.idempotency_retention_seconds.",
)


@v1.post(
    "/chat",
    response_model=ChatResult,
    summary="Run a message to its end and return the result",
    responses={
        202: {"model": ChatResult, "description": "The run waits for an approval, or still runs."},
        **_errors(400, 401, 404, 409, 413, 422, 429, 503),
    },
    tags=["chat"],
)
async def chat(
    body: ChatRequest,
    state: StateDep,
    principal: PrincipalDep,
    idempotency_key: Annotated[str | None, _IDEMPOTENCY_KEY] = None,
    traceparent: TraceparentHeader = None,
    tracestate: TracestateHeader = None,
) -> Any:
    """Run ``message`` (in a new session, or ``session_id`` of yours) and wait for its end.

    The run does not depend on this request: if the client goes away, it goes on.
    Answers 202 when the run waits for an approval (decide it with
    ``POST /v1/approvals/{id}``, then follow ``GET /v1/sessions/{id}/events``) or is
    still running after ``server.chat_wait_seconds``. A run that ends ``suspended``
    waits for input (``suspension`` says what): send the reply as the next message
    of the session. The session of a job is refused (409 ``job_session``): answer a
    job with ``POST /v1/jobs/{id}/input``.
    """
    key = idempotency.check_key(idempotency_key)
    trace = trace_of(traceparent, tracestate)
    started = await _start_chat(state, body, principal, key, "chat", trace)
    if isinstance(started, idempotency.Finished):
        return JSONResponse(
            content=_finished_result(started).model_dump(mode="json"),
            headers={"Idempotent-Replayed": "true"},
        )
    _, active = started
    deadline = time.monotonic() + state.settings.chat_wait_seconds
    while not active.done.is_set() and not active.awaiting:
        if state.registry.draining and active.parked:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            break
        changed = active.changed
        with anyio.move_on_after(min(left, 1.0)):
            await changed.wait()
    return await _chat_answer(state, active, principal)


def _finished_result(finished: idempotency.Finished) -> ChatResult:
    """The answer of a run that ended, from its ``run_finished`` event."""
    data = final_data(J.RUN_FINISHED.of(finished.event))
    suspension = data["suspension"]
    return ChatResult(
        session_id=finished.claim.session_id,
        status="finished",
        outcome=data["outcome"],
        output=data["output"],
        error=data["error"],
        steps=data["steps"],
        usage=data["usage"],
        cost_usd=data["cost_usd"],
        suspension=Suspension.model_validate(suspension) if suspension is not None else None,
        refused_by=data["refused_by"],
        last_event_id=finished.event.seq,
    )


async def _chat_answer(state: ServerState, active: ActiveRun, principal: Principal) -> Any:
    sid = active.session_id
    if active.done.is_set():
        result = active.result
        if result is not None and active.final_seq is not None:
            return ChatResult(
                session_id=sid,
                status="finished",
                outcome=result.outcome,
                output=result.output,
                error=result.error,
                steps=result.steps,
                usage=result.usage.model_dump(),
                cost_usd=result.cost_usd,
                suspension=(
                    Suspension.model_validate(dict(result.suspension))
                    if result.suspension is not None
                    else None
                ),
                refused_by=result.refused_by,
                last_event_id=active.final_seq,
            )
        if active.error is not None:
            raise active.error
    info = await state.store.get_session(sid)
    if active.suspended or (state.registry.draining and not active.awaiting):
        raise ApiError(
            503,
            "shutting_down",
            "this server is shutting down; the run is suspended and will be resumed: follow "
            f"GET /v1/sessions/{sid}/events",
            session_id=sid,
            last_event_id=info.last_seq,
            headers={"Retry-After": "2"},
        )
    approvals: list[ApprovalView] = []
    status: Literal["awaiting_approval", "running"] = "running"
    if active.awaiting:
        status = "awaiting_approval"
        # The run's own approvals, and those of its child runs (sub-agents, nodes).
        for session in (sid, *sorted(active.children)):
            views = await state.book.for_session(session, principal.name)
            approvals += [ApprovalView(**v) for v in views if v["status"] == "pending"]
    body = ChatResult(
        session_id=sid, status=status, last_event_id=info.last_seq, approvals=approvals
    )
    return JSONResponse(status_code=202, content=body.model_dump(mode="json"))


@v1.post(
    "/chat/stream",
    summary="Run a message and stream its events (SSE)",
    responses={**_SSE_RESPONSE, **_errors(400, 401, 404, 409, 413, 422, 429, 503)},
    response_class=StreamingResponse,
    tags=["chat"],
)
async def chat_stream(
    body: ChatRequest,
    request: Request,
    state: StateDep,
    principal: PrincipalDep,
    idempotency_key: Annotated[str | None, _IDEMPOTENCY_KEY] = None,
    traceparent: TraceparentHeader = None,
    tracestate: TracestateHeader = None,
) -> StreamingResponse:
    """Run ``message`` and stream the run's events until its ``final``.

    The run does not depend on this connection: reconnect with
    ``GET /v1/sessions/{id}/events`` and ``Last-Event-ID`` to pick up where it was.
    A retry with the ``Idempotency-Key`` of a finished request streams that run's
    events again (``Idempotent-Replayed: true``).
    """
    key = idempotency.check_key(idempotency_key)
    trace = trace_of(traceparent, tracestate)
    started = await _start_chat(state, body, principal, key, "chat/stream", trace)
    if isinstance(started, idempotency.Finished):
        claim = started.claim
        info = await owned_session(state, claim.session_id, principal)
        response = _sse(
            session_stream(state, request, principal, info, after=claim.after, mode="follow")
        )
        response.headers["Idempotent-Replayed"] = "true"
        return response
    info, _ = started
    return _sse(session_stream(state, request, principal, info, after=info.last_seq, mode="run"))


def session_stream(
    state: ServerState,
    request: Request,
    principal: Principal,
    info: SessionInfo,
    *,
    after: int,
    mode: Literal["run", "follow"],
) -> SessionStream:
    """The SSE stream of ``info`` after event ``after``, for the request's principal and key
    (``run``: until the first ``final`` after it; ``follow``: see :class:`SessionStream`)."""
    return SessionStream(
        store=state.store,
        hub=state.hub,
        book=state.book,
        keys=state.keys,
        registry=state.registry,
        settings=state.settings,
        session=info,
        after=after,
        principal=principal,
        token=_token(request),
        mode=mode,
    )


# -- sessions ---------------------------------------------------------------------------


@v1.get(
    "/sessions",
    response_model=SessionList,
    summary="Your sessions, most recently updated first",
    responses=_errors(401, 422),
    tags=["sessions"],
)
async def list_sessions(
    state: StateDep,
    principal: PrincipalDep,
    status: Annotated[
        Literal[
            "created", "running", "completed", "failed", "interrupted", "cancelled", "suspended"
        ]
        | None,
        Query(description="Only sessions in this status."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="At most this many.")] = 50,
) -> SessionList:
    wanted: SessionStatus | None = status
    found = await state.store.list_sessions(limit=limit, status=wanted, owner=principal.name)
    return SessionList(sessions=[await _session_view(state, info) for info in found])


@v1.get(
    "/sessions/{session_id}",
    response_model=SessionView,
    summary="One of your sessions",
    responses=_errors(401, 404),
    tags=["sessions"],
)
async def get_session(session_id: str, state: StateDep, principal: PrincipalDep) -> SessionView:
    return await _session_view(state, await owned_session(state, session_id, principal))


@v1.get(
    "/sessions/{session_id}/events",
    summary="The session's events after a cursor (SSE), following a run in progress",
    responses={**_SSE_RESPONSE, **_errors(401, 404, 422)},
    response_class=StreamingResponse,
    tags=["sessions"],
)
async def session_events(
    session_id: str,
    request: Request,
    state: StateDep,
    principal: PrincipalDep,
    last_event_id: LastEventIdHeader = None,
    after: AfterQuery = None,
) -> StreamingResponse:
    return await follow_session(session_id, request, state, principal, last_event_id, after)


async def follow_session(
    session_id: str,
    request: Request,
    state: ServerState,
    principal: Principal,
    last_event_id: str | None,
    after: int | None,
    *,
    still_coming: Callable[[], Awaitable[bool]] | None = None,
) -> StreamingResponse:
    """The ``follow`` stream of a session the principal owns, after ``Last-Event-ID`` or
    ``?after=``. ``still_coming`` says whether a run is on its way that the session does
    not show yet (a queued job's): while it says so, the stream waits instead of ending
    with ``idle``."""
    info = await owned_session(state, session_id, principal)
    cursor = after
    if last_event_id is not None and last_event_id.strip():
        text = last_event_id.strip()
        if not text.isdigit() or len(text) > 18:
            raise ApiError(
                422,
                "invalid_request",
                f"Last-Event-ID {text[:40]!r} is not an event id of this server (a whole number "
                "from the stream's 'id:' lines)",
            )
        if cursor is not None and cursor != int(text):
            raise ApiError(
                422, "invalid_request", "Last-Event-ID and ?after= disagree; send one of them"
            )
        cursor = int(text)
    cursor = cursor or 0
    if cursor > info.last_seq:
        raise ApiError(
            422,
            "invalid_request",
            f"event id {cursor} is after the session's last event ({info.last_seq})",
        )
    stream = session_stream(state, request, principal, info, after=cursor, mode="follow")
    stream.still_coming = still_coming
    return _sse(stream)


# -- approvals --------------------------------------------------------------------------


@v1.get(
    "/sessions/{session_id}/approvals",
    response_model=ApprovalList,
    summary="The approvals a session asked for, with their status",
    responses=_errors(401, 404, 422),
    tags=["approvals"],
)
async def session_approvals(
    session_id: str,
    state: StateDep,
    principal: PrincipalDep,
    status: Annotated[
        Literal["pending", "approved", "denied", "expired"] | None,
        Query(description="Only approvals in this status."),
    ] = None,
) -> ApprovalList:
    info = await owned_session(state, session_id, principal)
    views = await state.book.for_session(info.id, info.owner)
    return ApprovalList(
        approvals=[ApprovalView(**v) for v in views if status is None or v["status"] == status]
    )


@v1.get(
    "/approvals/{approval_id}",
    response_model=ApprovalView,
    summary="One approval of yours",
    responses=_errors(401, 404),
    tags=["approvals"],
)
async def get_approval(approval_id: str, state: StateDep, principal: PrincipalDep) -> ApprovalView:
    return ApprovalView(**await state.book.find(approval_id, principal))


@v1.post(
    "/approvals/{approval_id}",
    response_model=ApprovalView,
    summary="Approve or deny a pending tool call",
    responses=_errors(400, 401, 404, 409, 413, 422),
    tags=["approvals"],
)
async def decide_approval(
    approval_id: str,
    body: DecisionRequest,
    state: StateDep,
    principal: PrincipalDep,
    idempotency_key: Annotated[str | None, _IDEMPOTENCY_KEY] = None,
) -> Any:
    """Decide a pending approval: once, bound to its id, session and arguments' hash.

    A second decision, or one after the deadline, is refused (409). The run
    waiting for it goes on at once (on whichever replica runs it). With an
    ``Idempotency-Key``, a retry gets the first decision's answer back.
    """

    async def decide() -> ApprovalView:
        return await _decide(approval_id, body, state, principal)

    route = f"approvals/{approval_id}"
    key = idempotency.check_key(idempotency_key)
    return await idempotency.once(
        state, principal.name, key, route, body.model_dump(mode="json"), decide
    )


async def _decide(
    approval_id: str, body: DecisionRequest, state: ServerState, principal: Principal
) -> ApprovalView:
    if not state.approvals_over_http:
        await state.book.find(approval_id, principal)  # 404 first: no existence oracle
        raise ApiError(
            409,
            "approvals_not_http",
            f"this server's approvals are decided by its '{state.approver_name}' approver, "
            "not over HTTP",
        )
    decided = await state.book.decide(
        approval_id,
        principal,
        approve=body.decision == "approve",
        scope=body.scope,
        reason=body.reason,
    )
    # After a restart the session may not be running yet: resume it now rather than at
    # the next recovery pass.
    await state.registry.resume_if_idle(str(decided["session_id"]))
    return ApprovalView(**decided)
