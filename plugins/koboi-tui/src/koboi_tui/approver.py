"""The approver of ``koboi chat``: asks the person in the conversation, yes / no / always.

The question itself is the UI's business (an inline panel in the TUI, a prompt line
in line mode): the UI hands this approver an ``ask`` function that shows the request
and returns the person's answer. Everything else is decided here, once for both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from koboi.approval import ApprovalRequest
from koboi_cli.api import Answer, PersonApprover

__all__ = ["Answer", "Ask", "ChatApprover"]

Ask = Callable[[ApprovalRequest], Awaitable[Answer]]


class ChatApprover(PersonApprover):
    """Asks the person at ``koboi chat`` about each call that needs approval.

    ``yes`` approves this call; ``no`` denies it; ``always`` approves it and every
    later call of the same tool with the same arguments (see koboi_cli.api's
    :class:`PersonApprover`, which decides for the terminal and the chat alike).
    """

    name = "chat"
    where = "in koboi chat"

    def __init__(self, ask: Ask) -> None:
        super().__init__()
        self._ask = ask

    async def ask(self, request: ApprovalRequest) -> tuple[Answer, str | None]:
        return await self._ask(request), None
