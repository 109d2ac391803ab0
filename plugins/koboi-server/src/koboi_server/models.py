"""Request and response bodies of the HTTP API (they make the OpenAPI document)."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


_M = TypeVar("_M", bound=BaseModel)


def _one_text(model: _M, primary: str, other: str) -> _M:
    """The user's text may be sent as ``message`` or ``input`` (both routes take both:
    docs/server.md, "The user's text"): kept under ``primary``; both at once is refused."""
    given = getattr(model, other)
    if given is not None:
        if getattr(model, primary):
            raise ValueError(f"send the text once, as {primary!r} or as {other!r}, not both")
        setattr(model, primary, given)
        setattr(model, other, None)
    elif not getattr(model, primary):
        raise ValueError(f"{primary} (or {other}) is required: the user's text")
    return model


def _has_text(data: Any, primary: str, other: str, known: set[str]) -> Any:
    """Before the fields: neither name given is one clear problem (naming both, and any
    unknown key, which is likely a misspelling of one)."""
    if isinstance(data, dict) and primary not in data and other not in data:
        unknown = sorted(str(k) for k in data if k not in known)
        extra = f" (unknown: {', '.join(unknown)})" if unknown else ""
        raise ValueError(f"{primary} (or {other}) is required: the user's text{extra}")
    return data


def _either(primary: str, other: str) -> dict[str, Any]:
    """The JSON schema's way of saying "one of the two names is required"."""
    return {"anyOf": [{"required": [primary]}, {"required": [other]}]}


class ErrorBody(BaseModel):
    code: str = Field(description="Stable, machine-readable error code.")
    message: str = Field(description="What went wrong and what to do about it.")

    model_config = ConfigDict(extra="allow")


class ErrorEnvelope(BaseModel):
    """Every error response: ``{"error": {"code": ..., "message": ...}}``."""

    error: ErrorBody


class ChatRequest(_Body):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_either("message", "input"))

    message: str = Field(
        default="",
        min_length=1,
        description="The user message to run (also accepted as 'input'). In a session whose "
        "last run is suspended (outcome suspended), it is the reply the run waits for: the run "
        "continues with it.",
    )
    session_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Continue this session of yours; omit to start a new one (the server picks "
        "a random id).",
    )

    input: str | None = Field(
        default=None, min_length=1, description="Another name of message (send one of the two)."
    )

    @model_validator(mode="before")
    @classmethod
    def _text_given(cls, data: Any) -> Any:
        return _has_text(data, "message", "input", set(cls.model_fields))

    @model_validator(mode="after")
    def _input_is_message(self) -> ChatRequest:
        return _one_text(self, "message", "input")


class Suspension(BaseModel):
    """What a suspended run waits for (a tool called ``ctx.suspend``)."""

    model_config = ConfigDict(extra="allow")

    reason: str = Field(description="What the run waits for, in words (for a person).")
    kind: str = Field(description="What kind of answer it wants (input, a tool's own kind...).")
    data: dict[str, Any] = Field(
        default_factory=dict, description="The tool's details (a form, a question's options...)."
    )
    call_id: str | None = Field(default=None, description="The tool call that suspended it.")
    name: str | None = Field(default=None, description="That call's tool.")
    step: int | None = Field(default=None, description="The step of that call.")
    calls: list[str] | None = Field(
        default=None, description="Every call that suspended the run (parallel calls may)."
    )


class Usage(BaseModel):
    model_config = ConfigDict(extra="allow")

    input_tokens: int = 0
    output_tokens: int = 0


class ChatResult(BaseModel):
    """A run that ended (200), or one still going (202, ``status`` says why)."""

    session_id: str = Field(description="The session the run belongs to.")
    status: Literal["finished", "awaiting_approval", "running"] = Field(
        description="finished: the run ended (see outcome). awaiting_approval: it waits for a "
        "decision (see approvals). running: chat_wait_seconds passed; follow its events."
    )
    outcome: str | None = Field(
        default=None,
        description="How the run ended: completed, max_iterations, budget_exceeded, failed, "
        "cancelled, refused (see refused_by), suspended (it waits for input: see suspension; "
        "send the reply as the next message of the session).",
    )
    output: str | None = Field(default=None, description="The final answer.")
    error: str | None = Field(default=None, description="Why the run did not complete.")
    suspension: Suspension | None = Field(
        default=None, description="With outcome suspended: what the run waits for."
    )
    refused_by: str | None = Field(
        default=None, description="With outcome refused: the stage that refused the run."
    )
    steps: int | None = Field(default=None, description="Model calls the run made.")
    usage: dict[str, Any] | None = Field(default=None, description="Tokens used by the run.")
    cost_usd: float | None = Field(default=None, description="Cost at the configured prices.")
    last_event_id: int = Field(
        description="Seq of the session's last journal event: resume its events after it."
    )
    approvals: list[ApprovalView] = Field(
        default_factory=list, description="With awaiting_approval: what waits for a decision."
    )


