"""The routes: ``GET /v1/models``, ``GET /v1/models/{model}``, ``POST /v1/chat/completions``.

They sit under ``/v1/``, behind ``koboi serve``'s API keys (401 before they run).
A completion is a koboi chat run (:func:`koboi_server.extensions.start_chat`): in the
session :mod:`koboi_openai_compat.conversations` chooses, owned by the caller, under
the agent's governance, executing in the server's task group (a client that goes
away leaves it running to its end, journaled). Tool calls run on the server; a call
that needs approval is denied at once under ``approvals: deny`` (no OpenAI client
can approve), and the model is told why.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from koboi import journal as J
from koboi.events import FinalEvent
from koboi_openai_compat import conversations
from koboi_openai_compat.shapes import (
    DONE,
    FINAL_KEYS,
    FINISH_REASONS,
    KEEPALIVE,
    KEEPALIVE_COMMENT,
    ChunkMaker,
    ToolActivity,
    answer_text,
    completion,
    data_line,
    koboi_part,
    read_frame,
)
from koboi_openai_compat.wire import (
    error_type,
    new_input,
    openai_body,
    openai_error,
    parse_request,
)
from koboi_server.api import trace_of
from koboi_server.errors import ApiError
from koboi_server.extensions import (
    ServerExtension,
    current_principal,
    run_stream,
    server_state,
    start_chat,
)
from koboi_server.sse import agent_event_data, project

if TYPE_CHECKING:
    from koboi.store import SessionInfo
    from koboi_openai_compat.settings import OpenAICompatSettings
    from koboi_server.extensions import ServerContext
    from koboi_server.keys import Principal
    from koboi_server.runs import ActiveRun
    from koboi_server.state import ServerState

#: What the model is told of a call denied because nobody can approve it here.
DENIED = (
    "denied: this tool call needs approval, and nobody can approve over the "
    "OpenAI-compatible endpoint (openai-compat.approvals: deny). Tell the user it was not "
    "done; someone with access to the koboi API or console can run it instead."
)
#: Answers a client must not retry by itself (the run went on, or ended, on the server).
_NO_RETRY = {"x-should-retry": "false"}


#: OpenAI's error body, for the OpenAPI document.
_ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": "string"},
            },
            "required": ["message", "type", "code"],
        }
    },
    "required": ["error"],
}
_MEANINGS = {
    400: "The request cannot be run (the message and param say what to fix).",
    401: "Missing, malformed or revoked API key.",
    404: "No such model, or the session is not the caller's.",
    405: "Another method.",
    409: "The session is busy (a run is in progress) or cannot take a message.",
    413: "The body is larger than server.max_body_bytes.",
    422: "The message is longer than server.max_message_chars.",
    429: "Too many runs in progress; retry after Retry-After seconds.",
    500: "The agent's run failed (run_failed).",
    503: "The server is shutting down, or its store is unreachable.",
    504: "A JSON completion still running after server.chat_wait_seconds.",
}


def _responses(*statuses: int, ok: dict[str, Any]) -> dict[int | str, dict[str, Any]]:
    errors: dict[int | str, dict[str, Any]] = {
        status: {
            "description": _MEANINGS[status],
            "content": {"application/json": {"schema": _ERROR_SCHEMA}},
        }
        for status in statuses
    }
    return {200: ok, **errors}


_COMPLETION_OK = {
    "description": "A chat.completion, or with stream: chat.completion.chunk events ending "
    "'data: [DONE]' (docs/openai-compat.md).",
    "content": {
        "application/json": {"schema": {"type": "object"}},
        "text/event-stream": {"schema": {"type": "string"}},
    },
}
_REQUEST_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["model", "messages"],
                    "properties": {
                        "model": {"type": "string"},
                        "messages": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["role"],
                                "properties": {
                                    "role": {"type": "string"},
                                    "content": {"type": ["string", "array", "null"]},
                                },
                            },
                        },
                        "stream": {"type": "boolean"},
                        "stream_options": {
                            "type": "object",
                            "properties": {"include_usage": {"type": "boolean"}},
                        },
                        "user": {"type": "string"},
                    },
                }
            }
        },
    }
}


def extension(context: ServerContext, settings: OpenAICompatSettings) -> ServerExtension:
    model_id = settings.model or context.config.agent.name
    created = int(time.time())
    card = {"id": model_id, "object": "model", "created": created, "owned_by": "koboi"}
    router = APIRouter(tags=["openai-compat"])

    @router.get(
        "/v1/models",
        summary="The agent, as the one model of this server",
        responses=_responses(401, ok={"description": "The list of models."}),
    )
    async def list_models(request: Request) -> dict[str, Any]:
        current_principal(request)
        return {"object": "list", "data": [card]}

    @router.get(
        "/v1/models/{model:path}",
        summary="The agent as a model (404 for any other)",
        responses=_responses(401, 404, ok={"description": "The model."}),
    )
    async def get_model(model: str, request: Request) -> Any:
        current_principal(request)
        if model != model_id:
            raise _unknown_model(model, model_id)
        return card

    @router.post(
        "/v1/chat/completions",
        summary="Run the agent on a conversation (OpenAI Chat Completions; stream: SSE)",
        responses=_responses(
            400, 401, 404, 405, 409, 413, 422, 429, 500, 503, 504, ok=_COMPLETION_OK
        ),
        openapi_extra=_REQUEST_BODY,
    )
    async def chat_completions(request: Request) -> Any:
        return await _complete(request, settings, model_id)

    return ServerExtension(router=router, error_body=openai_body)


def _unknown_model(model: str, model_id: str) -> ApiError:
    return openai_error(
        404,
        "model_not_found",
        f"The model {model[:200]!r} does not exist on this server: it serves one koboi agent, "
        f"as the model {model_id!r} (GET /v1/models)",
        param="model",
    )


async def _body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise openai_error(
            400, "invalid_json", f"the body is not valid JSON: {exc}", param=None
        ) from None


async def _complete(request: Request, settings: OpenAICompatSettings, model_id: str) -> Any:
    principal = current_principal(request)
    body = parse_request(await _body(request))
    if body.model != model_id:
        raise _unknown_model(body.model, model_id)
    state = server_state(request)
    choice = await conversations.choose(
        state, principal, request.headers.get(conversations.HEADER), body.user
    )
    message = new_input(body, continuing=choice.continuing)
    trace = trace_of(request.headers.get("traceparent"), request.headers.get("tracestate"))
    info, active = await start_chat(
        request, message, session_id=choice.session_id, create=choice.create, trace=trace
    )
    after = info.last_seq
    completion_id = f"chatcmpl-{info.id}-{after + 1}"
    headers = {conversations.HEADER: info.id}
    deny = settings.approvals == "deny"
    if body.stream:
        maker = ChunkMaker(
            completion_id,
            model_id,
            int(time.time()),
            include_usage=bool(body.stream_options and body.stream_options.include_usage),
        )
        return StreamingResponse(
            _chunks(request, state, principal, info, after, maker, deny=deny),
            media_type="text/event-stream",
            headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    final = await _wait(state, active, principal, deny=deny)
    if final["outcome"] == "failed":
        raise openai_error(
            500,
            "run_failed",
            f"the agent's run failed: {final.get('error') or 'no reason given'}",
            headers={**headers, **_NO_RETRY},
            session_id=info.id,
        )
    tools = await _tool_activity(state, info.id, after, active.final_seq)
    answer = completion(completion_id, model_id, int(time.time()), info.id, final, tools)
    return JSONResponse(answer, headers=headers)


async def _deny(state: ServerState, approval_id: str, principal: Principal) -> None:
    """Deny a pending approval (nobody can approve here); nothing when it is decided already."""
    # Decided already (by someone with the koboi API, or its deadline): that stands.
    with contextlib.suppress(ApiError):
        await state.book.decide(approval_id, principal, approve=False, scope="once", reason=DENIED)


async def _wait(
    state: ServerState, active: ActiveRun, principal: Principal, *, deny: bool
) -> dict[str, Any]:
    """Wait for the run's end (denying its approvals under ``deny``); its final data."""
    deadline = time.monotonic() + state.settings.chat_wait_seconds
    denied: set[str] = set()
    while not active.done.is_set():
        changed = active.changed
        if deny and active.awaiting - denied:
            for approval_id in sorted(active.awaiting - denied):
                denied.add(approval_id)
                await _deny(state, approval_id, principal)
            continue
        if state.registry.draining and active.parked:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            break
        with anyio.move_on_after(min(left, 1.0)):
            await changed.wait()
    sid = active.session_id
    result = active.result
    if active.done.is_set() and result is not None:
        data = agent_event_data(FinalEvent(result, active.final_seq))
        return {key: data.get(key) for key in FINAL_KEYS}
    if active.done.is_set() and active.error is not None:
        raise active.error
    if active.suspended or state.registry.draining:
        raise openai_error(
            503,
            "shutting_down",
            "this server is shutting down; the run is suspended and will be resumed: follow "
            f"GET /v1/sessions/{sid}/events",
            headers={conversations.HEADER: sid, "Retry-After": "2", **_NO_RETRY},
            session_id=sid,
        )
    waiting = " for an approval" if active.awaiting else ""
    raise openai_error(
        504,
        "run_timeout",
        f"the run is still going{waiting} after server.chat_wait_seconds "
        f"({state.settings.chat_wait_seconds:g} s); it goes on: follow "
        f"GET /v1/sessions/{sid}/events, or stream the completion",
        headers={conversations.HEADER: sid, **_NO_RETRY},
        session_id=sid,
    )


