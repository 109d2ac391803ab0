"""What a plugin adds to ``koboi serve``: routes and metrics, through the plugin hook
``koboi_server_register_extensions`` (:mod:`koboi_server.hookspecs`).

A plugin registers a factory; each app built by ``create_app`` calls it with a
:class:`ServerContext` and mounts the :class:`ServerExtension` it returns:

- ``router``: a FastAPI ``APIRouter``. Every route must be under ``/v1/``, where the
  server's authentication applies (401 without a valid key, the principal in
  ``Depends(current_principal)``), unless its path is listed in ``public_paths``
  (an agent card, a login page). A route whose method and path the server (or
  another extension) already serves is refused. Ownership: resolve a session with
  ``await owned_session(request, session_id)``, which answers 404 for anyone else's,
  exactly as the server's own routes do.
- ``collectors``: Prometheus collectors added to the server's ``/metrics``
  (when ``server.metrics.enabled``).
- ``scope``: the scope a key needs to call the extension's ``/v1/`` routes
  (:mod:`koboi_server.keys`): ``api`` (the default: only keys of the whole API), or
  a narrower one, such as ``invoke`` for routes that only run the agent, which a
  key limited to that scope may call and nothing else.

Anything wrong (a route outside ``/v1/`` not declared public, a clash, a factory
that raises) stops the app from being built, in one line naming the plugin.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# At run time: FastAPI reads the annotation of current_principal's parameter.
from fastapi import Request

from koboi.errors import KoboiError, RegistrationError
from koboi_server.errors import ApiError
from koboi_server.hookspecs import EXTENSION_KIND, REGISTER_EXTENSIONS
from koboi_server.keys import FULL_SCOPE, check_scopes

if TYPE_CHECKING:
    from fastapi import APIRouter, FastAPI

    from koboi.agent import KoboiAgent
    from koboi.config import AgentConfig
    from koboi.plugins import PluginHost
    from koboi.registry import Registration
    from koboi.store import SessionInfo, Store
    from koboi.tracing import TraceContext
    from koboi_server.keys import Principal
    from koboi_server.runs import ActiveRun
    from koboi_server.settings import ServerSettings
    from koboi_server.sse import SessionStream
    from koboi_server.state import ServerState

__all__ = [
    "ServerContext",
    "ServerExtension",
    "current_principal",
    "owned_session",
    "run_stream",
    "server_state",
    "start_chat",
]


@dataclass(frozen=True)
class ServerContext:
    """What an extension's factory is given: the app's config, settings, agent and store."""

    config: AgentConfig
    settings: ServerSettings
    agent: KoboiAgent
    store: Store
    host: PluginHost


@dataclass(frozen=True)
class ServerExtension:
    """What one plugin adds to an app."""

    router: APIRouter | None = None
    #: Paths of ``router`` outside ``/v1/`` that anyone may call without a key.
    public_paths: Sequence[str] = ()
    #: Prometheus collectors for ``/metrics`` (``prometheus_client.registry.Collector``).
    collectors: Sequence[Any] = field(default_factory=tuple)
    #: The scope a key needs for ``router``'s ``/v1/`` routes (a key with ``api`` has all).
    scope: str = FULL_SCOPE
    #: The JSON body of the errors the server answers on ``router``'s paths itself —
    #: before a route runs (401, 403, 413, 503 of the key check and the body limit) or
    #: from its handlers (a route's :class:`~koboi_server.errors.ApiError`, 405, 422) —
    #: for an API whose clients expect another shape than koboi's envelope. Given the
    #: error (``status``, ``code``, ``message``, ``headers``, ``extra``); None: koboi's.
    error_body: Callable[[ApiError], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Mounted:
    name: str
    plugin: str
    extension: ServerExtension


def current_principal(request: Request) -> Principal:
    """Dependency: the principal of the request's key (401 when there is none)."""
    from koboi_server.api import principal_of

    return principal_of(request)


async def owned_session(request: Request, session_id: str) -> SessionInfo:
    """The caller's session ``session_id``, or 404 ``not_found`` (also for anyone else's)."""
    from koboi_server.api import owned_session as owned
    from koboi_server.api import principal_of, state_of

    return await owned(state_of(request), session_id, principal_of(request))


def server_state(request: Request) -> ServerState:
    """What the app's routes share: its store, runs (``registry``), approvals (``book``),
    keys, settings (:class:`koboi_server.state.ServerState`)."""
    from koboi_server.api import state_of

    return state_of(request)


async def start_chat(
    request: Request,
    message: str,
    *,
    session_id: str | None = None,
    create: bool = False,
    trace: TraceContext | None = None,
) -> tuple[SessionInfo, ActiveRun]:
    """Start a run of ``message`` for the request's principal, as ``POST /v1/chat`` does: in
    the caller's session ``session_id`` (404 for anyone else's), in a new session with that
    id when ``create``, else in a new session. Returns the session (as it was before the
    run) and the run, which executes in the server's task group: it goes on whatever
    happens to the request. Its limits, busy sessions and a draining server raise
    :class:`koboi_server.errors.ApiError` (429, 409, 503), and a refused run creates
    nothing."""
    from koboi_server.api import principal_of, start_run, state_of

    return await start_run(
        state_of(request),
        principal_of(request),
        message,
        session_id,
        create=create,
        trace=trace,
    )