class SessionView(BaseModel):
    id: str
    status: str = Field(
        description="created, running (or interrupted and about to be resumed), completed, "
        "failed, interrupted, cancelled, suspended (the last run waits for input: the next "
        "message is the reply)."
    )
    created_at: float
    updated_at: float
    last_event_id: int = Field(description="Seq of the session's last journal event.")
    running_here: bool = Field(
        description="A run of this session executes on this replica now: a chat's run, or the "
        "run of the job the session belongs to."
    )
    runs: int = Field(default=0, description="Runs the session has had.")
    input_tokens: int = Field(default=0, description="Input tokens of its model and side calls.")
    output_tokens: int = Field(default=0, description="Output tokens of its model and side calls.")
    cost_usd: float = Field(
        default=0.0, description="What its model and side calls cost at the configured prices."
    )


class SessionList(BaseModel):
    sessions: list[SessionView]


class ApprovalView(BaseModel):
    approval_id: str
    session_id: str
    step: int
    call_id: str
    tool: str
    arguments: Any = Field(description="The call's arguments, as the journal shows them.")
    arguments_hash: str = Field(description="SHA-256 of the canonical arguments it is bound to.")
    risk: str
    reason: str = Field(description="Why the call needs approval.")
    expires_at: float = Field(description="Deadline (epoch seconds); no decision by then denies.")
    requested_event_id: int | None = Field(
        default=None, description="Seq of the approval_requested journal event."
    )
    status: Literal["pending", "approved", "denied", "expired"]
    scope: str | None = None
    decided_by: str | None = None
    decision_reason: str | None = None
    decided_event_id: int | None = Field(
        default=None, description="Seq of the approval_decided event, once the run used it."
    )


class ApprovalList(BaseModel):
    approvals: list[ApprovalView]


class DecisionRequest(_Body):
    decision: Literal["approve", "deny"] = Field(description="approve or deny the call.")
    scope: Literal["once", "always"] = Field(
        default="once",
        description="once: this call only. always: also later calls of the same tool with the "
        "same arguments (kept as a trust rule when koboi-governance is installed).",
    )
    reason: str = Field(default="", max_length=2000, description="Shown to the model and logged.")


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    status: Literal["ready", "draining"]
    store: str = Field(description="The store backend's name.")
    schema_revision: str | None = Field(
        default=None, description="The store's schema revision, when it has one."
    )


class JobWebhook(_Body):
    url: str = Field(
        min_length=1,
        max_length=2000,
        description="http(s) URL that receives this job's job.finished event (and "
        "job.waiting_input when it waits for input). Loopback, private, link-local and metadata "
        "addresses are refused unless server.webhooks.allow lists them.",
    )
    secret: str = Field(
        min_length=1,
        max_length=500,
        description="Signing secret ('whsec_<base64>', e.g. from koboi_server.webhooks."
        "generate_secret()); never shown again.",
    )


class JobCreate(_Body):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_either("input", "message"))

    input: str = Field(
        default="",
        min_length=1,
        description="The user message the job runs (also accepted as 'message').",
    )
    message: str | None = Field(
        default=None, min_length=1, description="Another name of input (send one of the two)."
    )
    metadata: dict[str, Any] | None = Field(
        default=None, description="Your own JSON data, kept with the job and shown back."
    )
    webhook: JobWebhook | None = Field(
        default=None, description="Also send job.finished to this receiver (beside the config's)."
    )

    @model_validator(mode="before")
    @classmethod
    def _text_given(cls, data: Any) -> Any:
        return _has_text(data, "input", "message", set(cls.model_fields))

    @model_validator(mode="after")
    def _message_is_input(self) -> JobCreate:
        return _one_text(self, "input", "message")


JobStatusName = Literal[
    "queued", "running", "awaiting_approval", "waiting_input", "completed", "failed", "cancelled"
]


class JobView(BaseModel):
    id: str = Field(description="The job's id.")
    status: JobStatusName = Field(
        description="queued, running, awaiting_approval (a tool call waits for a decision), "
        "waiting_input (its run suspended: see suspension, answer with POST "
        "/v1/jobs/{id}/input), completed, failed, cancelled."
    )
    session_id: str = Field(description="The job's session: its events are the job's events.")
    created_at: float
    updated_at: float
    attempts: int = Field(description="How many times a runner claimed the job.")
    cancel_requested: bool
    metadata: dict[str, Any] = Field(default_factory=dict)
    webhook_url: str | None = Field(default=None, description="The job's own webhook, if any.")
    result: dict[str, Any] | None = Field(
        default=None, description="outcome, output, error, steps: once the job is finished."
    )
    suspension: Suspension | None = Field(
        default=None, description="With waiting_input: what the job's run waits for."
    )


class JobInput(_Body):
    reply: Any = Field(
        description="The answer the job's run waits for (any JSON value); the tool that "
        "suspended the run runs again with it (ctx.reply)."
    )


class JobList(BaseModel):
    jobs: list[JobView]


ChatResult.model_rebuild()
