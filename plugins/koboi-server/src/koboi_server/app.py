"""``create_app``: the FastAPI application of one agent.

::

    from koboi_server import create_app

    app = create_app("agent.yaml")                 # then: uvicorn module:app
    app = create_app("agent.yaml", extra_tools=[my_tool], extra_routes=[my_router])

The app opens the agent (its store, provider, sandbox, tools) in its lifespan
and closes it at shutdown, after draining the runs in progress.
"""

from __future__ import annotations

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

from koboi import journal as J
from koboi.errors import KoboiError, SessionNotFound, StoreError
from koboi.interceptors import Interceptor, RunInfo
from koboi.logs import get_logger
from koboi_server import api, jobs_api
from koboi_server.approvals import ApprovalBook, ServerApprover
from koboi_server.errors import (
    ApiError,
    ErrorBody,
    code_for_status,
    describe_validation,
    koboi_body,
    new_request_id,
)
from koboi_server.hub import Hub
from koboi_server.keys import KeyRing
from koboi_server.middleware import AuthMiddleware, BodyLimitMiddleware
from koboi_server.outages import LoopErrors, StoreOutage, supervised
from koboi_server.principals import PrincipalGate
from koboi_server.runs import RunRegistry, announce_child_event, forward
from koboi_server.settings import SECTION, ServerSettings, is_loopback
from koboi_server.state import ServerState, store_capabilities

if TYPE_CHECKING:
    from koboi.approval import Approver
    from koboi.config import AgentConfig
    from koboi.events import AgentEvent
    from koboi.plugins import PluginHost
    from koboi.provider import ModelProvider
    from koboi.sandbox import Sandbox
    from koboi.store import Job, JournalEvent, KeyedRecords, RecordWrite, Store
    from koboi.tools import Tool
    from koboi_server.jobs import JobRunner
    from koboi_server.metrics import ServerMetrics
    from koboi_server.webhooks.dispatcher import WebhookDispatcher
    from koboi_server.webhooks.settings import WebhookSettings

