"""Approvers the CLI hands the agent: ask at the terminal, or approve all (``--yes``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Literal, TextIO

import anyio
import anyio.to_thread

from koboi.approval import (
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    Scope,
    canonical_arguments,
)
from koboi_cli.redact import mask_secrets, redact_arguments
from koboi_cli.style import Style, warn, write


def shown_arguments(request: ApprovalRequest) -> str:
    """A request's arguments as the CLI shows them: masked by the run's redaction (what
    the journal keeps) and then by the kernel's definition of a secret, by key and value."""
    return canonical_arguments(redact_arguments(request.display_arguments))


ANSWERS = "[y]es / [n]o / [a]lways for this tool with these arguments / [r]eveal the arguments"


#: What a person answers when asked about a call.
Answer = Literal["yes", "no", "always"]


class PersonApprover(Approver):
    """The part of every approver that asks a person, whatever asks (a terminal prompt,
    a chat panel): questions one at a time, so parallel tool calls never interleave
    them; ``always`` remembered for the same tool with the same arguments, for the rest
    of the process (koboi-governance keeps it as a trust rule in the store, so it
    outlasts the process); every decision bound to the request it answers (approval
    id, session, arguments hash), so an answer can never be used for another call.

    A subclass says where the person answers (:attr:`where`, used in the decisions'
    reasons) and implements :meth:`ask`.
    """

    name = "person"
    #: Where the person answers, as the decisions' reasons say it.
    where = "by a person"

    def __init__(self) -> None:
        self._lock = anyio.Lock()
        self._always: set[str] = set()

    async def ask(self, request: ApprovalRequest) -> tuple[Answer, str | None]:
        """Ask the person about ``request``: their answer, and for a ``no`` that was not
        said in words (no answer at all, say) why, else None."""
        raise NotImplementedError

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        async with self._lock:
            key = f"{request.tool_name}\0{request.arguments_hash}"
            if key in self._always:
                return self._bound(
                    request,
                    approved=True,
                    reason=f"'{request.tool_name}' with these arguments was approved 'always' "
                    f"{self.where}",
                    scope="always",
                )
            answer, why = await self.ask(request)
            if answer == "yes":
                return self._bound(request, approved=True, reason=f"approved {self.where}")
            if answer == "always":
                self._always.add(key)
                return self._bound(
                    request,
                    approved=True,
                    reason=f"approved {self.where} (always, for these arguments)",
                    scope="always",
                )
            reason = f"the user did not approve '{request.tool_name}' {self.where}"
            return self._bound(
                request, approved=False, reason=f"{reason}: {why}" if why else reason
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


class TerminalApprover(PersonApprover):
    """Asks the person at the terminal about each call that needs approval.

    Shows the tool, its risk, why approval is needed and the canonical arguments
    that will run, with every secret masked (the run's redaction, and the
    kernel's definition of a secret on top); ``r`` shows them unmasked, to the
    person at the terminal only. ``y`` approves this call, ``n`` (or an empty
    answer, or end of input) denies it, ``a`` approves it and every later call
    of the same tool with the same arguments (see :class:`PersonApprover`).

    :param read_line: returns one line of input (blocking; run in a worker
        thread); default reads ``sys.stdin``.
    :param out: where the questions are written; default ``sys.stderr``, which
        keeps stdout for the answer (and for ``--json``).
    """

    name = "terminal"
    where = "at the terminal"

    def __init__(
        self, *, read_line: Callable[[], str] | None = None, out: TextIO | None = None
    ) -> None:
        super().__init__()
        self._read_line = read_line or sys.stdin.readline
        self._out = out if out is not None else sys.stderr

    async def ask(self, request: ApprovalRequest) -> tuple[Answer, str | None]:
        self._show(request)
        while True:
            write(self._out, f"approve? {ANSWERS}: ")
            line = await anyio.to_thread.run_sync(self._read_line)
            if not line:  # end of input: nobody can answer
                write(self._out, "\n")
                return "no", "no answer (end of input)"
            answer = line.strip().lower()
            if answer in ("y", "yes"):
                return "yes", None
            if answer in ("a", "always"):
                return "always", None
            if answer in ("", "n", "no"):
                return "no", None
            if answer in ("r", "reveal"):
                write(
                    self._out,
                    f"  arguments (unmasked): {canonical_arguments(request.arguments)}\n",
                )
                continue
            write(self._out, f"please answer y, n or a (got {line.strip()!r})\n")

    def _show(self, request: ApprovalRequest) -> None:
        style = Style(self._out)
        write(
            self._out,
            f"{style.yellow(style.bold('approval needed:'))} {style.bold(request.tool_name)} "
            f"(risk: {request.risk.value}) - {mask_secrets(request.reason)}\n"
            f"  arguments: {shown_arguments(request)}\n",
        )


class AssumeYesApprover(Approver):
    """``--yes``: approves every call, and says so on stderr each time."""

    name = "assume-yes"

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        warn(
            f"approved {request.tool_name} ({request.risk.value}) without asking (--yes): "
            f"{shown_arguments(request)}"
        )
        return ApprovalDecision(approved=True, reason="approved by --yes", decided_by=self.name)
