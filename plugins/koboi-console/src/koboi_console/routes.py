"""The console's routes, mounted on ``koboi serve`` as a server extension.

The pages live under ``/console``, outside ``/v1``: a browser cannot send
``Authorization: Bearer``, so the server's key check does not apply there and
the console declares them ``public_paths``. Every one of them but the login page
and the static files authenticates the browser itself, with the login cookie
(:mod:`koboi_console.logins`), to the same :class:`~koboi_server.keys.Principal`
the key would give, passed through the server's principal gate; then it calls the
server's own route functions with that principal — the same ownership checks,
approval decisions, job submission and event stream as the API, not a second
implementation of them. Something of another principal is answered exactly as
something that does not exist (404).

Every form carries the login's CSRF token (the login form a token of its own,
double-submitted in a cookie), and a cross-site form post is refused before the
token is even looked at.
"""

from __future__ import annotations

import hmac
import json
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse

from koboi.errors import StoreError
from koboi.logs import get_logger
from koboi_console.logins import COOKIE, LOGIN_CSRF_COOKIE, Login, Logins, new_token
from koboi_console.pages import STATIC, render, secured, static_file
from koboi_console.settings import PREFIX, ConsoleSettings
from koboi_server import api, jobs_api
from koboi_server.errors import ApiError
from koboi_server.keys import Principal
from koboi_server.middleware import PRINCIPAL_KEY
from koboi_server.models import DecisionRequest, JobCreate, JobInput
from koboi_server.settings import is_loopback
from koboi_server.sse import frame

if TYPE_CHECKING:
    from koboi_server.extensions import ServerContext, ServerExtension
    from koboi_server.state import ServerState

log = get_logger("koboi.console")

#: The paths of the console (all outside /v1; each authenticates itself, see above).
PATHS = {
    "home": PREFIX,
    "login": f"{PREFIX}/login",
    "logout": f"{PREFIX}/logout",
    "static": f"{PREFIX}/static/{{name}}",
    "sessions": f"{PREFIX}/sessions",
    "session": f"{PREFIX}/sessions/{{session_id}}",
    "session_events": f"{PREFIX}/sessions/{{session_id}}/events",
    "audit": f"{PREFIX}/sessions/{{session_id}}/audit",
    "decide": f"{PREFIX}/approvals/{{approval_id}}",
    "jobs": f"{PREFIX}/jobs",
    "job": f"{PREFIX}/jobs/{{job_id}}",
    "job_status": f"{PREFIX}/jobs/{{job_id}}/status",
    "job_events": f"{PREFIX}/jobs/{{job_id}}/events",
    "job_cancel": f"{PREFIX}/jobs/{{job_id}}/cancel",
    "job_input": f"{PREFIX}/jobs/{{job_id}}/input",
}

#: Why the login page is shown (a code in its URL, so no one can put words on it).
LOGIN_REASONS = {
    "login": "Log in with an API key.",
    "revoked": "The API key of this login was revoked; log in with another one.",
    "bad_key": "That API key is not valid or was revoked.",
}

SESSION_STATUSES = ("created", "running", "completed", "failed", "interrupted", "cancelled")
JOB_STATUSES = ("queued", "running", "awaiting_approval", "waiting_input", "completed")


class _Refused(Exception):
    """A console request answered with a page instead of going on (a redirect, a 403)."""

    def __init__(self, response: Response) -> None:
        self.response = response


@dataclass(frozen=True)
class Visitor:
    """A logged-in browser: its principal (as the server knows it) and its login."""

    principal: Principal
    login: Login
    token: str


def _safe_next(target: str | None) -> str:
    """Where to go after a form: a console path only (never another site)."""
    odd = ("//", "\\", "..", "\r", "\n")
    if target and target.startswith(PREFIX + "/") and not any(o in target for o in odd):
        return target
    return f"{PREFIX}/sessions"


def _see_other(location: str) -> Response:
    return secured(RedirectResponse(location, status_code=303))


