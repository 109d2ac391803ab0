"""``create_app``: the FastAPI application of one agent.

::

    from koboi_server import create_app

    app = create_app("agent.yaml")                 # then: uvicorn module:app
    app = create_app("agent.yaml", extra_tools=[my_tool], extra_routes=[my_router])

The app opens the agent (its store, provider, sandbox, tools) in its lifespan
and closes it at shutdown, after draining the runs in progress.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from koboi.errors import KoboiError, SessionNotFound, StoreError
from koboi.interceptors import Interceptor, RunInfo
from koboi_server import api, jobs_api
from koboi_server.approvals import ApprovalBook, ServerApprover
from koboi_server.errors import (
    ApiError,
    code_for_status,
    describe_validation,
    envelope,
    new_request_id,
)
from koboi_server.hub import Hub
from koboi_server.keys import KeyRing
from koboi_server.middleware import AuthMiddleware, BodyLimitMiddleware
from koboi_server.runs import RunRegistry
from koboi_server.settings import SECTION, ServerSettings, is_loopback
from koboi_server.state import ServerState

if TYPE_CHECKING:
    from koboi.approval import Approver
    from koboi.config import AgentConfig
    from koboi.plugins import PluginHost
    from koboi.provider import ModelProvider
    from koboi.sandbox import Sandbox
    from koboi.store import Job, JournalEvent, RecordWrite, Store
    from koboi.tools import Tool
    from koboi_server.jobs import JobRunner
    from koboi_server.webhooks.dispatcher import WebhookDispatcher

log = logging.getLogger("koboi.server")


def load_settings(
    config: AgentConfig, overrides: Mapping[str, Any] | None = None
) -> ServerSettings:
    """The config's ``server`` section (defaults when absent), with ``overrides`` applied."""
    from pydantic import ValidationError

    section = config.section(SECTION)
    base = section if isinstance(section, ServerSettings) else ServerSettings()
    if not overrides:
        return base
    try:
        return ServerSettings.model_validate({**base.model_dump(), **overrides})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise KoboiError(f"server settings: {problems}") from None


def check_settings(settings: ServerSettings, store_scheme: str | None) -> None:
    """Refuse combinations that cannot be served safely."""
    if settings.dev_no_auth and not is_loopback(settings.host):
        raise KoboiError(
            f"dev_no_auth lets anyone in without a key, so it is refused on host "
            f"{settings.host!r}: listen on 127.0.0.1, or create keys with 'koboi keys create'"
        )
    if settings.workers > 1 and store_scheme == "memory":
        raise KoboiError(
            "several workers need a store they share: set store.url to sqlite:///... or "
            "postgresql+psycopg://... (memory:// lives in one process)"
        )


