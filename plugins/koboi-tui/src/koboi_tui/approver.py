"""The approver of ``koboi chat``: asks the person in the conversation, yes / no / always.

The question itself is the UI's business (an inline panel in the TUI, a prompt line
in line mode): the UI hands this approver an ``ask`` function that shows the request
and returns the person's answer. Everything else is decided here, once for both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

import anyio

from koboi.approval import ApprovalDecision, ApprovalRequest, Approver, Scope

Answer = Literal["yes", "no", "always"]
Ask = Callable[[ApprovalRequest], Awaitable[Answer]]


class ChatApprover(Approver):
    """Asks the person at ``koboi chat`` about each call that needs approval.

    ``yes`` approves this call; ``no`` denies it; ``always`` approves it and every
    later call of the same tool with the same arguments: for the rest of this
    process here, and beyond it when koboi-governance keeps 'always' decisions as
    trust rules in the store. Each decision names the request it answers (approval
    id, session, arguments hash), so a yes can never be used for another call.
    Questions are asked one at a time: parallel tool calls never interleave them.
    """

    name = "chat"

    def __init__(self, ask: Ask) -> None:
        self._ask = ask
        self._lock = anyio.Lock()
        self._always: set[str] = set()

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        async with self._lock:
            key = f"{request.tool_name}\0{request.arguments_hash}"
            if key in self._always:
                return self._bound(
                    request,
                    approved=True,
                    reason=f"'{request.tool_name}' with these arguments was approved 'always' "
                    "in koboi chat",
                    scope="always",
                )
            answer = await self._ask(request)
            if answer == "yes":
                return self._bound(request, approved=True, reason="approved in koboi chat")
            if answer == "always":
                self._always.add(key)
                return self._bound(
                    request,
                    approved=True,
                    reason="approved in koboi chat (always, for these arguments)",
                    scope="always",
                )
            return self._bound(
                request,
                approved=False,
                reason=f"the user did not approve '{request.tool_name}' in koboi chat",
            )

    def _bound(
        self, request: ApprovalRequest, *, approved: bool, reason: str, scope: Scope = "once"
    ) -> ApprovalDecision:
        return ApprovalDecision(
            approved=approved,
            reason=reason,
            scope=scope,
            decided_by=self.name,
            approval_id=request.approval_id,
            session_id=request.session_id,
            arguments_hash=request.arguments_hash,
        )
