"""The ``server`` config section: how ``koboi serve`` listens, limits and streams.

Every field has a safe default, so a config without the section serves on
127.0.0.1:8080 with authentication on. Command-line options of ``koboi serve``
(``--host``, ``--port``, ``--workers``, ``--dev-no-auth``) override the section.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from koboi_server.webhooks.settings import WebhookSettings

SECTION = "server"

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


class MetricsSettings(BaseModel):
    """``server.metrics``: the Prometheus endpoint."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=False,
        description="Serve Prometheus metrics at /metrics: requests, runs, the job queue, "
        "leases, and what plugins add (koboi-otel: tokens, cost, tool calls by verdict).",
    )
    port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Serve /metrics on a port of its own, without an API key (one worker "
        "only). None: on the API's port, where it needs an API key like every /v1 route.",
    )
    host: str = Field(
        default="127.0.0.1",
        description="Address of the metrics port (with port): one only the scraper reaches.",
    )
    refresh_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How often the gauges read from the store (jobs by status, expired "
        "leases) are refreshed; a scrape never waits on the store.",
    )


class ServerSettings(BaseModel):
    """``koboi serve``: the HTTP/SSE service of an agent."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field(
        default="127.0.0.1",
        description="Address to listen on. 0.0.0.0 listens on every interface: put a TLS-"
        "terminating proxy in front of it.",
    )
    port: int = Field(default=8080, ge=1, le=65535, description="TCP port to listen on.")
    workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Worker processes. More than one needs a durable store (SQLite or "
        "PostgreSQL): every worker shares sessions, keys and approvals through it.",
    )
    max_body_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="Largest request body accepted; a larger one is answered 413 before it is "
        "read (from Content-Length, or as soon as a streamed body passes the limit).",
    )
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="A request's head (request line and headers) must arrive within this many "
        "seconds of the connection opening, or of its first byte on a connection kept alive; "
        "otherwise the server answers 408 and closes the connection (slow-header clients). The "
        "body is not bounded by it.",
    )
    body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A request's whole body must arrive within this many seconds of its head; "
        "otherwise the server answers 408 and closes the connection (slow-body clients).",
    )
    idle_timeout_seconds: float = Field(
        default=15.0,
        gt=0,
        description="A connection kept alive with no request in flight is closed this many "
        "seconds after its last response. A request in flight (an SSE stream) is never idle. "
        "Behind a proxy that reuses connections, make it longer than the proxy's own.",
    )
    max_connections: int = Field(
        default=512,
        ge=1,
        description="Connections each koboi serve process serves at once; a connection beyond "
        "it is answered 503 too_many_connections and closed, the open ones keep working. Keep "
        "it below the process's open-file limit (ulimit -n).",
    )
    max_message_chars: int = Field(
        default=100_000,
        ge=1,
        description="Longest user message a chat request may carry.",
    )
    keepalive_seconds: float = Field(
        default=15.0,
        gt=0,
        description="An SSE stream with nothing else to say sends a comment line this often, "
        "so proxies and clients know it is alive.",
    )
    key_recheck_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How often an open SSE stream checks that its API key is still valid; a "
        "revoked key ends the stream within this time.",
    )
    poll_seconds: float = Field(
        default=0.5,
        gt=0,
        description="How often a stream (or an approval wait) reads the store when the run it "
        "follows is on another replica (runs on this replica notify at once).",
    )
    drain_seconds: float = Field(
        default=20.0,
        ge=0,
        description="On SIGTERM: how long running steps get to reach a journal boundary before "
        "the runs are suspended (left resumable, as a crash would) and the server exits.",
    )
    chat_wait_seconds: float = Field(
        default=300.0,
        gt=0,
        description="POST /v1/chat waits this long for the run to end (or to wait for an "
        "approval); after that it answers 202 and the run goes on (follow its events).",
    )
    max_concurrent_runs: int = Field(
        default=64,
        ge=1,
        description="Runs this process executes at once; a chat beyond it is answered 429 with "
        "Retry-After.",
    )
    max_runs_per_principal: int = Field(
        default=16,
        ge=1,
        description="Runs of one principal this process executes at once; beyond it, 429.",
    )
    resume_interrupted: bool = Field(
        default=True,
        description="Resume, in the background, server sessions whose run was interrupted (a "
        "replica died or was stopped): at start-up and every recovery_interval_seconds.",
    )
    recovery_interval_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How often to look for interrupted server sessions to resume (their lease "
        "must have expired, or its holder be a dead process of this host).",
    )
    idempotency_retention_seconds: float = Field(
        default=86_400.0,
        gt=0,
        description="How long an Idempotency-Key of the chat, approval and cancel routes is "
        "remembered (a retry after that acts again). Job keys live as long as their job.",
    )
    purge_interval_seconds: float = Field(
        default=600.0,
        gt=0,
        description="How often to delete expired store rows (webhook claims, rate-limit "
        "counters, finished deliveries past their retention) so they do not pile up.",
    )
    approval_retention_seconds: float = Field(
        default=7 * 86400.0,
        gt=0,
        description="How long a decided or expired approval stays readable after its deadline.",
    )
    run_jobs: bool = Field(
        default=True,
        description="Run queued jobs in this process (a JobRunner in the app). Off: this "
        "replica only accepts and reports jobs; others sharing the store run them.",
    )
    job_workers: int = Field(
        default=2,
        ge=1,
        le=256,
        description="Jobs this process runs at once (each claims one job at a time).",
    )
    job_lease_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How long a job's claim lasts without renewal (renewed every third of it). "
        "When a replica dies, another resumes its job after this long.",
    )
    job_poll_seconds: float = Field(
        default=0.5, gt=0, description="How often an idle job worker looks for a queued job."
    )
    max_queued_jobs: int = Field(
        default=1000,
        ge=1,
        description="Jobs that may wait in the queue (all principals); POST /v1/jobs beyond it "
        "is answered 429 with Retry-After.",
    )
    max_jobs_per_principal: int = Field(
        default=100,
        ge=1,
        description="Unfinished jobs (queued, running or awaiting approval) one principal may "
        "have; beyond it, 429.",
    )
    webhooks: WebhookSettings = Field(
        default_factory=WebhookSettings,
        description="Webhooks: the endpoints that receive job.finished, retries, allow-list.",
    )
    dev_no_auth: bool = Field(
        default=False,
        description="Development only: requests without a key act as principal 'dev'. Refused "
        "unless host is a loopback address.",
    )
    access_log: bool = Field(
        default=True, description="Log one line per request (uvicorn's access log)."
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="'json': one JSON object per log line, with the request id, principal and "
        "session (every line masked by koboi's redacting filter); requests then carry and "
        "return an X-Request-ID.",
    )
    metrics: MetricsSettings = Field(
        default_factory=MetricsSettings, description="The Prometheus /metrics endpoint."
    )
    shared_sandbox: bool = Field(
        default=False,
        description="Serve several principals even though the sandbox cannot keep their "
        "sessions apart ('koboi sandbox check' says whether it can): each principal's tools "
        "may then read and write the others' files. Off: such a server refuses to start "
        "with keys of two principals, and serves only the principal of its oldest key.",
    )

    @field_validator("host")
    @classmethod
    def _host_not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("host must not be empty (127.0.0.1 listens on this machine only)")
        return value.strip()


def is_loopback(host: str) -> bool:
    """True for addresses that only this machine can reach."""
    return host in LOOPBACK_HOSTS or host.startswith("127.")
