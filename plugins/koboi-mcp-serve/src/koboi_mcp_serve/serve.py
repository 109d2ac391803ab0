"""An agent's tools as an MCP server, every call through the agent's own governance.

Each ``tools/call`` is :meth:`koboi.KoboiAgent.call_tool`: the agent's mode,
policy, guardrails, trust, approvals, rate limits, sandbox, journal and audit
trail apply exactly as to a call its model makes, in a journaled session of its
own (owned by the API key's principal over HTTP). What is exposed is narrower
than what the agent has: safe tools only, unless ``--allow TOOL`` or
``--allow-all`` widen it — and widening exposes a tool, it approves nothing.

Approvals: a call that needs one is asked of the MCP client by elicitation
(a yes/no form) when the client declares it can answer one — mid-call on the
handshake protocol versions, as an input-required round trip on 2026-07-28 (the
approval then binds to the exact tool and arguments, signed by this server). A
client that cannot answer gets the agent's default: denied.

Optionally the agent itself is one more tool, ``ask_<agent>``: each call is a
run of the agent, in a journaled session of its own.
"""

from __future__ import annotations

import base64
import contextvars
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext

from koboi.approval import ApprovalDecision, ApprovalRequest, Approver, arguments_hash
from koboi.errors import KoboiError, describe_error
from koboi.logs import get_logger
from koboi.secrets import mask_secrets
from koboi.tools import Risk, Tool
from koboi.toolsets import provider_safe_name
from koboi_mcp_serve._version import __version__

if TYPE_CHECKING:
    from koboi.agent import KoboiAgent

log = get_logger("koboi.mcp_serve")

#: Where the HTTP layer puts the API key's principal, for the call's session.
PRINCIPAL_STATE = "koboi_principal"
_APPROVAL_KEY = "koboi_approval"
#: How long a signed approval question stays answerable (2026-07-28 round trips).
APPROVAL_TTL_SECONDS = 300.0


@dataclass(frozen=True)
class Exposure:
    """Which of the agent's tools MCP clients see: safe ones, plus what was allowed."""

    allow: frozenset[str] = frozenset()
    allow_all: bool = False

    def exposes(self, tool: Tool) -> bool:
        return self.allow_all or tool.risk == Risk.SAFE or tool.name in self.allow


# -- approvals asked of the client ------------------------------------------------------------


@dataclass
class ClientApproval:
    """How the client of the request being served can approve (set per request)."""

    ctx: ServerRequestContext[Any, Any] | None = None
    #: 2026-07-28: the tool and arguments hash the client approved (signed, checked).
    approved_hash: str | None = None
    #: 2026-07-28: set when a call was refused because the client must be asked first.
    question: ApprovalRequest | None = None
    #: A run of the agent (ask_<agent>): it cannot end to let the client answer later.
    in_run: bool = False


_current: contextvars.ContextVar[ClientApproval | None] = contextvars.ContextVar(
    "koboi_mcp_client_approval", default=None
)


def _can_elicit(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and capabilities.elicitation is not None


def _modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return not ctx.session.can_send_request


_APPROVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve",
            "description": "Run this tool call?",
            "default": False,
        }
    },
    "required": ["approve"],
}


def approval_message(request: ApprovalRequest) -> str:
    shown = json.dumps(dict(request.display_arguments), ensure_ascii=False, default=str)
    return (
        f"Approve the {request.risk.value} tool call {request.tool_name}({mask_secrets(shown)[:500]})? "
        f"Reason: {request.reason}"
    )