class Console:
    """The console of one app: its settings, its logins, and its handlers."""

    def __init__(self, context: ServerContext, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.logins = Logins(context.store, lifetime_seconds=settings.login_seconds)
        secure = settings.secure_cookie
        self.secure_cookie = not is_loopback(context.settings.host) if secure is None else secure
        self.agent_name = context.config.agent.name

    # -- who is asking -----------------------------------------------------------------

    async def visitor(self, request: Request) -> Visitor:
        """The logged-in principal of the request, or _Refused (to the login page, or 403)."""
        state = api.state_of(request)
        token = request.cookies.get(COOKIE)
        login = await self.logins.find(token)
        if login is None or token is None:
            raise _Refused(self._to_login(request, "login"))
        principal = await state.keys.active(login.key_id)
        if principal is None or principal.name != login.principal:
            await self.logins.close(token)
            raise _Refused(self._to_login(request, "revoked"))
        refused = await state.gate.admit(principal) if state.gate is not None else None
        if refused is not None:
            raise _Refused(self._page(request, "error.html", {"error": refused}, refused.status))
        # What the server's own dependencies read (current_principal, principal_of).
        request.scope[PRINCIPAL_KEY] = principal
        return Visitor(principal, login, token)

    def _to_login(self, request: Request, reason: str) -> Response:
        target = request.url.path
        page = request.method == "GET" and not target.endswith(("/events", "/status"))
        if not page or not target.startswith(PREFIX + "/"):
            target = f"{PREFIX}/sessions"  # a stream or a form: back to a page after login
        response = _see_other(f"{PATHS['login']}?next={quote(target)}&why={reason}")
        if request.cookies.get(COOKIE):
            self._clear(response, COOKIE)
        return response

    async def still_logged_in(self, visitor: Visitor, state: ServerState) -> bool:
        try:
            login = await self.logins.find(visitor.token)
            principal = await state.keys.active(visitor.login.key_id)
        except StoreError:
            return True  # cannot tell now; the next check will (as the server's streams do)
        return login is not None and principal is not None and principal.name == login.principal

    # -- forms ---------------------------------------------------------------------------

    async def form(self, request: Request, expected: str | None) -> dict[str, str]:
        """The fields of a form post whose CSRF token matches ``expected``, or _Refused (403)."""
        if request.headers.get("sec-fetch-site") == "cross-site":
            raise _Refused(self._forbidden(request, "a form posted from another site"))
        try:
            fields = await request.form()
        except Exception:  # an unreadable body is the client's problem, said in one line
            raise _Refused(self._forbidden(request, "the form could not be read")) from None
        values = {k: v for k, v in fields.items() if isinstance(v, str)}
        given = values.get("csrf_token", "")
        if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
            raise _Refused(
                self._forbidden(request, "the form's CSRF token is missing or wrong; reload it")
            )
        return values

    def _forbidden(self, request: Request, why: str) -> Response:
        error = ApiError(403, "csrf_refused", f"refused: {why}")
        return self._page(request, "error.html", {"error": error}, 403)

    # -- rendering -------------------------------------------------------------------------

    def _page(
        self,
        request: Request,
        template: str,
        context: dict[str, Any],
        status: int = 200,
        visitor: Visitor | None = None,
    ) -> Response:
        base = {
            "agent": self.agent_name,
            "paths": PATHS,
            "prefix": PREFIX,
            "principal": visitor.principal.name if visitor else None,
            "csrf": visitor.login.csrf if visitor else None,
            "here": request.url.path,
        }
        return render(template, {**base, **context}, status=status)

    def _set(self, response: Response, name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path=PREFIX,
            secure=self.secure_cookie,
            httponly=True,
            samesite="strict",
        )

    def _clear(self, response: Response, name: str) -> None:
        response.delete_cookie(
            name, path=PREFIX, secure=self.secure_cookie, httponly=True, samesite="strict"
        )

    # -- the handlers ----------------------------------------------------------------------

    def page(
        self, handler: Callable[..., Awaitable[Response]]
    ) -> Callable[..., Awaitable[Response]]:
        """Run ``handler(request, visitor, **params)`` for a logged-in visitor; the server's
        errors (404 for another's object, 409...) become a page, not JSON."""

        async def run(request: Request, **params: Any) -> Response:
            visitor: Visitor | None = None
            try:
                visitor = await self.visitor(request)
                return await handler(request, visitor, **params)
            except _Refused as refused:
                return refused.response
            except ApiError as exc:
                failed = exc
            except ValidationError as exc:
                problems = "; ".join(str(e["msg"]) for e in exc.errors())
                failed = ApiError(422, "invalid_request", problems)
            except StoreError as exc:
                log.warning("console: the store failed on %s: %s", request.url.path, exc)
                failed = ApiError(503, "store_unavailable", "the store failed; try again")
            return self._page(request, "error.html", {"error": failed}, failed.status, visitor)

        return run

    async def login_page(self, request: Request) -> Response:
        token = new_token()
        context = {
            "login_csrf": token,
            "next": _safe_next(request.query_params.get("next")),
            "why": LOGIN_REASONS.get(request.query_params.get("why", ""), ""),
        }
        response = self._page(request, "login.html", context)
        self._set(response, LOGIN_CSRF_COOKIE, token, 3600)
        return response

    async def login(self, request: Request) -> Response:
        try:
            fields = await self.form(request, request.cookies.get(LOGIN_CSRF_COOKIE))
        except _Refused as refused:
            return refused.response
        state = api.state_of(request)
        target = _safe_next(fields.get("next"))
        key = fields.get("key", "").strip()
        principal = await state.keys.verify(key) if key else None
        if principal is None:
            retry = new_token()
            context = {
                "login_csrf": retry,
                "next": target,
                "why": LOGIN_REASONS["bad_key"],
            }
            response = self._page(request, "login.html", context, 401)
            self._set(response, LOGIN_CSRF_COOKIE, retry, 3600)
            return response
        gate = await state.gate.admit(principal) if state.gate is not None else None
        if gate is not None:
            return self._page(request, "error.html", {"error": gate}, gate.status)
        token, _ = await self.logins.open(principal)
        log.info("console: %s logged in", principal.label)
        response = _see_other(target)
        self._set(response, COOKIE, token, int(self.settings.login_seconds))
        self._clear(response, LOGIN_CSRF_COOKIE)
        return response

    async def logout(self, request: Request, visitor: Visitor) -> Response:
        await self.form(request, visitor.login.csrf)
        await self.logins.close(visitor.token)
        response = _see_other(PATHS["login"])
        self._clear(response, COOKIE)
        return response

    async def sessions(self, request: Request, visitor: Visitor) -> Response:
        state = api.state_of(request)
        wanted = request.query_params.get("status") or None
        status: Any = wanted if wanted in (*SESSION_STATUSES, "suspended") else None
        listed = await api.list_sessions(state, visitor.principal, status=status, limit=200)
        context = {"sessions": listed.sessions, "status": status, "statuses": SESSION_STATUSES}
        return self._page(request, "sessions.html", context, visitor=visitor)

    async def session(self, request: Request, visitor: Visitor, session_id: str) -> Response:
        state = api.state_of(request)
        view = await api.get_session(session_id, state, visitor.principal)
        approvals = await api.session_approvals(session_id, state, visitor.principal)
        info = await api.owned_session(state, session_id, visitor.principal)
        context = {
            "session": view,
            "job_id": info.metadata.get("job"),
            "approvals": approvals.approvals,
            "decision_key": uuid.uuid4().hex,
            "events_url": PATHS["session_events"].format(session_id=view.id),
        }
        return self._page(request, "session.html", context, visitor=visitor)

    async def audit(self, request: Request, visitor: Visitor, session_id: str) -> Response:
        state = api.state_of(request)
        info = await api.owned_session(state, session_id, visitor.principal)
        entries = await state.store.read_audit(info.id, limit=2000)
        context = {"session_id": info.id, "entries": entries}
        return self._page(request, "audit.html", context, visitor=visitor)

    async def decide(self, request: Request, visitor: Visitor, approval_id: str) -> Response:
        fields = await self.form(request, visitor.login.csrf)
        decision: Literal["approve", "deny"] = (
            "approve" if fields.get("decision") == "approve" else "deny"
        )
        scope: Literal["once", "always"] = "always" if fields.get("scope") == "always" else "once"
        body = DecisionRequest(decision=decision, scope=scope, reason=fields.get("reason", ""))
        key = fields.get("idempotency_key") or None
        state = api.state_of(request)
        # The server's own route: owner check, single use, deadline, waking the run.
        decided = await api.decide_approval(approval_id, body, state, visitor.principal, key)
        back = PATHS["session"].format(session_id=_field(decided, "session_id"))
        return _see_other(_safe_next(fields.get("next") or back))

    async def jobs(self, request: Request, visitor: Visitor) -> Response:
        state = api.state_of(request)
        wanted = request.query_params.get("status") or None
        status: Any = wanted if wanted in (*JOB_STATUSES, "failed", "cancelled") else None
        listed = await jobs_api.list_jobs(state, visitor.principal, status=status, limit=200)
        context = {
            "jobs": listed.jobs,
            "status": status,
            "statuses": JOB_STATUSES,
            "job_key": uuid.uuid4().hex,
            "jobs_refused": state.jobs_refused,
        }
        return self._page(request, "jobs.html", context, visitor=visitor)

    async def submit_job(self, request: Request, visitor: Visitor) -> Response:
        fields = await self.form(request, visitor.login.csrf)
        body = JobCreate(input=fields.get("input", ""))
        key = fields.get("idempotency_key") or None
        state = api.state_of(request)
        answer = await jobs_api.create_job(body, state, visitor.principal, key)
        job_id = json.loads(bytes(answer.body))["id"]
        return _see_other(PATHS["job"].format(job_id=job_id))

    async def job(self, request: Request, visitor: Visitor, job_id: str) -> Response:
        state = api.state_of(request)
        view = await jobs_api.get_job(job_id, state, visitor.principal)
        try:
            approvals = await api.session_approvals(view.session_id, state, visitor.principal)
            asked = approvals.approvals
        except ApiError as exc:
            if exc.status != 404:
                raise
            asked = []  # a queued job's session is made when a runner claims it
        context = {
            "job": view,
            "approvals": asked,
            "decision_key": uuid.uuid4().hex,
            "action_key": uuid.uuid4().hex,
            "events_url": PATHS["job_events"].format(job_id=view.id),
            "status_url": PATHS["job_status"].format(job_id=view.id),
        }
        return self._page(request, "job.html", context, visitor=visitor)

    async def job_status(self, request: Request, visitor: Visitor, job_id: str) -> Response:
        view = await jobs_api.get_job(job_id, api.state_of(request), visitor.principal)
        body = {"id": view.id, "status": view.status, "attempts": view.attempts}
        return secured(JSONResponse(body))

    async def cancel_job(self, request: Request, visitor: Visitor, job_id: str) -> Response:
        fields = await self.form(request, visitor.login.csrf)
        state = api.state_of(request)
        key = fields.get("idempotency_key") or None
        await jobs_api.cancel_job(job_id, state, visitor.principal, key)
        return _see_other(PATHS["job"].format(job_id=job_id))

    async def job_input(self, request: Request, visitor: Visitor, job_id: str) -> Response:
        fields = await self.form(request, visitor.login.csrf)
        state = api.state_of(request)
        key = fields.get("idempotency_key") or None
        body = JobInput(reply=fields.get("reply", ""))
        await jobs_api.job_input(job_id, body, state, visitor.principal, key)
        return _see_other(PATHS["job"].format(job_id=job_id))

    async def session_events(self, request: Request, visitor: Visitor, session_id: str) -> Response:
        state = api.state_of(request)
        last, after = _cursor(request)
        stream = await api.session_events(
            session_id, request, state, visitor.principal, last, after
        )
        return self._guarded(stream, visitor, state)

    async def job_events(self, request: Request, visitor: Visitor, job_id: str) -> Response:
        state = api.state_of(request)
        last, after = _cursor(request)
        stream = await jobs_api.job_events(job_id, request, state, visitor.principal, last, after)
        return self._guarded(stream, visitor, state)

    def _guarded(self, stream: StreamingResponse, visitor: Visitor, state: ServerState) -> Response:
        """The server's stream, ended when the login ends (logout, expiry, revoked key).

        The server re-checks a *key* on its own streams; a login has no key to show it,
        so the console re-checks the login between frames, at most every
        ``server.key_recheck_seconds`` (frames come at least every
        ``server.keepalive_seconds``).
        """
        stream.body_iterator = _while(
            stream.body_iterator,
            lambda: self.still_logged_in(visitor, state),
            state.settings.key_recheck_seconds,
        )
        return secured(stream)


async def _while(
    frames: AsyncIterable[Any], check: Callable[[], Awaitable[bool]], every: float
) -> AsyncIterator[Any]:
    next_check = time.monotonic() + every
    try:
        async for chunk in frames:
            yield chunk
            if time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + every
            if not await check():
                yield frame(
                    "error",
                    {"code": "unauthorized", "message": "this login ended; log in again"},
                )
                return
    finally:
        close = getattr(frames, "aclose", None)
        if close is not None:
            await close()


def _cursor(request: Request) -> tuple[str | None, int | None]:
    """Last-Event-ID (sent by EventSource when it reconnects) and ?after=, as the API takes them."""
    after = request.query_params.get("after")
    if after is not None and not after.isdigit():
        raise ApiError(422, "invalid_request", "after: a whole number (an event id)")
    return request.headers.get("last-event-id"), int(after) if after is not None else None


def _field(value: Any, name: str) -> Any:
    if isinstance(value, Response):
        return json.loads(bytes(value.body))[name]
    return getattr(value, name)


def console_extension(context: ServerContext, settings: ConsoleSettings) -> ServerExtension:
    """The router of the console, with its paths declared public (each checks the login)."""
    from koboi_server.extensions import ServerExtension

    console = Console(context, settings)
    router = APIRouter(include_in_schema=False)

    async def home() -> Response:
        return _see_other(PATHS["sessions"])

    async def static(name: str) -> Response:
        content = static_file(name)
        if content is None:
            return secured(Response("not found", status_code=404, media_type="text/plain"))
        return secured(Response(content, media_type=STATIC[name]), cache_seconds=300)

    router.add_api_route(PATHS["home"], home, methods=["GET"])
    router.add_api_route(PATHS["static"], static, methods=["GET"])
    router.add_api_route(PATHS["login"], console.login_page, methods=["GET"])
    router.add_api_route(PATHS["login"], console.login, methods=["POST"])
    pages: list[tuple[str, str, Callable[..., Awaitable[Response]]]] = [
        ("logout", "POST", console.logout),
        ("sessions", "GET", console.sessions),
        ("session", "GET", console.session),
        ("session_events", "GET", console.session_events),
        ("audit", "GET", console.audit),
        ("decide", "POST", console.decide),
        ("jobs", "GET", console.jobs),
        ("jobs", "POST", console.submit_job),
        ("job", "GET", console.job),
        ("job_status", "GET", console.job_status),
        ("job_events", "GET", console.job_events),
        ("job_cancel", "POST", console.cancel_job),
        ("job_input", "POST", console.job_input),
    ]
    for name, method, handler in pages:
        router.add_api_route(PATHS[name], _endpoint(console, handler), methods=[method])
    return ServerExtension(router=router, public_paths=sorted(set(PATHS.values())))


def _endpoint(
    console: Console, handler: Callable[..., Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """A FastAPI endpoint for ``handler``: the request, and the path's parameters by name."""
    run = console.page(handler)

    async def endpoint(request: Request) -> Response:
        return await run(request, **request.path_params)

    return endpoint
