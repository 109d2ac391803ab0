"""The job routes: submit (with ``Idempotency-Key``), read, list, follow, answer, cancel.

A job is a run queued in the store and executed by whichever replica's
:class:`~koboi_server.jobs.JobRunner` claims it. It belongs to the principal who
submitted it; another principal gets 404 on every route, as for sessions.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Security
from fastapi.responses import JSONResponse, StreamingResponse

from koboi.errors import IdempotencyConflict, JobNotFound, KoboiError, StoreError
from koboi.store import Job, JobStatus
from koboi_server import idempotency
from koboi_server.api import (
    _IDEMPOTENCY_KEY,
    _SSE_RESPONSE,
    AfterQuery,
    LastEventIdHeader,
    PrincipalDep,
    StateDep,
    TraceparentHeader,
    TracestateHeader,
    _bearer,
    _errors,
    follow_session,
    trace_of,
)
from koboi_server.budgets import check_budget
from koboi_server.errors import ApiError, not_found
from koboi_server.idempotency import check_key, key_reused
from koboi_server.jobs import (
    InputAlreadyGiven,
    JobNotWaiting,
    cancel_waiting,
    ensure_job_session,
    provide_input,
    submit_job,
)
from koboi_server.keys import Principal
from koboi_server.models import JobCreate, JobInput, JobList, JobStatusName, JobView, Suspension
from koboi_server.state import ServerState
from koboi_server.webhooks.errors import WebhookError
from koboi_server.webhooks.signing import secret_key

jobs = APIRouter(prefix="/v1", dependencies=[Security(_bearer)], tags=["jobs"])

#: Unfinished statuses: what counts against a principal's job limit.
_OPEN: tuple[JobStatus, ...] = ("queued", "running", "awaiting_approval", "waiting_input")


def job_view(job: Job) -> JobView:
    request = job.request
    webhook = request.get("webhook")
    metadata = request.get("metadata")
    # A job keeps the result of its suspended run while it waits and after its input
    # came: shown as the suspension while it waits; the result is the final one only.
    suspension = (job.result or {}).get("suspension") if job.status == "waiting_input" else None
    return JobView(
        id=job.id,
        status=job.status,
        session_id=job.session_id,
        created_at=job.created_at,
        updated_at=job.updated_at,
        attempts=job.attempts,
        cancel_requested=job.cancel_requested,
        metadata=dict(metadata) if isinstance(metadata, dict) else {},
        webhook_url=str(webhook["url"]) if isinstance(webhook, dict) else None,
        result=dict(job.result) if job.result is not None and job.done else None,
        suspension=Suspension.model_validate(suspension) if suspension is not None else None,
    )


async def owned_job(state: ServerState, job_id: str, principal: Principal) -> Job:
    """The job if it is the principal's; 404 otherwise (also when it does not exist)."""
    if not 0 < len(job_id) <= 200:
        raise not_found("job", job_id[:200])
    try:
        job = await state.jobs.get_job(job_id)
    except JobNotFound:
        raise not_found("job", job_id) from None
    if job.owner != principal.name:
        raise not_found("job", job_id)
    return job


#: The route named in a job key's cross-route record (:func:`idempotency.bind`).
ROUTE = "jobs"


