"""Prometheus metrics of ``koboi serve`` (``server.metrics``): requests, runs, the job queue
and leases, plus what extensions add (``ServerExtension.collectors``).

Served at ``GET /metrics`` on the API's port, behind an API key like every ``/v1``
route, or, with ``server.metrics.port``, on a port of its own without a key (bind it
to an address only the scraper reaches). Labels are route templates, methods,
statuses and outcomes: never a path with an id in it, a principal or a message.

The gauges that need the store (jobs by status, expired leases) are refreshed every
``server.metrics.refresh_seconds`` by a background loop, so a scrape never waits on
the store.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from koboi.store import JobStatus
    from koboi_server.state import ServerState

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Job statuses counted in ``koboi_server_jobs``.
JOB_STATUSES: tuple[JobStatus, ...] = ("queued", "running", "awaiting_approval", "waiting_input")
METRICS_PATH = "/metrics"


class ServerMetrics:
    """The registry of one app and the metrics the server keeps in it."""

    def __init__(self, collectors: Sequence[Any] = ()) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "koboi_server_requests",
            "HTTP requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "koboi_server_request_duration_seconds",
            "Time to answer a request (an SSE stream: until it ends), by method and route.",
            ["method", "route"],
            registry=r,
        )
        self.in_flight = Gauge(
            "koboi_server_requests_in_flight", "Requests being answered now.", registry=r
        )
        self.runs_active = Gauge(
            "koboi_server_runs_active", "Chat runs this process executes now.", registry=r
        )
        self.runs_finished = Counter(
            "koboi_server_runs_finished",
            "Runs this process executed (chats and jobs) that ended, by outcome.",
            ["outcome"],
            registry=r,
        )
        self.jobs = Gauge(
            "koboi_server_jobs",
            f"Jobs in the store by status ({', '.join(JOB_STATUSES)}; counted up to "
            "server.max_queued_jobs + 1 each).",
            ["status"],
            registry=r,
        )
        self.jobs_running_here = Gauge(
            "koboi_server_jobs_running_here",
            "Jobs this process holds a lease on and runs.",
            registry=r,
        )
        self.leases_expired = Gauge(
            "koboi_server_job_leases_expired",
            "Running jobs whose lease has expired: their replica died or stalled; another "
            "claims them.",
            registry=r,
        )
        self.refreshed = Gauge(
            "koboi_server_metrics_refreshed_timestamp_seconds",
            "When the store-backed gauges were last refreshed.",
            registry=r,
        )
        for collector in collectors:
            r.register(collector)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def refresh(self, state: ServerState) -> None:
        """Read what the gauges show from the app's state and its store."""
        self.runs_active.set(len(state.registry.runs))
        runner = state.runner
        self.jobs_running_here.set(runner.running_jobs if runner is not None else 0)
        cap = state.settings.max_queued_jobs + 1
        now = time.time()
        for status in JOB_STATUSES:
            found = await state.jobs.list_jobs(status=status, limit=cap)
            self.jobs.labels(status).set(len(found))
            if status == "running":
                expired = [
                    j for j in found if j.lease_expires_at is not None and j.lease_expires_at < now
                ]
                self.leases_expired.set(len(expired))
        self.refreshed.set(now)


async def refresh_forever(metrics: ServerMetrics, state: ServerState, interval: float) -> None:
    """The background loop behind the store-backed gauges (run under ``supervised``)."""
    from koboi_server.outages import LoopErrors

    errors = LoopErrors("refreshing the metrics", state.outage)
    while True:
        try:
            await metrics.refresh(state)
        except Exception as exc:  # a store outage shows as stale gauges, never a dead loop
            errors.failed(exc)
        else:
            errors.ok()
        await anyio.sleep(interval)


class RequestMetrics:
    """ASGI middleware: counts and times every HTTP request by its route template."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        metrics = self.metrics
        metrics.in_flight.inc()
        try:
            await self.app(scope, receive, sending)
        finally:
            metrics.in_flight.dec()
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = str(scope.get("method", ""))
            metrics.requests.labels(method, template, str(status["code"])).inc()
            metrics.request_seconds.labels(method, template).observe(time.perf_counter() - started)


def metrics_response(metrics: ServerMetrics) -> Any:
    from fastapi.responses import Response

    return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)


def serve_on_port(metrics: ServerMetrics, host: str, port: int) -> Callable[[], None]:
    """``/metrics`` on a port of its own (a thread); return what stops it."""
    from prometheus_client import start_http_server

    server, thread = start_http_server(port, addr=host, registry=metrics.registry)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop


def outcome_observer(metrics: ServerMetrics) -> Any:
    """An interceptor counting the runs this process executes by outcome."""
    from koboi import journal as J
    from koboi.interceptors import Interceptor, RunInfo
    from koboi.store import JournalEvent

    class RunOutcomes(Interceptor):
        name = "server-metrics"
        priority = 10_000

        async def on_event(self, event: JournalEvent, run: RunInfo) -> None:
            if event.type == J.RUN_FINISHED:
                metrics.runs_finished.labels(J.RUN_FINISHED.of(event)["outcome"]).inc()

    return RunOutcomes()
