"""Request and response bodies of the HTTP API (they make the OpenAPI document)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBody(BaseModel):
    code: str = Field(description="Stable, machine-readable error code.")
    message: str = Field(description="What went wrong and what to do about it.")

    model_config = ConfigDict(extra="allow")


class ErrorEnvelope(BaseModel):
    """Every error response: ``{"error": {"code": ..., "message": ...}}``."""

    error: ErrorBody


class ChatRequest(_Body):
    message: str = Field(min_length=1, description="The user message to run.")
    session_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Continue this session of yours; omit to start a new one (the server picks "
        "a random id).",
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
        "cancelled.",
    )
    output: str | None = Field(default=None, description="The final answer.")
    error: str | None = Field(default=None, description="Why the run did not complete.")
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
        "failed, interrupted, cancelled."
    )
    created_at: float
    updated_at: float
    last_event_id: int = Field(description="Seq of the session's last journal event.")
    running_here: bool = Field(description="A run of this session executes on this replica.")


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
        description="http(s) URL that receives this job's job.finished event. Loopback, private, "
        "link-local and metadata addresses are refused unless server.webhooks.allow lists them.",
    )
    secret: str = Field(
        min_length=1,
        max_length=500,
        description="Signing secret ('whsec_<base64>', e.g. from koboi_server.webhooks."
        "generate_secret()); never shown again.",
    )


class JobCreate(_Body):
    input: str = Field(min_length=1, description="The user message the job runs.")
    metadata: dict[str, Any] | None = Field(
        default=None, description="Your own JSON data, kept with the job and shown back."
    )
    webhook: JobWebhook | None = Field(
        default=None, description="Also send job.finished to this receiver (beside the config's)."
    )


class JobView(BaseModel):
    id: str = Field(description="The job's id.")
    status: Literal["queued", "running", "awaiting_approval", "completed", "failed", "cancelled"]
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


class JobList(BaseModel):
    jobs: list[JobView]


ChatResult.model_rebuild()