log = get_logger("koboi.server")


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
    if settings.workers > 1 and settings.metrics.enabled and settings.metrics.port is not None:
        raise KoboiError(
            "server.metrics.port serves one process's metrics on one port, so it needs "
            "workers: 1; with several workers, leave server.metrics.port unset (each worker "
            "then answers /metrics on the API's port, with an API key)"
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
    extra_hooks: Sequence[Interceptor] = (),
    approval_handler: Approver | None = None,
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
    :param extra_hooks, approval_handler: koboi-agent's names of ``interceptors`` (added
        after them) and ``approver`` (give one of the two).
    """
    if approval_handler is not None:
        if approver is not None:
            raise TypeError("create_app: give approver or approval_handler, not both")
        approver = approval_handler
    interceptors = [*interceptors, *extra_hooks]
    from koboi.agent import KoboiAgent
    from koboi.config import build_store, load_config, resolve_store, store_scheme
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
    url, base_dir = resolve_store(agent_config, catalog) if store is None else ("", Path())
    check_settings(server_settings, store_scheme(url) if url else None)
    the_store = store or build_store(url, base_dir, catalog)
    # One line, before anything is built, when the store lacks what the server keeps.
    records, queue = store_capabilities(the_store)

    metrics: ServerMetrics | None = None
    observers: list[Interceptor] = []
    if server_settings.metrics.enabled:
        from koboi_server.metrics import ServerMetrics, outcome_observer

        metrics = ServerMetrics()
        observers.append(outcome_observer(metrics))
    hub = Hub()
    #: One for the background loops: a store outage is logged once, not by each loop.
    outage = StoreOutage()
    book = ApprovalBook(the_store, retention_seconds=server_settings.approval_retention_seconds)
    keys = KeyRing(the_store)
    registry = RunRegistry(hub, server_settings, book, outage=outage)
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
        interceptors=[*interceptors, registry.observer(), *observers],
    )
    registry.bind(agent)
    dispatcher = server_settings.webhooks.dispatcher(the_store, host=plugin_host)
    dispatcher.outage = outage
    outbox = _job_outbox(server_settings, dispatcher)
    runner: JobRunner | None = None
    if server_settings.run_jobs:
        from koboi_server.jobs import JobRunner

        runner = JobRunner(
            agent_config,
            approver=the_approver,
            lease_seconds=server_settings.job_lease_seconds,
            poll_seconds=server_settings.job_poll_seconds,
            outbox=outbox,
            on_finished=_wake(dispatcher, hub),
            store=the_store,
            watcher=_HubWatcher(hub),
            outage=outage,
            host=plugin_host,
            extra_tools=extra_tools,
            sandbox=None,
            interceptors=[*interceptors, _JobCommits(hub, book), *observers],
        )
    state = ServerState(
        config=agent_config,
        settings=server_settings,
        agent=agent,
        store=the_store,
        records=records,
        jobs=queue,
        hub=hub,
        registry=registry,
        book=book,
        keys=keys,
        approvals_over_http=approver is None,
        approver_name=the_approver.name,
        webhooks=dispatcher,
        runner=runner,
        job_outbox=outbox,
        outage=outage,
    )

    # What plugins add (koboi_server_register_extensions): built now, so a bad one stops
    # the app from being built rather than failing its first request.
    from koboi_server import extensions

    added = extensions.collect(
        plugin_host,
        extensions.ServerContext(agent_config, server_settings, agent, the_store, plugin_host),
    )
    if metrics is not None:
        for found in added:
            for collector in found.extension.collectors:
                metrics.registry.register(collector)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        job_runner = state.runner
        # Endpoint URLs that need DNS are checked now (the rest when the config loaded):
        # a refused address stops the start.
        await check_webhook_endpoints(server_settings.webhooks, dispatcher)
        async with agent, AsyncExitStack() as stack:
            gate = PrincipalGate(
                lambda: keys,
                sessions_isolated=agent.sandbox.isolates_sessions,
                shared_sandbox=server_settings.shared_sandbox,
                sandbox=agent.sandbox.name,
            )
            await gate.check_start()  # several principals on a shared sandbox: no start
            state.gate = gate
            if job_runner is not None:
                # The runner's agent shares the app's open store (it never closes it).
                try:
                    await stack.enter_async_context(job_runner)
                except KoboiError as exc:
                    # The unattended-destruction rule: jobs run unattended, so a destructive tool without an
                    # isolating sandbox keeps this server from running them (chat goes on).
                    log.error("jobs are refused on this server: %s", exc)
                    state.jobs_refused = str(exc)
                    job_runner = state.runner = None
            tg = await stack.enter_async_context(anyio.create_task_group())
            registry.attach(tg)
            stop_watching = _drain_on_signals(registry)
            # Every background loop runs under supervised(): one that escapes is logged and
            # restarted, never allowed to end the lifespan (and close the store under the
            # requests uvicorn goes on serving).
            tg.start_soon(
                supervised, "drain watcher", outage, _watch_drain_requests, registry, job_runner
            )
            await tg.start(dispatcher.run)
            if job_runner is not None:
                for number in range(1, server_settings.job_workers + 1):
                    tg.start_soon(
                        supervised,
                        f"job worker {number}",
                        outage,
                        _run_jobs,
                        job_runner,
                        state,
                        number,
                    )
            if server_settings.resume_interrupted:
                tg.start_soon(
                    supervised,
                    "recovery",
                    outage,
                    registry.recover_forever,
                    server_settings.recovery_interval_seconds,
                )
            tg.start_soon(
                supervised,
                "purge",
                outage,
                _purge_forever,
                records,
                server_settings.purge_interval_seconds,
                outage,
            )
            if metrics is not None:
                _serve_metrics(metrics, state, tg, stack)
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
    bodies = extensions.ErrorBodies()
    extensions.mount(app, added, bodies)
    scoped = extensions.route_scopes(added)
    also_protected: frozenset[str] = frozenset()
    if metrics is not None and server_settings.metrics.port is None:
        from koboi_server.metrics import METRICS_PATH, metrics_response

        served = metrics

        @app.get(METRICS_PATH, include_in_schema=False)
        async def prometheus_metrics() -> Any:
            return metrics_response(served)

        also_protected = frozenset({METRICS_PATH})
    _install_error_handlers(app, bodies)
    app.add_middleware(
        AuthMiddleware,
        keys=lambda: keys,
        dev_no_auth=server_settings.dev_no_auth,
        gate=lambda: state.gate,
        also_protected=also_protected,
        scope_of=lambda path: extensions.scope_of(path, scoped),
        error_body=bodies,
    )
    # Added last: outermost, so a body over the limit is refused before anything else.
    app.add_middleware(BodyLimitMiddleware, limit=server_settings.max_body_bytes, error_body=bodies)
    if metrics is not None:
        from koboi_server.metrics import RequestMetrics

        app.add_middleware(RequestMetrics, metrics=metrics)  # counts every answer, 401s too
    if server_settings.log_format == "json":
        from koboi_server.json_logs import RequestIds

        app.add_middleware(RequestIds)
    return app


def _serve_metrics(
    metrics: ServerMetrics, state: ServerState, tg: Any, stack: AsyncExitStack
) -> None:
    """The metrics' background refresh, and their port when they have one of their own."""
    from koboi_server.metrics import refresh_forever, serve_on_port

    settings = state.settings.metrics
    tg.start_soon(
        supervised,
        "metrics",
        state.outage,
        refresh_forever,
        metrics,
        state,
        settings.refresh_seconds,
    )
    if settings.port is not None:
        stack.callback(serve_on_port(metrics, settings.host, settings.port))
        log.info("metrics at http://%s:%d/metrics", settings.host, settings.port)