async def _tool_activity(
    state: ServerState, session_id: str, after: int, final_seq: int | None
) -> ToolActivity:
    """The tool calls of the run between journal events ``after`` and ``final_seq``."""
    tools = ToolActivity()
    if final_seq is None:
        return tools
    calls: dict[str, Any] = {}
    for event in await state.store.read(session_id, after=after, limit=final_seq - after):
        if event.type in _TOOL_EVENTS:
            name, data = project(event, calls)
            tools.see(name, data)
    return tools


_TOOL_EVENTS = frozenset(
    {
        J.MODEL_CALL_FINISHED,
        J.TOOL_CALL_STARTED,
        J.TOOL_CALL_FINISHED,
        J.TOOL_CALL_REFUSED,
        J.TOOL_CALL_INTERRUPTED,
        J.TOOL_CALL_SUSPENDED,
        J.APPROVAL_REQUESTED,
        J.APPROVAL_DECIDED,
    }
)


async def _chunks(
    request: Request,
    state: ServerState,
    principal: Principal,
    info: SessionInfo,
    after: int,
    maker: ChunkMaker,
    *,
    deny: bool,
) -> AsyncIterator[bytes]:
    """koboi's stream of the run, as ``chat.completion.chunk`` events ending ``[DONE]``."""
    yield data_line(maker.chunk({"role": "assistant", "content": ""}))
    async with contextlib.aclosing(run_stream(request, info, after=after).frames()) as frames:
        async for chunk in _translated(frames, state, principal, info, maker, deny=deny):
            yield chunk