def request_hash(body: JobCreate) -> str:
    """sha256 of the body's canonical JSON: what an idempotent replay must match.

    Stored with the job and its key. It leaves the route out, and must stay as it is:
    a different hash would turn the retries of jobs already stored into 422s. The
    route is in the key's cross-route record instead (:func:`idempotency.bind`).
    """
    canonical = json.dumps(
        body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


async def admit_job(state: ServerState, owner: str) -> None:
    if state.registry.draining:
        raise ApiError(
            503,
            "shutting_down",
            "this server is shutting down; send the job to another replica or retry",
            headers={"Retry-After": "2"},
        )
    """503 while draining, 429 when the queue or the principal's unfinished jobs are full."""
    settings = state.settings
    queued = await state.jobs.list_jobs(status="queued", limit=settings.max_queued_jobs + 1)
    if len(queued) >= settings.max_queued_jobs:
        raise ApiError(
            429,
            "too_many_jobs",
            f"{len(queued)} jobs are waiting in the queue (server.max_queued_jobs); retry later",
            headers={"Retry-After": "5"},
        )
    limit = settings.max_jobs_per_principal
    mine = 0
    for status in _OPEN:
        mine += len(await state.jobs.list_jobs(owner=owner, status=status, limit=limit + 1))
    if mine >= limit:
        raise ApiError(
            429,
            "too_many_jobs",
            f"you already have {mine} unfinished jobs (server.max_jobs_per_principal); retry "
            "when one has finished",
            headers={"Retry-After": "5"},
        )


@jobs.post(
    "/jobs",
    status_code=202,
    response_model=JobView,
    summary="Queue a job (a run in a session of its own)",
    responses=_errors(400, 401, 409, 413, 422, 429, 503),
)
async def create_job(
    body: JobCreate,
    state: StateDep,
    principal: PrincipalDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="Send the same key again (with the same body) to get the first "
            "response back instead of a second job. Scoped to your key's principal.",
        ),
    ] = None,
    traceparent: TraceparentHeader = None,
    tracestate: TracestateHeader = None,
) -> JSONResponse:
    """Queue ``input`` as a job; answer 202 with ``Location: /v1/jobs/{id}``.

    With ``Idempotency-Key``: the same key and body answer the first job again with
    ``Idempotent-Replayed: true``; the same key with another body is refused (422).
    A ``traceparent`` header is kept with the job: its runs (a resumed or taken-over
    one too) join that trace.
    """
    if state.jobs_refused is not None:
        raise ApiError(409, "jobs_refused", f"this agent cannot run jobs: {state.jobs_refused}")
    key = check_key(idempotency_key)
    limit = state.settings.max_message_chars
    if len(body.input) > limit:
        raise ApiError(
            422,
            "invalid_request",
            f"input: {len(body.input)} characters, more than the {limit} allowed "
            "(server.max_message_chars)",
        )
    if not body.input.strip():
        raise ApiError(422, "invalid_request", "input: a job needs a non-empty input")
    webhook: dict[str, str] | None = None
    if body.webhook is not None:
        try:
            secret_key(body.webhook.secret)
            url = await state.webhooks.check_url(body.webhook.url)
        except WebhookError as exc:
            raise ApiError(422, "webhook_refused", f"webhook: {exc}") from None
        webhook = {"url": url, "secret": body.webhook.secret}
    digest = request_hash(body) if key is not None else None
    if key is not None:
        # A retry is answered before admission: its job exists, so a full queue must
        # not turn the stored answer into a 429.
        earlier = await state.jobs.find_job(owner=principal.name, idempotency_key=key)
        if earlier is not None:
            if earlier.request_hash != digest:
                raise key_reused()
            return _accepted(earlier, replayed=True)
        # No job has the key yet: bind it to this request for every route (422 when a
        # chat, a decision or a cancel has it), before the job is created.
        body_digest = idempotency.body_hash(ROUTE, body.model_dump(mode="json"))
        await idempotency.bind(state, principal.name, key, ROUTE, body_digest)
    await admit_job(state, principal.name)
    await check_budget(state.store, principal)
    try:
        job, created = await submit_job(
            state.store,
            owner=principal.name,
            input=body.input,
            metadata=body.metadata,
            idempotency_key=key,
            request_hash=digest,
            webhook=webhook,
            trace=trace_of(traceparent, tracestate),
        )
    except IdempotencyConflict:
        raise key_reused() from None
    except StoreError:
        raise
    except KoboiError as exc:
        raise ApiError(422, "invalid_request", str(exc)) from None
    if created:
        state.wake_runner()
    return _accepted(job, replayed=not created)


def _accepted(job: Job, *, replayed: bool) -> JSONResponse:
    headers = {"Location": f"/v1/jobs/{job.id}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return JSONResponse(
        status_code=202, content=job_view(job).model_dump(mode="json"), headers=headers
    )