class ClientApprover(Approver):
    """The agent's approver under mcp-serve: asks the MCP client of the current request."""

    name = "mcp-client"

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        approval = _current.get()
        ctx = approval.ctx if approval is not None else None
        if approval is None or ctx is None or not _can_elicit(ctx):
            return ApprovalDecision(
                approved=False,
                reason=f"tool '{request.tool_name}' needs approval and the MCP client cannot "
                "give one (it does not answer elicitations): denied by default",
                decided_by=self.name,
            )
        if _modern(ctx) and approval.in_run:
            return ApprovalDecision(
                approved=False,
                reason=f"tool '{request.tool_name}' needs approval, and inside an ask run this "
                "MCP client can only answer mid-call (2025 protocol versions): denied",
                decided_by=self.name,
            )
        if _modern(ctx):
            if approval.approved_hash == _bound(request.tool_name, request.arguments_hash):
                approval.approved_hash = None  # once
                return ApprovalDecision(
                    approved=True, reason="approved by the MCP client", decided_by=self.name
                )
            approval.question = request
            return ApprovalDecision(
                approved=False,
                reason="asked the MCP client for approval (it answers, then calls again)",
                decided_by=self.name,
            )
        try:
            answer = await ctx.session.elicit_form(
                approval_message(request),
                _APPROVE_SCHEMA,
                related_request_id=ctx.request_id,
            )
        except Exception as exc:  # a client that fails to answer has not approved
            return ApprovalDecision(
                approved=False,
                reason=f"the MCP client did not answer the approval: {describe_error(exc)}",
                decided_by=self.name,
            )
        approved = answer.action == "accept" and bool((answer.content or {}).get("approve"))
        return ApprovalDecision(
            approved=approved,
            reason="approved by the MCP client"
            if approved
            else f"the MCP client said {answer.action}"
            + ("" if answer.action != "accept" else " (not approved)"),
            decided_by=self.name,
        )


def _bound(tool: str, digest: str) -> str:
    return f"{tool}:{digest}"