async def _translated(
    frames: AsyncIterator[bytes],
    state: ServerState,
    principal: Principal,
    info: SessionInfo,
    maker: ChunkMaker,
    *,
    deny: bool,
) -> AsyncIterator[bytes]:
    tools = ToolActivity()
    streamed_steps: set[int] = set()
    text_sent = False
    async for raw in frames:
        read = read_frame(raw)
        if read == KEEPALIVE:
            yield KEEPALIVE_COMMENT  # a long tool call, an approval: keeps proxies open
            continue
        if not isinstance(read, tuple):
            continue
        name, data = read
        if name in ("text_delta", "step"):
            tools.see(name, data)
            step = int(data.get("step") or 0)
            if name == "step" and step in streamed_steps:
                continue  # its text came as deltas already
            text = str(data.get("text") or "")
            if not text:
                continue
            if step not in streamed_steps and text_sent:
                text = "\n\n" + text  # the text of the next model call of the run
            streamed_steps.add(step)
            text_sent = True
            yield data_line(maker.chunk({"content": text}))
        elif name == "pending_approval" and deny:
            tools.see(name, data)
            await _deny(state, str(data.get("approval_id")), principal)
        elif name == "final":
            final = {key: data.get(key) for key in FINAL_KEYS}
            if final["outcome"] == "failed":
                yield _stream_error(
                    500, "run_failed", f"the agent's run failed: {final.get('error')}", info.id
                )
                return
            if not text_sent and answer_text(final):
                yield data_line(maker.chunk({"content": answer_text(final)}))
            outcome = str(final["outcome"])
            if outcome == "refused":
                yield data_line(maker.chunk({"refusal": final.get("error") or ""}))
            yield data_line(
                maker.chunk(
                    {},
                    FINISH_REASONS.get(outcome, "stop"),
                    koboi=koboi_part(info.id, final, tools),
                )
            )
            if maker.include_usage:
                yield data_line(maker.usage_chunk(final.get("usage")))
            yield DONE
            return
        elif name == "error":
            code = str(data.get("code") or "error")
            status = {"unauthorized": 401, "shutting_down": 503, "store_unavailable": 503}
            yield _stream_error(status.get(code, 500), code, str(data.get("message")), info.id)
            return
        else:
            call = tools.see(name, data)
            if call is not None:
                # The agent's tool activity, as koboi's extension of the chunk (no text).
                yield data_line(maker.chunk({}, koboi={"event": name, "tool_call": dict(call)}))


def _stream_error(status: int, code: str, message: str, session_id: str) -> bytes:
    """An error inside a stream, as OpenAI sends one (its clients raise it)."""
    return data_line(
        {
            "error": {
                "message": message,
                "type": error_type(status),
                "param": None,
                "code": code,
                "session_id": session_id,
            }
        }
    )
