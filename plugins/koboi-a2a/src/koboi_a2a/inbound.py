"""The A2A side of ``koboi serve``: the agent card and the JSON-RPC endpoint.

An A2A task is a koboi job (``POST /v1/jobs`` by another door): durable, run by
whichever replica claims it, resumed after a crash from its journal. Its id is the
job's id, and the job belongs to the principal of the caller's key, so one peer
never sees another's tasks. The mapping:

==========================  ===============================================
A2A                         koboi
==========================  ===============================================
``SendMessage``             a new job (the message's text is its input); a
                            ``messageId`` sent again answers the same task
``SendMessage`` + taskId    the reply to a job ``waiting_input``
``SendStreamingMessage``    the same, then the job's journal as task events
``GetTask``                 the job
``CancelTask``              the job's cancel
``SubscribeToTask``         the job's journal from now on
``ListTasks``               the caller's A2A jobs
``input-required``          the job waits for input (a tool suspended its run)
==========================  ===============================================

The endpoint is a route of ``/v1/`` that needs scope ``invoke``: a peer key
(``koboi keys create --peer NAME``) may call it and nothing else of the API.
Everything else (the body limit, rate limits, the principal gate, the budget) is
the server's. The handler is a2a-sdk's ``RequestHandler`` and its JSON-RPC
dispatcher speaks the wire protocol.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncGenerator, Mapping
from email.utils import formatdate
from pathlib import Path
from typing import TYPE_CHECKING, Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.routes.common import ServerCallContextBuilder
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct
from starlette.requests import Request

from koboi import journal as J
from koboi.errors import IdempotencyConflict, SessionNotFound
from koboi.logs import get_logger
from koboi.store import Job, JournalEvent
from koboi.tracing import TraceContext
from koboi_a2a.card import CARD_PATH, JWKS_PATH, RPC_PATH, CardSigner, build_card, card_json
from koboi_a2a.config import A2ASettings, ServeSettings
from koboi_server.budgets import check_budget
from koboi_server.errors import ApiError
from koboi_server.hub import Delta
from koboi_server.jobs import (
    InputAlreadyGiven,
    JobNotWaiting,
    cancel_waiting,
    provide_input,
    submit_job,
)
from koboi_server.jobs_api import admit_job, owned_job
from koboi_server.keys import INVOKE_SCOPE, Principal

if TYPE_CHECKING:
    from koboi_server.extensions import ServerContext, ServerExtension
    from koboi_server.state import ServerState

log = get_logger("koboi.a2a")

#: Job statuses after which a blocking send answers.
_SETTLED = frozenset({"completed", "failed", "cancelled", "waiting_input"})
_STATES: dict[str, int] = {
    "queued": pb.TASK_STATE_SUBMITTED,
    "running": pb.TASK_STATE_WORKING,
    "awaiting_approval": pb.TASK_STATE_WORKING,
    "waiting_input": pb.TASK_STATE_INPUT_REQUIRED,
    "cancelled": pb.TASK_STATE_CANCELED,
}
#: The idempotency key of a job made from an A2A message: its messageId, per principal.
_KEY_PREFIX = "a2a:"
ANSWER_ARTIFACT = "answer"


# -- from a job to a task ------------------------------------------------------------


def _a2a(job: Job) -> Mapping[str, Any]:
    meta = job.request.get("metadata")
    found = meta.get("a2a") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}


def task_state(job: Job) -> int:
    if job.status == "completed":
        return pb.TASK_STATE_COMPLETED
    if job.status == "failed":
        outcome = (job.result or {}).get("outcome")
        return pb.TASK_STATE_REJECTED if outcome == "refused" else pb.TASK_STATE_FAILED
    return _STATES.get(job.status, pb.TASK_STATE_WORKING)


def _text_message(text: str, *, role: int, task_id: str, context_id: str, mid: str) -> pb.Message:
    return pb.Message(
        message_id=mid,
        role=role,  # type: ignore[arg-type]
        task_id=task_id,
        context_id=context_id,
        parts=[pb.Part(text=text)],
    )


def _status_text(job: Job) -> str | None:
    result = job.result or {}
    if job.status == "waiting_input":
        suspension = result.get("suspension") or {}
        data = suspension.get("data") or {}
        question = data.get("question") if isinstance(data, dict) else None
        reason = str(suspension.get("reason") or "the agent waits for input")
        return f"{reason}: {question}" if question else reason
    if job.status == "awaiting_approval":
        return "a tool call waits for the operator's approval"
    if job.status in ("failed", "cancelled"):
        return str(result.get("error") or result.get("outcome") or job.status)
    return None


def task_of(job: Job, history_length: int | None = None) -> pb.Task:
    """The A2A task a job stands for, as it is now."""
    meta = _a2a(job)
    context_id = str(meta.get("context_id") or job.session_id)
    status = pb.TaskStatus(state=task_state(job))  # type: ignore[arg-type]
    status.timestamp.FromSeconds(int(job.updated_at))
    said = _status_text(job)
    if said is not None:
        status.message.CopyFrom(
            _text_message(
                said,
                role=pb.ROLE_AGENT,
                task_id=job.id,
                context_id=context_id,
                mid=f"{job.id}-status-{job.status}",
            )
        )
    task = pb.Task(id=job.id, context_id=context_id, status=status)
    output = str((job.result or {}).get("output") or "")
    history = [
        _text_message(
            str(job.request.get("input", "")),
            role=pb.ROLE_USER,
            task_id=job.id,
            context_id=context_id,
            mid=str(meta.get("message_id") or f"{job.id}-input"),
        )
    ]
    if job.status == "completed":
        task.artifacts.append(
            pb.Artifact(artifact_id=ANSWER_ARTIFACT, name="answer", parts=[pb.Part(text=output)])
        )
        history.append(
            _text_message(
                output,
                role=pb.ROLE_AGENT,
                task_id=job.id,
                context_id=context_id,
                mid=f"{job.id}-answer",
            )
        )
    if history_length is not None:
        history = history[-history_length:] if history_length > 0 else []
    task.history.extend(history)
    info = Struct()
    info.update({"koboi": {"jobStatus": job.status, "attempts": job.attempts}})
    task.metadata.CopyFrom(info)
    return task


# -- what a peer sent ----------------------------------------------------------------


def message_text(message: pb.Message) -> str:
    """The text a message carries: its text parts, and its data parts as JSON."""
    pieces: list[str] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            pieces.append(part.text)
        elif kind == "data":
            pieces.append(json.dumps(MessageToDict(part.data), ensure_ascii=False))
        else:
            raise ContentTypeNotSupportedError(
                message=f"this agent reads text and data parts only, not {kind} parts"
            )
    text = "\n".join(pieces)
    if not text.strip():
        raise InvalidParamsError(message="the message has no text: send a text part")
    return text


# -- the handler ---------------------------------------------------------------------


class _Caller:
    """What a request's context holds: the server, the principal, the trace."""

    def __init__(self, context: ServerCallContext) -> None:
        self.state: ServerState = context.state["koboi.server"]
        self.principal: Principal = context.state["koboi.principal"]
        self.trace: TraceContext | None = context.state.get("koboi.trace")