class ApprovalSigner:
    """Signs the approval questions of 2026-07-28 round trips, so an answer only approves
    the exact tool and arguments it was asked about, for a short while."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def state(self, tool: str, digest: str) -> str:
        body = json.dumps({"t": tool, "h": digest, "e": time.time() + APPROVAL_TTL_SECONDS})
        mac = hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()
        return base64.urlsafe_b64encode(json.dumps({"b": body, "m": mac}).encode()).decode()

    def verify(self, state: str) -> tuple[str, str] | None:
        try:
            outer = json.loads(base64.urlsafe_b64decode(state.encode()))
            body, mac = str(outer["b"]), str(outer["m"])
        except (ValueError, KeyError, TypeError):
            return None
        expected = hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac, expected):
            return None
        data = json.loads(body)
        if float(data["e"]) < time.time():
            return None
        return str(data["t"]), str(data["h"])


# -- the server -------------------------------------------------------------------------------


class AgentMcpServer:
    """The MCP server of one opened agent (see the module docstring)."""

    def __init__(
        self,
        agent: KoboiAgent,
        *,
        exposure: Exposure,
        ask_agent: bool = False,
    ) -> None:
        self.agent = agent
        self.exposure = exposure
        self.ask_name = provider_safe_name("ask_", agent.config.agent.name) if ask_agent else None
        self.signer = ApprovalSigner()
        unknown = sorted(exposure.allow - set(agent.tools))
        if unknown:
            known = ", ".join(sorted(agent.tools)) or "none"
            raise KoboiError(
                f"--allow names tools the agent does not have: {', '.join(unknown)} "
                f"(its tools: {known})"
            )
        self.server: Server[Any] = Server(
            agent.config.agent.name,
            version=__version__,
            instructions=f"The tools of the koboi agent {agent.config.agent.name!r}; every call "
            "goes through its governance (policy, approvals, rate limits, audit).",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    def exposed(self) -> dict[str, Tool]:
        return {n: t for n, t in self.agent.tools.items() if self.exposure.exposes(t)}

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = [_mcp_tool(tool) for tool in self.exposed().values()]
        if self.ask_name is not None:
            tools.append(
                types.Tool(
                    name=self.ask_name,
                    description=f"Ask the agent {self.agent.config.agent.name!r} to do something; "
                    "it answers with its final reply.",
                    input_schema={
                        "type": "object",
                        "properties": {
                            "message": {"type": "string", "description": "What to ask."}
                        },
                        "required": ["message"],
                    },
                    annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False),
                )
            )
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        arguments = dict(params.arguments or {})
        approval = ClientApproval(ctx=ctx)
        if params.request_state:
            verdict = self._approval_answer(params)
            if isinstance(verdict, types.CallToolResult):
                return verdict
            approval.approved_hash = verdict
        token = _current.set(approval)
        try:
            if self.ask_name is not None and params.name == self.ask_name:
                approval.in_run = True
                return await self._ask(ctx, arguments)
            if params.name not in self.exposed():
                return _error(
                    f"tool {params.name!r} is not exposed by this server "
                    "(mcp-serve exposes safe tools; --allow TOOL widens it)"
                )
            session = await self._session(ctx, f"tool {params.name}")
            called = await self.agent.call_tool(
                params.name, arguments, session_id=session, approver=ClientApprover()
            )
        except KoboiError as exc:
            return _error(describe_error(exc))
        finally:
            _current.reset(token)
        if approval.question is not None and called.refused_by == "approval":
            return self._ask_for_approval(approval.question)
        if called.outcome == "suspended" and called.result is not None:
            waiting = (called.result.suspension or {}).get("reason", "")
            return _error(f"the tool waits for input it cannot get over MCP: {waiting}")
        text = called.content
        if called.refused_by:
            text = f"refused ({called.refused_by}): {text}"
        return types.CallToolResult(
            content=[types.TextContent(text=text)], is_error=not called.ok or called.is_error
        )

    def _approval_answer(self, params: types.CallToolRequestParams) -> str | types.CallToolResult:
        """The approval a 2026-07-28 retry carries: the bound tool and hash, or an error."""
        signed = self.signer.verify(params.request_state or "")
        if signed is None:
            return _error("the approval state is invalid or expired; call the tool again")
        tool, digest = signed
        if tool != params.name or digest != arguments_hash(dict(params.arguments or {})):
            return _error("the approval was given for another tool call; call the tool again")
        answer = (params.input_responses or {}).get(_APPROVAL_KEY)
        if not isinstance(answer, types.ElicitResult):
            return _error("no answer to the approval question; call the tool again")
        if answer.action != "accept" or not (answer.content or {}).get("approve"):
            return _error(f"not approved by the MCP client ({answer.action})")
        return _bound(tool, digest)

    def _ask_for_approval(self, request: ApprovalRequest) -> types.InputRequiredResult:
        question = types.ElicitRequest(
            params=types.ElicitRequestFormParams(
                message=approval_message(request),
                requested_schema=_APPROVE_SCHEMA,
            )
        )
        return types.InputRequiredResult(
            input_requests={_APPROVAL_KEY: question},
            request_state=self.signer.state(request.tool_name, request.arguments_hash),
        )

    async def _session(self, ctx: ServerRequestContext[Any, Any], what: str) -> str:
        """A new journaled session for one call, owned by the request's principal."""
        client = ctx.session.client_params
        info = await self.agent.store.create_session(
            config_name=self.agent.config.agent.name,
            config_hash=self.agent.config.config_hash,
            owner=principal_of(ctx),
            metadata={
                "via": "mcp-serve",
                "call": what,
                "mcp_client": client.client_info.name if client is not None else None,
            },
        )
        return info.id

    async def _ask(
        self, ctx: ServerRequestContext[Any, Any], arguments: Mapping[str, Any]
    ) -> types.CallToolResult:
        message = arguments.get("message")
        if not isinstance(message, str) or not message.strip():
            return _error("ask: give a non-empty 'message'")
        session = await self._session(ctx, "ask")
        result = await self.agent.run(message, session_id=session)
        if result.outcome == "completed":
            return types.CallToolResult(content=[types.TextContent(text=result.output)])
        why = result.error or (result.suspension or {}).get("reason") or result.outcome
        return _error(
            f"the agent's run ended {result.outcome}: {why} (session {result.session_id})"
        )


def principal_of(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The API key's principal of an HTTP request (None over stdio)."""
    request = ctx.request
    state = getattr(request, "scope", {}).get("state") if request is not None else None
    if isinstance(state, Mapping):
        value = state.get(PRINCIPAL_STATE)
        return str(value) if value else None
    return None


def _mcp_tool(tool: Tool) -> types.Tool:
    spec = tool.spec()
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=dict(spec.parameters),
        annotations=types.ToolAnnotations(
            read_only_hint=tool.risk == Risk.SAFE,
            destructive_hint=tool.risk == Risk.DESTRUCTIVE,
            idempotent_hint=tool.idempotent,
        ),
    )


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def exposure(allow: Sequence[str], allow_all: bool) -> Exposure:
    return Exposure(allow=frozenset(allow), allow_all=allow_all)