def run_stream(request: Request, session: SessionInfo, *, after: int) -> SessionStream:
    """The events of ``session``'s run that begins after journal event ``after`` (the
    session's ``last_seq`` before :func:`start_chat`), as ``POST /v1/chat/stream`` sends
    them: ``SessionStream.frames()`` yields the SSE bytes, ending at the run's ``final``
    (or an ``error``), with ``: keepalive`` comments and the key re-checked as there."""
    from koboi_server.api import principal_of, session_stream, state_of

    return session_stream(
        state_of(request), request, principal_of(request), session, after=after, mode="run"
    )


def collect(host: PluginHost, context: ServerContext) -> list[Mounted]:
    """Call every registered extension factory; the extensions to mount, in plugin order."""
    if host.hook_owner(REGISTER_EXTENSIONS) is None:
        return []
    registry = host.collect(REGISTER_EXTENSIONS, kind=EXTENSION_KIND, validate=_callable)
    mounted = []
    for entry in registry:
        try:
            made = entry.target(context)
        except KoboiError:
            raise
        except Exception as exc:  # a plugin's bug: the app is not built without its routes
            raise KoboiError(
                f"{EXTENSION_KIND} {entry.name!r} of plugin {entry.plugin!r} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if made is None:
            continue
        if not isinstance(made, ServerExtension):
            raise KoboiError(
                f"{EXTENSION_KIND} {entry.name!r} of plugin {entry.plugin!r} returned "
                f"{made!r}, not a koboi_server.extensions.ServerExtension"
            )
        mounted.append(Mounted(entry.name, entry.plugin, made))
    return mounted


def _leaves(routes: Sequence[Any]) -> list[Any]:
    """Every route, into the routers included (FastAPI keeps an included router as one
    entry of the app's routes)."""
    found: list[Any] = []
    for route in routes:
        included = getattr(route, "original_router", None)
        found += _leaves(included.routes) if included is not None else [route]
    return found


def _routes(routes: Sequence[Any]) -> list[tuple[str, str]]:
    """``(method, path)`` of every route."""
    return [
        (method, str(getattr(route, "path", "")))
        for route in _leaves(routes)
        for method in getattr(route, "methods", None) or ()
    ]


class ErrorBodies:
    """The body of an error answered on a path: an extension's own shape on its routes
    (``ServerExtension.error_body``), koboi's envelope elsewhere."""

    def __init__(self) -> None:
        self._shapes: list[tuple[re.Pattern[str], Callable[[ApiError], dict[str, Any]]]] = []

    def add(self, pattern: re.Pattern[str], shape: Callable[[ApiError], dict[str, Any]]) -> None:
        self._shapes.append((pattern, shape))

    def __call__(self, path: str, error: ApiError) -> dict[str, Any]:
        for pattern, shape in self._shapes:
            if pattern.match(path):
                return shape(error)
        return error.body()


def mount(
    app: FastAPI, extensions: Sequence[Mounted], bodies: ErrorBodies | None = None
) -> frozenset[str]:
    """Add the extensions' routers to ``app`` (after the checks); their public paths.
    The error shapes of their routes go to ``bodies``."""
    taken = set(_routes(app.routes))
    public: set[str] = set()
    for found in extensions:
        router = found.extension.router
        if router is None:
            continue
        who = f"{EXTENSION_KIND} {found.name!r} of plugin {found.plugin!r}"
        declared = set(found.extension.public_paths)
        try:
            check_scopes([found.extension.scope])
        except KoboiError as exc:
            raise KoboiError(f"{who}: {exc}") from None
        shape = found.extension.error_body
        if shape is not None and bodies is not None:
            for route in _leaves(router.routes):
                pattern = getattr(route, "path_regex", None)
                if pattern is not None:
                    bodies.add(pattern, shape)
        for method, path in _routes(router.routes):
            if not (path.startswith("/v1/") or path in declared):
                raise KoboiError(
                    f"{who}: route {path!r} is outside /v1/, where API keys are checked; "
                    "move it under /v1/ or list it in public_paths if anyone may call it"
                )
            if path in declared and path.startswith("/v1"):
                raise KoboiError(f"{who}: {path!r} is under /v1/, which is never public")
            if (method, path) in taken:
                raise KoboiError(f"{who}: {method} {path} is already served")
            taken.add((method, path))
        public |= declared
        app.include_router(router)
    return frozenset(public)


def route_scopes(extensions: Sequence[Mounted]) -> list[tuple[re.Pattern[str], str]]:
    """The path patterns of the extensions' routes that need a scope other than ``api``."""
    from starlette.routing import compile_path

    found: list[tuple[re.Pattern[str], str]] = []
    for mounted in extensions:
        router = mounted.extension.router
        if router is None or mounted.extension.scope == FULL_SCOPE:
            continue
        paths = {path for _, path in _routes(router.routes) if path.startswith("/v1/")}
        found += [(compile_path(path)[0], mounted.extension.scope) for path in sorted(paths)]
    return found


def scope_of(path: str, scoped: Sequence[tuple[re.Pattern[str], str]]) -> str:
    """The scope a request to ``path`` needs: an extension's, else the whole API's."""
    for pattern, scope in scoped:
        if pattern.match(path):
            return scope
    return FULL_SCOPE


def _callable(entry: Registration[Any]) -> None:
    if not callable(entry.target):
        raise RegistrationError(
            f"{EXTENSION_KIND} {entry.name!r} of plugin {entry.plugin!r}: the factory is "
            f"{entry.target!r}, not callable"
        )