class ContextBuilder(ServerCallContextBuilder):
    """A2A's call context from the request the server authenticated."""

    def build(self, request: Request) -> ServerCallContext:
        from a2a.extensions.common import HTTP_EXTENSION_HEADER, get_requested_extensions

        from koboi_server.api import principal_of, state_of

        principal = principal_of(request)
        trace = None
        if request.headers.get("traceparent"):
            trace = TraceContext.parse(
                request.headers["traceparent"], request.headers.get("tracestate", "")
            )
        return ServerCallContext(
            state={
                "koboi.server": state_of(request),
                "koboi.principal": principal,
                "koboi.trace": trace,
                "headers": dict(request.headers),
            },
            requested_extensions=get_requested_extensions(
                request.headers.getlist(HTTP_EXTENSION_HEADER)
            ),
        )


def _api_error(exc: ApiError) -> Exception:
    if exc.status == 404:
        return TaskNotFoundError(message=exc.message)
    if exc.status in (402, 429, 503):
        return InvalidRequestError(message=f"{exc.code}: {exc.message}")
    return InvalidParamsError(message=f"{exc.code}: {exc.message}")


class KoboiRequestHandler(RequestHandler):
    """A2A methods on koboi jobs (see the module)."""

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings

    # -- helpers ---------------------------------------------------------------------

    async def _owned(self, caller: _Caller, task_id: str) -> Job:
        try:
            job = await owned_job(caller.state, task_id, caller.principal)
        except ApiError:
            raise TaskNotFoundError(message=f"no task {task_id[:200]!r}") from None
        if not _a2a(job):  # a job submitted over /v1/jobs is not an A2A task
            raise TaskNotFoundError(message=f"no task {task_id[:200]!r}")
        return job

    async def _start(self, caller: _Caller, message: pb.Message) -> Job:
        """A new job for the message, or the job an earlier send of it made."""
        state, principal = caller.state, caller.principal
        text = message_text(message)
        limit = state.settings.max_message_chars
        if len(text) > limit:
            raise InvalidParamsError(
                message=f"the message has {len(text)} characters, more than the {limit} allowed"
            )
        if not message.message_id:
            raise InvalidParamsError(message="the message needs a messageId")
        # The same message (id, context and text) sent again is the same task: a retry
        # after a timeout, a caller resumed after a crash. Clients that reuse an id for
        # another message (the A2A TCK does) get a new task.
        digest = hashlib.sha256(
            "\0".join((message.message_id, message.context_id, text)).encode()
        ).hexdigest()
        key = f"{_KEY_PREFIX}{digest}"
        earlier = await state.jobs.find_job(owner=principal.name, idempotency_key=key)
        if earlier is not None:
            return earlier
        if state.jobs_refused is not None:
            raise UnsupportedOperationError(
                message=f"this agent cannot run tasks: {state.jobs_refused}"
            )
        try:
            await admit_job(state, principal.name)
            await check_budget(state.store, principal)
        except ApiError as exc:
            raise _api_error(exc) from None
        context_id = message.context_id or hashlib.sha256(key.encode()).hexdigest()[:32]
        try:
            job, created = await submit_job(
                state.store,
                owner=principal.name,
                input=text,
                metadata={
                    "a2a": {
                        "message_id": message.message_id,
                        "context_id": context_id,
                        "key_id": principal.key_id,
                    }
                },
                idempotency_key=key,
                request_hash=digest,
                trace=caller.trace,
            )
        except IdempotencyConflict:  # a twin of this request created it first
            found = await state.jobs.find_job(owner=principal.name, idempotency_key=key)
            if found is None:
                raise
            return found
        if created:
            log.info(
                "a2a task %s for principal %s (key %s)", job.id, principal.name, principal.key_id
            )
            state.wake_runner()
        return job

    async def _reply(self, caller: _Caller, message: pb.Message) -> Job:
        """The message answers the task it names, which must wait for input."""
        job = await self._owned(caller, message.task_id)
        text = message_text(message)
        try:
            await check_budget(caller.state.store, caller.principal)
            queued = await provide_input(
                caller.state.store,
                job.id,
                text,
                trace=caller.trace,
                given_by=caller.principal.name,
            )
        except ApiError as exc:
            raise _api_error(exc) from None
        except JobNotWaiting as exc:
            state = pb.TaskState.Name(task_state(exc.job))
            raise InvalidParamsError(
                message=f"task {job.id} is {state}: it takes a message only while input-required"
                "; send a new message without taskId for a new task"
            ) from None
        except InputAlreadyGiven as exc:
            raise InvalidParamsError(message=str(exc)) from None
        caller.state.wake_runner()
        return queued

    async def _message(self, params: pb.SendMessageRequest, caller: _Caller) -> Job:
        if params.message.task_id:
            return await self._reply(caller, params.message)
        return await self._start(caller, params.message)

    async def _settle(self, caller: _Caller, job: Job, seconds: float) -> Job:
        """The job once it has settled (finished or waiting for input), or after ``seconds``."""
        state = caller.state
        deadline = time.monotonic() + seconds
        with state.hub.subscribe(job.session_id) as sub:
            while True:
                job = await state.jobs.get_job(job.id)
                left = deadline - time.monotonic()
                if job.status in _SETTLED or left <= 0:
                    return job
                await sub.wait(min(left, state.settings.poll_seconds))
                sub.take()

    # -- the A2A methods -------------------------------------------------------------

    async def on_message_send(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> pb.Task | pb.Message:
        caller = _Caller(context)
        job = await self._message(params, caller)
        if not params.configuration.return_immediately:
            job = await self._settle(caller, job, self.settings.wait_seconds)
        length = (
            params.configuration.history_length
            if params.configuration.HasField("history_length")
            else None
        )
        return task_of(job, length)

    async def on_message_send_stream(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        caller = _Caller(context)
        job = await self._message(params, caller)
        after = await _last_seq(caller.state, job) if params.message.task_id else 0
        async for event in _follow(caller.state, job, after=after):
            yield event

    async def on_get_task(
        self, params: pb.GetTaskRequest, context: ServerCallContext
    ) -> pb.Task | None:
        job = await self._owned(_Caller(context), params.id)
        length = params.history_length if params.HasField("history_length") else None
        return task_of(job, length)

    async def on_list_tasks(
        self, params: pb.ListTasksRequest, context: ServerCallContext
    ) -> pb.ListTasksResponse:
        caller = _Caller(context)
        size = params.page_size if params.HasField("page_size") else 50
        if not 1 <= size <= 100:
            raise InvalidParamsError(message="pageSize: from 1 to 100")
        jobs = await caller.state.jobs.list_jobs(owner=caller.principal.name, limit=1000)
        tasks = [j for j in jobs if _a2a(j)]
        if params.context_id:
            tasks = [j for j in tasks if _a2a(j).get("context_id") == params.context_id]
        if params.status:
            tasks = [j for j in tasks if task_state(j) == params.status]
        start = int(params.page_token) if params.page_token.isdigit() else 0
        page = tasks[start : start + size]
        length = params.history_length if params.HasField("history_length") else None
        listed = pb.ListTasksResponse(
            tasks=[task_of(j, length) for j in page], page_size=size, total_size=len(tasks)
        )
        if start + size < len(tasks):
            listed.next_page_token = str(start + size)
        if not params.include_artifacts:
            for task in listed.tasks:
                del task.artifacts[:]
        return listed

    async def on_cancel_task(
        self, params: pb.CancelTaskRequest, context: ServerCallContext
    ) -> pb.Task | None:
        caller = _Caller(context)
        job = await self._owned(caller, params.id)
        if job.done:
            raise TaskNotCancelableError(
                message=f"task {job.id} is {pb.TaskState.Name(task_state(job))} already"
            )
        job = await caller.state.jobs.cancel_job(job.id)
        if job.status == "waiting_input":
            job = await cancel_waiting(caller.state.store, job, outbox=caller.state.job_outbox)
            if job.done:
                caller.state.webhooks.wake()
        elif not job.done:
            # A running job stops at its runner's next lease renewal: wait for it a little.
            job = await self._settle(caller, job, caller.state.settings.job_lease_seconds / 3 + 2)
        return task_of(job)

    async def on_subscribe_to_task(
        self, params: pb.SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        caller = _Caller(context)
        job = await self._owned(caller, params.id)
        if job.done:
            raise UnsupportedOperationError(
                message=f"task {job.id} is {pb.TaskState.Name(task_state(job))}: "
                "read it with GetTask"
            )
        async for event in _follow(caller.state, job, after=await _last_seq(caller.state, job)):
            yield event

    async def on_create_task_push_notification_config(
        self, params: Any, context: ServerCallContext
    ) -> Any:
        raise PushNotificationNotSupportedError()

    async def on_get_task_push_notification_config(
        self, params: Any, context: ServerCallContext
    ) -> Any:
        raise PushNotificationNotSupportedError()

    async def on_list_task_push_notification_configs(
        self, params: Any, context: ServerCallContext
    ) -> Any:
        raise PushNotificationNotSupportedError()

    async def on_delete_task_push_notification_config(
        self, params: Any, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError()

    async def on_get_extended_agent_card(
        self, params: Any, context: ServerCallContext
    ) -> pb.AgentCard:
        raise ExtendedAgentCardNotConfiguredError()


# -- following a job's journal as task events --------------------------------------


async def _last_seq(state: ServerState, job: Job) -> int:
    try:
        return (await state.store.get_session(job.session_id)).last_seq
    except SessionNotFound:
        return 0


def _status_event(job: Job, text: str, data: Mapping[str, Any]) -> pb.TaskStatusUpdateEvent:
    context_id = str(_a2a(job).get("context_id") or job.session_id)
    event = pb.TaskStatusUpdateEvent(
        task_id=job.id,
        context_id=context_id,
        status=pb.TaskStatus(
            state=pb.TASK_STATE_WORKING,
            message=_text_message(
                text,
                role=pb.ROLE_AGENT,
                task_id=job.id,
                context_id=context_id,
                mid=f"{job.id}-{data.get('eventId', 'live')}-{data.get('kind', '')}",
            ),
        ),
    )
    event.status.timestamp.GetCurrentTime()
    meta = Struct()
    meta.update({"koboi": dict(data)})
    event.metadata.CopyFrom(meta)
    return event


def _journal_event(job: Job, event: JournalEvent) -> Any | None:
    """The task event a journal event of the job's run becomes (None: not shown)."""
    seq = event.seq
    if event.type == J.TOOL_CALL_STARTED:
        name = J.TOOL_CALL_STARTED.of(event)["name"]
        return _status_event(
            job, f"calling {name}", {"kind": "tool_call", "eventId": seq, "name": name}
        )
    ended: tuple[tuple[J.EventKind[Any], str], ...] = (
        (J.TOOL_CALL_FINISHED, "finished"),
        (J.TOOL_CALL_REFUSED, "refused"),
        (J.TOOL_CALL_INTERRUPTED, "interrupted"),
    )
    for kind, verb in ended:
        if event.type == kind:
            name = str(kind.of(event)["name"])
            return _status_event(
                job, f"{name} {verb}", {"kind": "tool_result", "eventId": seq, "name": name}
            )
    if event.type == J.APPROVAL_REQUESTED:
        tool = J.APPROVAL_REQUESTED.of(event)["name"]
        return _status_event(
            job,
            f"{tool} waits for the operator's approval",
            {"kind": "pending_approval", "eventId": seq, "name": tool},
        )
    if event.type == J.RUN_RESUMED:
        return _status_event(job, "resumed", {"kind": "run_resumed", "eventId": seq})
    return None


def _delta_event(job: Job, delta: Delta, first: bool) -> pb.TaskArtifactUpdateEvent:
    context_id = str(_a2a(job).get("context_id") or job.session_id)
    return pb.TaskArtifactUpdateEvent(
        task_id=job.id,
        context_id=context_id,
        artifact=pb.Artifact(
            artifact_id=f"draft-{delta.after_seq}",
            name="draft",
            parts=[pb.Part(text=delta.text)],
        ),
        append=not first,
        last_chunk=False,
    )


def _final_events(job: Job) -> list[Any]:
    task = task_of(job)
    events: list[Any] = []
    if job.status == "completed":
        events.append(
            pb.TaskArtifactUpdateEvent(
                task_id=job.id,
                context_id=task.context_id,
                artifact=task.artifacts[0],
                last_chunk=True,
            )
        )
    events.append(
        pb.TaskStatusUpdateEvent(task_id=job.id, context_id=task.context_id, status=task.status)
    )
    return events


async def _follow(state: ServerState, job: Job, *, after: int) -> AsyncGenerator[Any]:
    """The task, then its events until it settles (finished, or waiting for input)."""
    yield task_of(job)
    cursor = after
    drafts: set[int] = set()
    with state.hub.subscribe(job.session_id) as sub:
        while True:
            job = await state.jobs.get_job(job.id)
            try:
                events = await state.store.read(job.session_id, after=cursor)
            except SessionNotFound:
                events = []
            for event in events:
                cursor = event.seq
                made = _journal_event(job, event)
                if made is not None:
                    yield made
            for item in sub.take():
                if isinstance(item, Delta) and item.text:
                    yield _delta_event(job, item, item.after_seq not in drafts)
                    drafts.add(item.after_seq)
            if job.status in _SETTLED:
                for final in _final_events(job):
                    yield final
                return
            await sub.wait(state.settings.poll_seconds)


# -- the extension -------------------------------------------------------------------


def _base_url(context: ServerContext, settings: ServeSettings) -> str:
    if settings.url:
        return settings.url.rstrip("/")
    host = context.settings.host
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{context.settings.port}"


def _etag(card: Mapping[str, Any]) -> str:
    """A weak ETag of the card's content (the signature left out: it may differ for the
    same content)."""
    unsigned = {k: v for k, v in card.items() if k != "signatures"}
    body = json.dumps(unsigned, sort_keys=True, separators=(",", ":"))
    return f'W/"{hashlib.sha256(body.encode()).hexdigest()[:32]}"'


def _tool_names(context: ServerContext) -> list[str]:
    try:
        return sorted(context.agent.tools)
    except Exception:  # not open (an app built without its lifespan): the config's own
        return sorted(context.config.tools.builtin)


def create_extension(context: ServerContext) -> ServerExtension | None:
    """The card, the key set and the JSON-RPC endpoint (None without an ``a2a`` section)."""
    from a2a.server.request_handlers.response_helpers import build_error_response
    from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
    from fastapi import APIRouter
    from fastapi.responses import JSONResponse, Response
    from starlette.routing import Route

    from koboi_server.extensions import ServerExtension

    section = context.config.section("a2a")
    if not isinstance(section, A2ASettings) or not section.serve.enabled:
        return None
    settings = section.serve
    base_url = _base_url(context, settings)
    base_dir = Path(getattr(context.config, "base_dir", None) or ".")
    # The signing key is read now, so a bad one stops the start; the card is built at
    # its first request, when the agent is open and its tools (toolsets too) are known.
    signer = CardSigner(settings.signing, base_dir, base_url) if settings.signing else None
    served: dict[str, Any] = {}

    def card_now() -> dict[str, Any]:
        if not served:
            agent = context.config.agent
            card = build_card(
                name=agent.name,
                system_prompt=str(getattr(agent, "system_prompt", "") or ""),
                tools=_tool_names(context),
                settings=settings,
                base_url=base_url,
            )
            served.update(card_json(signer.sign(card) if signer is not None else card))
        return served

    router = APIRouter()

    started = formatdate(time.time(), usegmt=True)

    async def agent_card(request: Request) -> Response:
        card = card_now()
        etag = _etag(card)
        headers = {"Cache-Control": "public, max-age=300", "ETag": etag, "Last-Modified": started}
        if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
            return Response(status_code=304, headers=headers)
        return JSONResponse(card, headers=headers)

    router.add_api_route(CARD_PATH, agent_card, methods=["GET"], include_in_schema=False)
    public = [CARD_PATH]
    if signer is not None:
        jwks = signer.jwks

        async def key_set() -> JSONResponse:
            return JSONResponse(jwks, headers={"Cache-Control": "public, max-age=300"})

        router.add_api_route(JWKS_PATH, key_set, methods=["GET"], include_in_schema=False)
        public.append(JWKS_PATH)
    dispatcher = JsonRpcDispatcher(
        request_handler=KoboiRequestHandler(settings),
        context_builder=ContextBuilder(),
        enable_v0_3_compat=True,
    )

    async def endpoint(request: Request) -> Response:
        # a2a-sdk's dispatcher reads any body as JSON: another media type is refused
        # here, as the JSON-RPC error the spec names for it.
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media and media != "application/json" and not media.endswith("+json"):
            return JSONResponse(
                build_error_response(
                    None,
                    ContentTypeNotSupportedError(
                        message=f"Content-Type {media!r} is not supported: send application/json"
                    ),
                )
            )
        answer: Response = await dispatcher.handle_requests(request)
        return answer

    # The endpoint answers with and without a trailing slash: clients that join the
    # card's URL with "/" (the A2A TCK does) are not sent a redirect.
    for path in (RPC_PATH, RPC_PATH + "/"):
        router.routes.append(Route(path, endpoint=endpoint, methods=["POST"]))
    return ServerExtension(router=router, public_paths=public, scope=INVOKE_SCOPE)


__all__ = ["KoboiRequestHandler", "create_extension", "message_text", "task_of"]