@jobs.get(
    "/jobs",
    response_model=JobList,
    summary="Your jobs, newest first",
    responses=_errors(401, 422),
)
async def list_jobs(
    state: StateDep,
    principal: PrincipalDep,
    status: Annotated[JobStatusName | None, Query(description="Only jobs in this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="At most this many.")] = 50,
) -> JobList:
    wanted: JobStatus | None = status
    found = await state.jobs.list_jobs(owner=principal.name, status=wanted, limit=limit)
    return JobList(jobs=[job_view(job) for job in found])


@jobs.get(
    "/jobs/{job_id}",
    response_model=JobView,
    summary="One of your jobs",
    responses=_errors(401, 404),
)
async def get_job(job_id: str, state: StateDep, principal: PrincipalDep) -> JobView:
    return job_view(await owned_job(state, job_id, principal))


@jobs.post(
    "/jobs/{job_id}/cancel",
    response_model=JobView,
    summary="Cancel a job",
    responses=_errors(401, 404, 409, 422),
)
async def cancel_job(
    job_id: str,
    state: StateDep,
    principal: PrincipalDep,
    idempotency_key: Annotated[str | None, _IDEMPOTENCY_KEY] = None,
) -> Any:
    """A queued job, or one waiting for input, is cancelled at once; a running one when its
    runner next renews its lease (its run is stopped, tool processes included, and it is
    recorded ``cancelled``); a finished one is left as it is. With an
    ``Idempotency-Key``, a retry gets the first answer back."""

    async def cancel() -> JobView:
        job = await owned_job(state, job_id, principal)
        job = await state.jobs.cancel_job(job.id)
        if job.status == "waiting_input":
            # Nobody runs it to see the request: finish it here (with its job.finished).
            job = await cancel_waiting(state.store, job, outbox=state.job_outbox)
            if job.done:
                state.webhooks.wake()
        return job_view(job)

    key = check_key(idempotency_key)
    return await idempotency.once(state, principal.name, key, f"jobs/{job_id}/cancel", {}, cancel)


@jobs.post(
    "/jobs/{job_id}/input",
    response_model=JobView,
    summary="Answer a job that waits for input",
    responses=_errors(400, 401, 404, 409, 413, 422),
)
async def job_input(
    job_id: str,
    body: JobInput,
    state: StateDep,
    principal: PrincipalDep,
    idempotency_key: Annotated[str | None, _IDEMPOTENCY_KEY] = None,
    traceparent: TraceparentHeader = None,
    tracestate: TracestateHeader = None,
) -> Any:
    """Give a job ``waiting_input`` the reply its run waits for (see its ``suspension``).

    The job becomes ``queued`` again; the runner that claims it continues the run with
    the reply (a ``traceparent`` here is the trace that continuation joins). One reply
    per suspension: another one is 409 ``input_already_given``; a job in another status
    is 409 ``job_not_waiting``. With an ``Idempotency-Key``, a retry gets the first
    answer back.
    """

    async def answer() -> JobView:
        job = await owned_job(state, job_id, principal)
        _check_reply(state, body.reply)
        try:
            queued = await provide_input(
                state.store,
                job.id,
                body.reply,
                trace=trace_of(traceparent, tracestate),
                given_by=principal.name,
            )
        except JobNotWaiting as exc:
            raise ApiError(409, "job_not_waiting", str(exc), job_status=exc.job.status) from None
        except InputAlreadyGiven as exc:
            raise ApiError(409, "input_already_given", str(exc)) from None
        state.wake_runner()
        return job_view(queued)

    key = check_key(idempotency_key)
    body_json = body.model_dump(mode="json")
    return await idempotency.once(
        state, principal.name, key, f"jobs/{job_id}/input", body_json, answer
    )


def _check_reply(state: ServerState, reply: Any) -> None:
    limit = state.settings.max_message_chars
    size = len(reply) if isinstance(reply, str) else len(json.dumps(reply, default=str))
    if size > limit:
        raise ApiError(
            422,
            "invalid_request",
            f"reply: {size} characters, more than the {limit} allowed (server.max_message_chars)",
        )


@jobs.get(
    "/jobs/{job_id}/events",
    summary="The job's events (its session's), after a cursor (SSE)",
    responses={**_SSE_RESPONSE, **_errors(401, 404, 422)},
    response_class=StreamingResponse,
)
async def job_events(
    job_id: str,
    request: Request,
    state: StateDep,
    principal: PrincipalDep,
    last_event_id: LastEventIdHeader = None,
    after: AfterQuery = None,
) -> StreamingResponse:
    """Same stream as ``GET /v1/sessions/{session_id}/events`` of the job's session; while
    the job is queued (or its run has not written its first event), the stream waits for
    it rather than ending with ``idle``."""
    job = await owned_job(state, job_id, principal)
    # A queued job's session is made by its runner; make it now so there is
    # something to follow.
    await ensure_job_session(state.store, job, state.config)

    async def run_on_its_way() -> bool:
        try:
            current = await state.jobs.get_job(job.id)
        except JobNotFound:
            return False
        return current.status in ("queued", "running")

    return await follow_session(
        job.session_id,
        request,
        state,
        principal,
        last_event_id,
        after,
        still_coming=run_on_its_way,
    )