def create_app(
    config: AgentConfig | str | os.PathLike[str],
    *,
    extra_tools: Sequence[Tool] = (),
    extra_routes: APIRouter | Sequence[APIRouter] | None = None,
    approver: Approver | None = None,
    settings: ServerSettings | Mapping[str, Any] | None = None,
    host: PluginHost | None = None,
    store: Store | None = None,
    provider: ModelProvider | None = None,
    sandbox: Sandbox | None = None,
    interceptors: Sequence[Interceptor] = (),
) -> FastAPI:
    """The HTTP/SSE application serving one agent.

    :param config: a validated :class:`~koboi.config.AgentConfig`, or the path of a YAML
        config (its ``.env`` is loaded first).
    :param extra_tools: tools of the application, offered beside ``tools.builtin``.
    :param extra_routes: routers added to the app. Those under ``/v1`` need a key like
        every ``/v1`` route; ``Depends(koboi_server.current_principal)`` says for whom.
    :param approver: decides on tool calls that need approval instead of the HTTP
        approvals (``POST /v1/approvals/{id}`` then answers 409).
    :param settings: the ``server`` section to use (a model or a mapping of overrides of
        the config's section).
    :param host, store, provider, sandbox, interceptors: passed to the agent (tests,
        embedding); by default everything comes from the config and the plugins.
    """
    from koboi.agent import KoboiAgent
    from koboi.config import build_store, load_config, resolve_store_url, store_scheme
    from koboi.plugins import default_host

    plugin_host = host or default_host()
    catalog = plugin_host.catalog()
    agent_config = (
        load_config(Path(os.fspath(config)), catalog)
        if isinstance(config, str | os.PathLike)
        else config
    )
    if isinstance(settings, ServerSettings):
        server_settings = settings
    else:
        server_settings = load_settings(agent_config, settings)
    url = resolve_store_url(agent_config, catalog) if store is None else ""
    check_settings(server_settings, store_scheme(url) if url else None)
    the_store = store or build_store(url, agent_config.base_dir, catalog)

    hub = Hub()
    book = ApprovalBook(the_store, retention_seconds=server_settings.approval_retention_seconds)
    keys = KeyRing(the_store)
    registry = RunRegistry(hub, server_settings, book)
    the_approver = approver or ServerApprover(
        book, poll_seconds=server_settings.poll_seconds, on_wait=registry.waiting_for_approval
    )
    agent = KoboiAgent(
        agent_config,
        host=plugin_host,
        approver=the_approver,
        extra_tools=extra_tools,
        provider=provider,
        store=the_store,
        sandbox=sandbox,
        interceptors=[*interceptors, registry.observer()],
    )
    registry.bind(agent)
    dispatcher = server_settings.webhooks.dispatcher(the_store)
    runner: JobRunner | None = None
    if server_settings.run_jobs:
        from koboi_server.jobs import JobRunner

        runner = JobRunner(
            agent_config,
            approver=the_approver,
            lease_seconds=server_settings.job_lease_seconds,
            poll_seconds=server_settings.job_poll_seconds,
            outbox=_job_finished_outbox(server_settings, dispatcher),
            on_finished=_wake(dispatcher),
            store=the_store,
            host=plugin_host,
            extra_tools=extra_tools,
            sandbox=None,
            interceptors=[*interceptors, _JobCommits(hub)],
        )
    state = ServerState(
        config=agent_config,
        settings=server_settings,
        agent=agent,
        store=the_store,
        hub=hub,
        registry=registry,
        book=book,
        keys=keys,
        approvals_over_http=approver is None,
        approver_name=the_approver.name,
        webhooks=dispatcher,
        runner=runner,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        job_runner = state.runner
        async with agent, AsyncExitStack() as stack:
            if job_runner is not None:
                # The runner's agent shares the app's open store (it never closes it).
                try:
                    await stack.enter_async_context(job_runner)
                except KoboiError as exc:
                    # The C3 rule: jobs run unattended, so a destructive tool without an
                    # isolating sandbox keeps this server from running them (chat goes on).
                    log.error("jobs are refused on this server: %s", exc)
                    state.jobs_refused = str(exc)
                    job_runner = state.runner = None
            tg = await stack.enter_async_context(anyio.create_task_group())
            registry.attach(tg)
            stop_watching = _drain_on_signals(registry)
            tg.start_soon(_watch_drain_requests, registry, job_runner)
            await tg.start(dispatcher.run)
            if job_runner is not None:
                for _ in range(server_settings.job_workers):
                    tg.start_soon(_run_jobs, job_runner, state)
            if server_settings.resume_interrupted:
                tg.start_soon(registry.recover_forever, server_settings.recovery_interval_seconds)
            tg.start_soon(_purge_forever, the_store, server_settings.purge_interval_seconds)
            if server_settings.dev_no_auth:
                log.warning(
                    "dev_no_auth is on: requests without a key act as principal 'dev'. Never "
                    "use this on a shared machine."
                )
            try:
                yield
            finally:
                stop_watching()
                with anyio.CancelScope(shield=True):
                    if job_runner is not None:
                        job_runner.begin_drain()  # claim nothing more while the chats drain
                    await registry.drain(registry.drain_time_left())
                    if job_runner is not None:
                        await job_runner.drain(registry.drain_time_left())
                tg.cancel_scope.cancel()

    app = FastAPI(
        title=f"koboi: {agent_config.agent.name}",
        version=_version(),
        description="The HTTP/SSE API of a koboi agent (koboi-server). Errors are always "
        '`{"error": {"code", "message"}}`. See docs/server.md.',
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        lifespan=lifespan,
    )
    app.state.koboi = state
    app.include_router(api.health)
    app.include_router(api.v1)
    app.include_router(jobs_api.jobs)
    routers = [extra_routes] if isinstance(extra_routes, APIRouter) else list(extra_routes or ())
    for router in routers:
        app.include_router(router)
    _install_error_handlers(app)
    app.add_middleware(AuthMiddleware, keys=lambda: keys, dev_no_auth=server_settings.dev_no_auth)
    # Added last: outermost, so a body over the limit is refused before anything else.
    app.add_middleware(BodyLimitMiddleware, limit=server_settings.max_body_bytes)
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("koboi-server")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


# -- errors -------------------------------------------------------------------------------


def _install_error_handlers(app: FastAPI) -> None:
    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers or None)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        status = exc.status_code
        if status == 404:
            message = f"no route {request.method} {request.url.path}"
        elif status == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return JSONResponse(
            envelope(code_for_status(status), message),
            status_code=status,
            headers=dict(exc.headers) if exc.headers else None,
        )

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = list(exc.errors())
        code = "invalid_json" if any(e.get("type") == "json_invalid" for e in errors) else None
        return JSONResponse(
            envelope(code or "invalid_request", describe_validation(errors)), status_code=422
        )

    async def session_missing(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(envelope("not_found", "no such session"), status_code=404)

    async def store_error(request: Request, exc: Exception) -> JSONResponse:
        log.warning("store error on %s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(
            envelope("store_unavailable", "the store failed; try again"),
            status_code=503,
            headers={"Retry-After": "2"},
        )

    async def koboi_error(request: Request, exc: Exception) -> JSONResponse:
        log.warning("refused %s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(envelope("refused", str(exc)), status_code=409)

    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        request_id = new_request_id()
        log.error(
            "internal error %s on %s %s",
            request_id,
            request.method,
            request.url.path,
            exc_info=exc,
        )
        return JSONResponse(
            envelope(
                "internal_error",
                f"internal error (request {request_id}); the server log has the details",
            ),
            status_code=500,
        )

    handlers: list[tuple[type[Exception], Callable[..., Any]]] = [
        (ApiError, api_error),
        (StarletteHTTPException, http_error),
        (RequestValidationError, validation_error),
        (SessionNotFound, session_missing),
        (StoreError, store_error),
        (KoboiError, koboi_error),
        (Exception, internal_error),
    ]
    for exc_class, handler in handlers:
        app.add_exception_handler(exc_class, handler)


# -- SIGTERM: drain ------------------------------------------------------------------------


def _drain_on_signals(registry: RunRegistry) -> Callable[[], None]:
    """Chain a drain request to SIGTERM/SIGINT (whoever handles them: uvicorn, a worker).

    The handler only sets a flag (nothing else is safe in a signal handler);
    :func:`_watch_drain_requests` acts on it.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        registry.drain_requested = True
        chained = previous.get(signum)
        if callable(chained):
            chained(signum, frame)
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt

    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.getsignal(signum)
        signal.signal(signum, handler)

    def restore() -> None:
        for signum, old in previous.items():
            if signal.getsignal(signum) is handler:
                signal.signal(signum, old)

    return restore


async def _watch_drain_requests(registry: RunRegistry, runner: JobRunner | None) -> None:
    # A signal handler may only set a flag; this turns it into the drain (a 0.1 s poll:
    # waking an anyio.Event from a signal handler is not safe).
    while True:
        if registry.drain_requested:
            registry.begin_drain()
            if runner is not None:
                runner.begin_drain()
            return
        await anyio.sleep(0.1)


# -- jobs -----------------------------------------------------------------------------------


async def _run_jobs(runner: JobRunner, state: ServerState) -> None:
    """One job worker: claim a job, run it, repeat; stops when the runner drains."""
    while not runner.draining:
        try:
            job = await runner.run_one()
        except Exception:
            # A store that fails now may answer later: a worker never takes the server down.
            log.exception("running a job failed")
            job = None
            await anyio.sleep(state.settings.job_poll_seconds)
        if job is None and not runner.draining:
            await state.wait_for_job(state.settings.job_poll_seconds)


async def _purge_forever(store: Store, interval: float) -> None:
    """Delete expired store rows now and then (every replica may: the deletes are idempotent)."""
    while True:
        try:
            removed = await store.purge_expired()
        except KoboiError as exc:
            log.warning("purging expired store rows failed (retried later): %s", exc)
        else:
            if removed:
                log.info("purged %d expired store rows", removed)
        await anyio.sleep(interval)


class _JobCommits(Interceptor):
    """Wakes the streams of a job's session on this replica at each commit (others poll)."""

    name = "server-jobs"
    priority = 10_000

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    async def on_event(self, event: JournalEvent, run: RunInfo) -> None:
        self.hub.committed(run.session_id, event.seq)


#: Longest job output sent in a job.finished body (the whole result is at GET /v1/jobs/{id}).
_WEBHOOK_OUTPUT_CHARS = 16_000


def _job_finished_outbox(
    settings: ServerSettings, dispatcher: WebhookDispatcher
) -> Callable[[Job], Awaitable[list[RecordWrite]]]:
    """The job.finished deliveries of a job about to be finished, as records for the
    runner to store in the same transaction as the job's final status."""

    async def job_finished(job: Job) -> list[RecordWrite]:
        result = dict(job.result or {})
        output = result.get("output")
        if isinstance(output, str) and len(output) > _WEBHOOK_OUTPUT_CHARS:
            result["output"] = output[:_WEBHOOK_OUTPUT_CHARS]
            result["output_truncated"] = True
        payload = {
            "job_id": job.id,
            "session_id": job.session_id,
            "status": job.status,
            "result": result,
        }
        targets: list[tuple[str, list[str]]] = [
            (endpoint.url, endpoint.secret_values())
            for endpoint in settings.webhooks.endpoints_for("job.finished")
        ]
        own = job.request.get("webhook")
        if isinstance(own, dict) and own.get("url") and own.get("secret"):
            targets.append((str(own["url"]), [str(own["secret"])]))
        records: list[RecordWrite] = []
        for url, secrets in targets:
            try:
                _, prepared = await dispatcher.prepare(
                    url,
                    secrets,
                    "job.finished",
                    payload,
                    metadata={"owner": job.owner, "job_id": job.id},
                )
            except Exception as exc:
                log.warning("job %s: webhook to %s not queued: %s", job.id, url, exc)
                continue
            records.extend(prepared)
        return records

    return job_finished


def _wake(dispatcher: WebhookDispatcher) -> Callable[[Job], Awaitable[None]]:
    async def wake(job: Job) -> None:
        dispatcher.wake()

    return wake