def _version() -> str:
    from koboi_server._version import __version__

    return __version__


# -- errors -------------------------------------------------------------------------------


def _install_error_handlers(app: FastAPI, bodies: ErrorBody = koboi_body) -> None:
    def answer(request: Request, error: ApiError) -> JSONResponse:
        return JSONResponse(
            bodies(request.url.path, error),
            status_code=error.status,
            headers=error.headers or None,
        )

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return answer(request, exc)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        status = exc.status_code
        if status == 404:
            message = f"no route {request.method} {request.url.path}"
        elif status == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        headers = dict(exc.headers) if exc.headers else None
        return answer(request, ApiError(status, code_for_status(status), message, headers=headers))

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = list(exc.errors())
        code = "invalid_json" if any(e.get("type") == "json_invalid" for e in errors) else None
        return answer(
            request, ApiError(422, code or "invalid_request", describe_validation(errors))
        )

    async def session_missing(request: Request, exc: Exception) -> JSONResponse:
        return answer(request, ApiError(404, "not_found", "no such session"))

    async def store_error(request: Request, exc: Exception) -> JSONResponse:
        log.warning("store error on %s %s: %s", request.method, request.url.path, exc)
        return answer(
            request,
            ApiError(
                503,
                "store_unavailable",
                "the store failed; try again",
                headers={"Retry-After": "2"},
            ),
        )

    async def koboi_error(request: Request, exc: Exception) -> JSONResponse:
        log.warning("refused %s %s: %s", request.method, request.url.path, exc)
        return answer(request, ApiError(409, "refused", str(exc)))

    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        request_id = new_request_id()
        log.error(
            "internal error %s on %s %s",
            request_id,
            request.method,
            request.url.path,
            exc_info=exc,
        )
        return answer(
            request,
            ApiError(
                500,
                "internal_error",
                f"internal error (request {request_id}); the server log has the details",
            ),
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


async def _run_jobs(runner: JobRunner, state: ServerState, number: int = 1) -> None:
    """One job worker: claim a job, run it, repeat; stops when the runner drains.

    A store that fails is retried every ``job_poll_seconds``, said once for the whole
    outage (:class:`~koboi_server.outages.StoreOutage`); another error is logged with
    its traceback, once while it repeats.
    """
    errors = LoopErrors(f"job worker {number}", state.outage)
    while not runner.draining:
        try:
            job = await runner.run_one(errors=errors)
        except Exception as exc:  # a worker never takes the server down: logged, retried
            errors.failed(exc)
            job = None
            await anyio.sleep(state.settings.job_poll_seconds)
        if job is None and not runner.draining:
            await state.wait_for_job(state.settings.job_poll_seconds)


async def _purge_forever(records: KeyedRecords, interval: float, outage: StoreOutage) -> None:
    """Delete expired store rows now and then (every replica may: the deletes are idempotent)."""
    errors = LoopErrors("purging expired store rows", outage)
    while True:
        try:
            removed = await records.purge_expired()
        except Exception as exc:  # the purge is housekeeping: logged, retried at the next pass
            errors.failed(exc)
        else:
            errors.ok()
            if removed:
                log.info("purged %d expired store rows", removed)
        await anyio.sleep(interval)


class _JobCommits(Interceptor):
    """Wakes the streams of a job's session on this replica at each commit (others poll),
    and announces there the approvals of its child runs."""

    name = "server-jobs"
    priority = 10_000

    def __init__(self, hub: Hub, book: ApprovalBook) -> None:
        self.hub = hub
        self.book = book

    async def on_event(self, event: JournalEvent, run: RunInfo) -> None:
        if run.parent is not None:
            try:
                await announce_child_event(self.hub, self.book, event, run)
            except Exception as exc:  # an observer never stops the run; it is logged
                log.warning(
                    "announcing %s of child session %s: %s", event.type, run.session_id, exc
                )
            return
        step = (
            J.MODEL_CALL_STARTED.of(event)["step"] if event.type == J.MODEL_CALL_STARTED else None
        )
        self.hub.committed(run.session_id, event.seq, model_call_step=step)


class _HubWatcher:
    """Feeds the hub with what a job's run does, so its streams get text and live events
    as a chat's do (on this replica)."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    def run_started(self, session_id: str) -> None:
        self.hub.run_started(session_id)

    def run_event(self, session_id: str, event: AgentEvent) -> None:
        forward(self.hub, session_id, event)

    def run_ended(self, session_id: str) -> None:
        self.hub.run_ended(session_id)


async def check_webhook_endpoints(settings: WebhookSettings, dispatcher: WebhookDispatcher) -> None:
    """Resolve the configured endpoints' hosts and check their addresses (the start-up half
    of the check; what needs no DNS was checked when the config loaded).

    A refused address is a :class:`KoboiError` naming the endpoint's key path (the
    server does not start); a name that does not resolve now is logged — DNS may be
    back by the first delivery, which checks again.
    """
    from koboi_server.webhooks.errors import WebhookHostUnresolved, WebhookURLRefused

    for index, endpoint in enumerate(settings.endpoints):
        path = f"server.webhooks.endpoints.{index}.url"
        try:
            # A resolver that does not answer must not hold the start: bounded like a
            # delivery's connection.
            with anyio.fail_after(settings.connect_timeout):
                await dispatcher.check_url(endpoint.url)
        except WebhookHostUnresolved as exc:
            log.warning("%s: %s (checked again before each delivery)", path, exc)
        except TimeoutError:
            log.warning(
                "%s: its host did not resolve within %s s (checked again before each delivery)",
                path,
                settings.connect_timeout,
            )
        except WebhookURLRefused as exc:
            raise KoboiError(f"{path}: {exc}") from None


#: Longest job output sent in a job.finished body (the whole result is at GET /v1/jobs/{id}).
_WEBHOOK_OUTPUT_CHARS = 16_000


def _job_outbox(
    settings: ServerSettings, dispatcher: WebhookDispatcher
) -> Callable[[Job], Awaitable[list[RecordWrite]]]:
    """The webhook deliveries of a job about to change status, as records for the runner to
    store in the same transaction as that status: ``job.finished`` for a final status,
    ``job.waiting_input`` for a job whose run suspended (with what it waits for)."""

    async def deliveries(job: Job) -> list[RecordWrite]:
        if job.status == "waiting_input":
            event_type = "job.waiting_input"
            suspension = (job.result or {}).get("suspension")
            payload: dict[str, Any] = {
                "job_id": job.id,
                "session_id": job.session_id,
                "status": job.status,
                "suspension": suspension,
            }
        elif job.done:
            event_type = "job.finished"
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
        else:
            return []
        targets: list[tuple[str, list[str]]] = [
            (endpoint.url, endpoint.secret_values())
            for endpoint in settings.webhooks.endpoints_for(event_type)
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
                    event_type,
                    payload,
                    metadata={"owner": job.owner, "job_id": job.id},
                )
            except Exception as exc:  # one receiver's problem must not hold the job's status
                log.warning("job %s: webhook to %s not queued: %s", job.id, url, exc)
                continue
            records.extend(prepared)
        return records

    return deliveries


def _wake(dispatcher: WebhookDispatcher, hub: Hub) -> Callable[[Job], Awaitable[None]]:
    async def wake(job: Job) -> None:
        dispatcher.wake()
        # Whoever follows the job's session (a route waiting for the job to settle)
        # reads its new status now rather than at its next poll.
        hub.wake(job.session_id)

    return wake
