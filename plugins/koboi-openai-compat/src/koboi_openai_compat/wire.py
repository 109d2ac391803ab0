"""The OpenAI Chat Completions wire format: the request koboi accepts, the errors it answers.

Only what an agent can honour is accepted. The model, its sampling and its tools
are the agent's (its config), so sampling parameters (``temperature``,
``max_tokens``, ``top_p``...) are accepted and ignored; what would change the
meaning of the answer and cannot be honoured is refused with a 400 that says
so: client-side ``tools``/``functions``, ``n`` > 1, ``logprobs``, a JSON
``response_format``, audio, non-text content parts.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from koboi_server.errors import ApiError

#: OpenAI's error types, by HTTP status (what its clients read in ``error.type``).
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    return _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def openai_error(
    status: int, code: str, message: str, *, param: str | None = None, **extra: Any
) -> ApiError:
    """An error of these routes; answered in OpenAI's shape (:func:`openai_body`)."""
    return ApiError(status, code, message, param=param, **extra)


def openai_body(error: ApiError) -> dict[str, Any]:
    """Any error answered on these routes — theirs, or the server's own before they run
    (401 without a valid key, 413, 429 ``too_many_runs``...) — in OpenAI's shape:
    ``{"error": {"message", "type", "param", "code"}}``, plus koboi's fields
    (``session_id``...)."""
    extra = {k: v for k, v in error.extra.items() if k != "param"}
    return {
        "error": {
            "message": error.message,
            "type": error_type(error.status),
            "param": error.extra.get("param"),
            "code": error.code,
            **extra,
        }
    }


class Message(BaseModel):
    """One message of ``messages``; content is a string or a list of text parts."""

    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class CompletionRequest(BaseModel):
    """``POST /v1/chat/completions``: the fields koboi reads (others are accepted and ignored)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(None, max_length=256)
    n: int | None = None
    tools: list[Any] | None = None
    functions: list[Any] | None = None
    tool_choice: Any = None
    logprobs: bool | None = None
    response_format: dict[str, Any] | None = None
    modalities: list[str] | None = None
    audio: Any = None


#: Roles whose messages are part of the conversation a client sends.
_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def parse_request(body: Any) -> CompletionRequest:
    """The request, or a 400 in OpenAI's shape saying what to fix."""
    if not isinstance(body, dict):
        raise openai_error(400, "invalid_request", "the body must be a JSON object")
    try:
        request = CompletionRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise openai_error(
            400, "invalid_request", f"{where}: {first.get('msg', 'invalid')}", param=where
        ) from None
    _refuse_unsupported(request)
    for index, message in enumerate(request.messages):
        if message.role not in _ROLES:
            raise openai_error(
                400,
                "invalid_request",
                f"messages.{index}.role: {message.role!r} is not one of {', '.join(_ROLES)}",
                param=f"messages.{index}.role",
            )
        text_of(message, index)  # content parts other than text are refused here
    last = request.messages[-1]
    if last.role != "user" or not text_of(last, len(request.messages) - 1).strip():
        raise openai_error(
            400,
            "invalid_request",
            "the last message must be the user's, with text: it is what the agent answers",
            param="messages",
        )
    return request


def _refuse_unsupported(request: CompletionRequest) -> None:
    def refuse(param: str, why: str) -> None:
        raise openai_error(400, "unsupported_parameter", f"{param}: {why}", param=param)

    if request.tools or request.functions:
        refuse(
            "tools",
            "this model is a koboi agent: its tools are its own and run on the server, under "
            "its governance; client-side tools are not supported (send no tools)",
        )
    if request.n not in (None, 1):
        refuse("n", "one choice per request (an agent's run has one answer)")
    if request.logprobs:
        refuse("logprobs", "not available from an agent")
    kind = (request.response_format or {}).get("type", "text")
    if kind != "text":
        refuse("response_format", f"{kind!r} is not supported; only 'text'")
    if request.audio is not None or "audio" in (request.modalities or ()):
        refuse("modalities", "only text is supported")


def text_of(message: Message, index: int) -> str:
    """The text of a message: its string, or its text parts joined."""
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise openai_error(
                400,
                "unsupported_content",
                f"messages.{index}.content: a {part.get('type')!r} part; only text parts are "
                "supported",
                param=f"messages.{index}.content",
            )
        texts.append(part["text"])
    return "\n".join(texts)


def new_input(request: CompletionRequest, *, continuing: bool) -> str:
    """What the agent receives as this turn's message.

    Continuing a session (it exists: chosen by ``X-Koboi-Session`` or ``user``), the
    session's journal holds the conversation: only the last message (the user's) is new.
    In a new session the earlier messages, if any, come first as a transcript — the
    journal keeps it with the message, so later turns see it too.
    """
    messages = request.messages
    last = text_of(messages[-1], len(messages) - 1)
    if continuing or len(messages) == 1:
        return last
    lines = ["Conversation so far (sent by the client):"]
    for index, message in enumerate(messages[:-1]):
        text = text_of(message, index)
        if text.strip():
            lines.append(f"[{message.role}] {text}")
    if len(lines) == 1:
        return last
    return "\n".join([*lines, "", "Current message:", last])
