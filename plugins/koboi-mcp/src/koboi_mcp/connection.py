"""One MCP server, connected: its session, its tools, its calls, its restarts.

The session lives in a task of the toolset's own task group, from the moment
the server is started until it stops (it exits, the connection breaks, a call
times out) or the agent closes. A call to a server that is down starts it
again first; a server that cannot be started, or stops during a call, is a
clear tool error for the model, and one warning line naming the server for
the person — never a hung run.

Notifications: ``tools/list_changed`` lists the tools again and tells the
toolset (which bumps its version: the loop journals ``tools_changed`` before
the next step); progress and log messages become plugin events of the call in
flight (``mcp.progress``, ``mcp.log``); an elicitation is answered from the
reply of a continued run, at the terminal, or suspends the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.lowlevel
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError

from koboi.errors import KoboiError, ToolError, describe_error
from koboi.logs import get_logger
from koboi.secrets import mask_secrets
from koboi_mcp._version import __version__
from koboi_mcp.auth import NotLoggedIn, bearer_headers, oauth_provider
from koboi_mcp.config import BearerAuth, ServerSettings
from koboi_mcp.transport import (
    GuardedTransport,
    ProcessReport,
    address_policy,
    guarded_http_client,
    sandbox_stdio,
)

if TYPE_CHECKING:
    from koboi.sandbox import Sandbox
    from koboi.store import Store
    from koboi.tools import ToolContext

log = get_logger("koboi_mcp")

CLIENT_INFO = types.Implementation(name="koboi", version=__version__)


class ServerDown(KoboiError):
    """The server could not be reached, or stopped: it is started again at the next call."""


@dataclass
class ActiveCall:
    """A tool call in flight: where its notifications and elicitations go."""

    ctx: ToolContext | None
    tool: str
    suspend: anyio.Event = field(default_factory=anyio.Event)
    suspension: dict[str, Any] | None = None


@dataclass
class ServerState:
    """What the toolset shows of a server (``koboi mcp list``)."""

    up: bool = False
    error: str | None = None
    server_info: types.Implementation | None = None
    protocol_version: str | None = None
    capabilities: types.ServerCapabilities | None = None
    tools: list[types.Tool] = field(default_factory=list)


class ServerConnection:
    """The connection to one configured MCP server (see the module's docstring)."""

    def __init__(
        self,
        name: str,
        settings: ServerSettings,
        *,
        sandbox: Sandbox | None,
        store: Store | None,
        base_dir: Path,
        tasks: anyio.abc.TaskGroup,
        on_tools_changed: Callable[[ServerConnection], None],
        elicit: Callable[[ActiveCall, types.ElicitRequestParams], Any] | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self.state = ServerState()
        self._sandbox = sandbox
        self._store = store
        self._base_dir = base_dir
        self._tasks = tasks
        self._on_tools_changed = on_tools_changed
        self._elicit = elicit
        self._client: Client | None = None
        self._stop: anyio.Event | None = None
        self._start_lock = anyio.Lock()
        self._calls: list[ActiveCall] = []
        self._report = ProcessReport()
        self._started_before = False
        self._served = anyio.Event()
        self._guard: GuardedTransport | None = None
        #: Tool-list refreshes under way, and an event set when none is.
        self._relisting = 0
        self._relisted = anyio.Event()

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Connect (start the process, initialise, list the tools); :class:`ServerDown` when
        it cannot, with the reason in one line."""
        async with self._start_lock:
            if self._client is not None:
                return
            try:
                with anyio.fail_after(self.settings.connect_timeout):
                    await self._tasks.start(self._serve)
            except TimeoutError:
                self._fail(f"did not answer within {self.settings.connect_timeout:g} s")
            except NotLoggedIn as exc:
                self._fail(str(exc), prefix=False)
            except Exception as exc:  # whatever stopped the start, said in one line
                if self._report.started:
                    with anyio.move_on_after(2.0):  # its exit code and last words
                        await self._report.exited.wait()
                self._fail(self._why(exc))

    def _fail(self, reason: str, *, prefix: bool = True) -> None:
        message = f"MCP server {self.name!r} could not be started: {reason}" if prefix else reason
        self.state.up, self.state.error = False, message
        raise ServerDown(message)

    def _down(self) -> None:
        """Take the server down now: the next call starts a new one (the old session is
        closed, and its process killed, by its serving task)."""
        stop, self._stop, self._client = self._stop, None, None
        self.state.up = False
        if stop is not None:
            stop.set()

    async def stop(self) -> None:
        """Disconnect (the process is killed with its tree) and wait for it, briefly."""
        stop = self._stop
        self._down()
        if stop is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self._served.wait()

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        stop = anyio.Event()
        self._stop = stop
        self._served = served = anyio.Event()
        self._report = report = ProcessReport()
        client: Client | None = None
        started = False
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = Client(
                    await self._transport(stack, report),
                    mode="auto",
                    client_info=CLIENT_INFO,
                    cache=None,
                    message_handler=self._on_message,
                    logging_callback=self._on_log,
                    log_level=self.settings.log_level,
                    elicitation_callback=self._on_elicitation,
                )
                await stack.enter_async_context(client)
                self.state.server_info = client.server_info
                self.state.protocol_version = client.protocol_version
                self.state.capabilities = client.server_capabilities
                self.state.tools = await self._list_tools(client)
                self._client = client
                self.state.up, self.state.error = True, None
                started = True
                task_status.started()
                if self._started_before:  # a restart: its list may have changed meanwhile
                    self._on_tools_changed(self)
                self._started_before = True
                async with anyio.create_task_group() as watch:
                    watch.start_soon(_set_when, report.exited, stop)
                    if _lists_changes(client):
                        watch.start_soon(self._listen, client)
                    await stop.wait()
                    watch.cancel_scope.cancel()
        except Exception as exc:  # after the start, a failure only takes the server down
            if not started:
                raise
            self.state.error = f"MCP server {self.name!r} stopped: {self._why(exc)}"
        finally:
            served.set()
            if self._stop is stop:  # still this generation's: nobody started another
                self._stop = None
                self._client = None
                self.state.up = False
            if started and report.exited.is_set() and self.state.error is None:
                self.state.error = f"MCP server {self.name!r} stopped: {self._exit_text()}"

    async def _transport(self, stack: contextlib.AsyncExitStack, report: ProcessReport) -> Any:
        settings = self.settings
        if settings.transport == "stdio":
            if self._sandbox is None:
                raise KoboiError("a stdio server needs the agent's sandbox")
            command = [str(settings.command), *settings.args]
            cwd = None
            if settings.cwd is not None:
                cwd = Path(settings.cwd)
                cwd = cwd if cwd.is_absolute() else self._base_dir / cwd
            process = self._sandbox.open_process(
                command, cwd=cwd, env=self.environment(), stderr="pipe", session_id=None
            )
            return sandbox_stdio(process, report)
        from mcp.client.streamable_http import streamable_http_client

        headers = dict(settings.headers)
        if isinstance(settings.auth, BearerAuth):
            headers.update(bearer_headers(self.name, settings.auth))
        self._guard = GuardedTransport(address_policy(settings.allow_private))
        http = guarded_http_client(
            allow_private=settings.allow_private,
            headers=headers,
            timeout=settings.connect_timeout,
            auth=oauth_provider(self.name, settings, self._store),
            transport=self._guard,
        )
        await stack.enter_async_context(http)
        return streamable_http_client(str(settings.url), http_client=http)

    def environment(self) -> dict[str, str]:
        """The stdio server's whole environment: the variables the config names, no other."""
        env = {name: os.environ[name] for name in self.settings.pass_env if name in os.environ}
        env.update(self.settings.env)
        return env

    async def _list_tools(self, client: Client) -> list[types.Tool]:
        found: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(100):  # a paginator that never ends cannot hang the start
            page = await client.list_tools(cursor=cursor)
            found.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return found

    def _exit_text(self) -> str:
        code = self._report.returncode
        said = self._report.last_words()
        what = f"the process exited with code {code}" if code is not None else "it closed"
        return f"{what}: {said}" if said else what

    def _why(self, exc: BaseException) -> str:
        """One line saying why, without secrets (a URL's password, a token in a message)."""
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            return self._why(exc.exceptions[0])
        if self._report.exited.is_set() and self.settings.transport == "stdio":
            return self._exit_text()
        guard = self._guard
        if isinstance(exc, MCPError) and guard is not None and guard.last_refusal:
            return f"{exc.message} ({guard.last_refusal})"
        if isinstance(exc, httpx2.HTTPStatusError):
            return f"HTTP {exc.response.status_code} from {self.settings.url}"
        if isinstance(exc, httpx2.TransportError):
            return f"cannot reach {self.settings.url}: {type(exc).__name__}: {exc}"
        return mask_secrets(describe_error(exc))

    # -- calls ------------------------------------------------------------------------

    async def client(self) -> Client:
        """The live session, starting the server when it is down."""
        if self._client is not None and self._report.exited.is_set():
            self._down()  # it exited since its last call
        client = self._client
        if client is None:
            await self.start()
            client = self._client
            if client is None:  # pragma: no cover - start() raises instead
                raise ServerDown(self.state.error or f"MCP server {self.name!r} is down")
        return client

    async def call_tool(
        self, tool: str, arguments: dict[str, Any], ctx: ToolContext | None
    ) -> types.CallToolResult:
        """Call ``tool``; a clear :class:`ToolError` when the server is down, stops or times
        out (it is then started again at the next call). An elicitation that must wait for
        a person suspends the run (``ctx.suspend``)."""
        try:
            client = await self.client()
        except ServerDown as exc:
            log.warning("%s", exc)
            raise ToolError(f"{exc}; it will be tried again at the next call") from None
        call = ActiveCall(ctx, tool)
        self._calls.append(call)
        outcome: list[types.CallToolResult | Exception] = []
        try:
            async with anyio.create_task_group() as tasks:

                async def run() -> None:
                    try:
                        outcome.append(
                            await client.call_tool(
                                tool,
                                arguments,
                                read_timeout_seconds=self.settings.timeout,
                                progress_callback=self._progress_of(call),
                            )
                        )
                    except Exception as exc:  # handled below, in the caller's task
                        outcome.append(exc)
                    finally:
                        tasks.cancel_scope.cancel()

                tasks.start_soon(run)
                await call.suspend.wait()
                tasks.cancel_scope.cancel()  # waiting for a person: the call ends here
        finally:
            self._calls.remove(call)
        if call.suspension is not None and ctx is not None:
            ctx.suspend(
                f"MCP server {self.name!r} asks: {call.suspension.get('message', '')}",
                kind="input",
                data=call.suspension,
            )
        if not outcome:
            raise ToolError(f"MCP server {self.name!r}: tool {tool!r} gave no result")
        result = outcome[0]
        if isinstance(result, MCPError):
            raise self._call_failed(tool, result)
        if isinstance(
            result, httpx2.TransportError | anyio.BrokenResourceError | anyio.ClosedResourceError
        ):
            self._down()
            raise self._down_during(tool, self._why(result))
        if isinstance(result, Exception):
            raise ToolError(f"MCP server {self.name!r}: {self._why(result)}")
        await self._settle_list()
        return result

    async def _settle_list(self) -> None:
        """A call that changed the server's tools (it said so before answering) returns once
        the new list is read, so the loop offers it from the very next step."""
        await anyio.lowlevel.checkpoint()
        if self._relisting:
            with anyio.move_on_after(self.settings.timeout):
                await self._relisted.wait()

    def _call_failed(self, tool: str, exc: MCPError) -> ToolError:
        if exc.code == types.CONNECTION_CLOSED:
            self._down()
            return self._down_during(
                tool, self._exit_text() if self._report.exited.is_set() else "the connection closed"
            )
        if exc.code == types.REQUEST_TIMEOUT:
            self._down()
            message = (
                f"MCP server {self.name!r} did not answer {tool!r} within "
                f"{self.settings.timeout:g} s (its timeout); the server is restarted at the next call"
            )
            log.warning("%s", message)
            return ToolError(message)
        return ToolError(f"MCP server {self.name!r} refused {tool!r}: {mask_secrets(exc.message)}")

    def _down_during(self, tool: str, why: str) -> ToolError:
        message = (
            f"MCP server {self.name!r} stopped during the call to {tool!r} ({why}); its outcome "
            "is unknown; the server is started again at the next call"
        )
        log.warning("%s", message)
        return ToolError(message)

    def _progress_of(self, call: ActiveCall) -> Any:
        async def progress(value: float, total: float | None, message: str | None) -> None:
            if call.ctx is not None:
                data: dict[str, Any] = {"server": self.name, "tool": call.tool, "progress": value}
                if total is not None:
                    data["total"] = total
                if message:
                    data["message"] = message
                call.ctx.emit("mcp.progress", data)

        return progress

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        call = self._calls[-1] if self._calls else None
        data = {"server": self.name, "level": params.level, "data": _jsonable(params.data)}
        if params.logger:
            data["logger"] = params.logger
        if call is not None and call.ctx is not None:
            call.ctx.emit("mcp.log", data)
        else:
            log.debug("MCP server %r logged: %s", self.name, mask_secrets(json.dumps(data)))

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._relisting += 1  # counted now: the call that caused it waits for the list
            self._tasks.start_soon(self._relist_after_notice)
        elif isinstance(message, Exception):
            log.debug("MCP server %r: %s", self.name, mask_secrets(describe_error(message)))

    async def _relist_after_notice(self) -> None:
        try:
            await self._relist()
        finally:
            self._relisting -= 1
            if not self._relisting:
                self._relisted.set()

    async def _listen(self, client: Client) -> None:
        """2026-07-28: list changes arrive on a ``subscriptions/listen`` stream."""
        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    await self._relist()
        except Exception as exc:  # no live list then; the tools stay as listed
            log.debug("MCP server %r: no tools subscription: %s", self.name, self._why(exc))

    async def _relist(self) -> None:
        client = self._client
        if client is None:
            return
        self._relisting += 1
        if self._relisted.is_set():
            self._relisted = anyio.Event()
        try:
            self.state.tools = await self._list_tools(client)
        except Exception as exc:  # the list stays as it was; the next change tries again
            log.warning(
                "MCP server %r: listing its changed tools failed: %s", self.name, self._why(exc)
            )
            return
        finally:
            self._relisting -= 1
            if not self._relisting:
                self._relisted.set()
        self._on_tools_changed(self)

    async def _on_elicitation(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        call = self._calls[-1] if self._calls else None
        if call is None or self._elicit is None:
            return types.ElicitResult(action="decline")
        answer: types.ElicitResult | types.ErrorData = await self._elicit(call, params)
        return answer

    # -- resources and prompts ------------------------------------------------------------

    async def _ask(self, what: str, call: Any) -> Any:
        try:
            client = await self.client()
        except ServerDown as exc:
            raise ToolError(str(exc)) from None
        try:
            with anyio.fail_after(self.settings.timeout):
                return await call(client)
        except TimeoutError:
            raise ToolError(f"MCP server {self.name!r} did not answer {what} in time") from None
        except MCPError as exc:
            raise self._call_failed(what, exc) from None

    async def list_resources(
        self,
    ) -> tuple[list[types.Resource], list[types.ResourceTemplate]]:
        async def ask(client: Client) -> tuple[list[types.Resource], list[types.ResourceTemplate]]:
            resources = (await client.list_resources()).resources
            try:
                templates = (await client.list_resource_templates()).resource_templates
            except MCPError:
                templates = []
            return list(resources), list(templates)

        found: tuple[list[types.Resource], list[types.ResourceTemplate]] = await self._ask(
            "resources/list", ask
        )
        return found

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        result: types.ReadResourceResult = await self._ask(
            "resources/read", lambda client: client.read_resource(uri)
        )
        return result

    async def list_prompts(self) -> list[types.Prompt]:
        async def ask(client: Client) -> list[types.Prompt]:
            return list((await client.list_prompts()).prompts)

        found: list[types.Prompt] = await self._ask("prompts/list", ask)
        return found

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None
    ) -> types.GetPromptResult:
        result: types.GetPromptResult = await self._ask(
            "prompts/get",
            lambda client: client.get_prompt(name, dict(arguments) if arguments else None),
        )
        return result


def _lists_changes(client: Client) -> bool:
    """Whether the server announces tool-list changes on a 2026-07-28 listen stream (on
    earlier versions they arrive as notifications, through the message handler)."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    capabilities = client.server_capabilities
    tools = capabilities.tools if capabilities is not None else None
    return (
        client.protocol_version in MODERN_PROTOCOL_VERSIONS
        and tools is not None
        and bool(tools.list_changed)
    )


async def _set_when(happened: anyio.Event, then: anyio.Event) -> None:
    await happened.wait()
    then.set()


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


def stdin_is_terminal() -> bool:
    """Whether a person can answer at this process's terminal."""
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False
