"""The ``Approver`` contract: a human (or a policy) says yes or no to a tool call.

Deny by default: an agent with no approver denies every call that needs
approval, with a reason the model can read.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from koboi.tools import Risk

Scope = Literal["once", "always"]


# Built once (json.dumps with options builds an encoder per call); every tool call's
# arguments are hashed.
_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def canonical_arguments(arguments: Mapping[str, Any]) -> str:
    """The canonical JSON text of a call's arguments: what is shown, hashed and approved."""
    return _CANONICAL.encode(arguments)


def arguments_hash(arguments: Mapping[str, Any]) -> str:
    """SHA-256 of :func:`canonical_arguments`; binds an approval to the exact arguments."""
    return hashlib.sha256(canonical_arguments(arguments).encode()).hexdigest()


@dataclass(frozen=True)
class ApprovalRequest:
    """A tool call waiting for a decision."""

    session_id: str
    step: int
    call_id: str
    tool_name: str
    arguments: Mapping[str, Any]
    risk: Risk
    reason: str
    arguments_hash: str = field(default="")
    #: Stable across a crash: a resumed run waits on the same approval.
    approval_id: str = ""
    #: When the request lapses (epoch seconds); no decision by then is a "no".
    expires_at: float | None = None
    #: The arguments as they may be shown to a person: secrets masked by the run's
    #: redaction (``arguments`` is what will run, and what the hash binds).
    shown_arguments: Mapping[str, Any] | None = None
    #: Who the session belongs to (a server principal); None when nobody in particular.
    owner: str | None = None

    def __post_init__(self) -> None:
        if not self.arguments_hash:
            object.__setattr__(self, "arguments_hash", arguments_hash(self.arguments))
        if self.shown_arguments is None:
            object.__setattr__(self, "shown_arguments", self.arguments)

    @property
    def display_arguments(self) -> Mapping[str, Any]:
        """What to show of the arguments (masked); the raw ones only on explicit request."""
        return self.shown_arguments if self.shown_arguments is not None else self.arguments


@dataclass(frozen=True)
class ApprovalDecision:
    """The answer to an :class:`ApprovalRequest`."""

    approved: bool
    reason: str = ""
    scope: Scope = "once"
    decided_by: str = ""
    #: What the decision was given for. When set, each must match the request, or the
    #: loop refuses the call: a yes for one session, call or set of arguments is never
    #: used for another.
    approval_id: str = ""
    session_id: str = ""
    arguments_hash: str = ""

    def mismatch(self, request: ApprovalRequest) -> str | None:
        """Why this decision does not belong to ``request``, or None when it does."""
        for name, given, wanted in (
            ("session", self.session_id, request.session_id),
            ("approval", self.approval_id, request.approval_id),
            ("arguments", self.arguments_hash, request.arguments_hash),
        ):
            if given and given != wanted:
                return f"the decision was given for another {name} ({given[:16]}…)"
        return None


class Approver(ABC):
    """Decides on tool calls that need approval. May wait for a human."""

    name: str = "approver"

    @abstractmethod
    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        """Return the decision. Must not raise for a normal 'no': return ``approved=False``."""


class DenyAllApprover(Approver):
    """The default: nobody is there to ask, so the answer is no."""

    name = "deny"

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(
            approved=False,
            reason=(
                f"tool '{request.tool_name}' ({request.risk.value}) needs approval and no "
                "approver is available: denied by default"
            ),
            decided_by=self.name,
        )


class AllowAllApprover(Approver):
    """Approves everything. For tests and fully trusted setups only."""

    name = "allow"

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True, reason="approved by allow-all", decided_by=self.name)


class CallbackApprover(Approver):
    """Asks a function (sync or async) that returns a bool or an :class:`ApprovalDecision`."""

    name = "callback"

    def __init__(
        self,
        callback: Callable[
            [ApprovalRequest], bool | ApprovalDecision | Awaitable[bool | ApprovalDecision]
        ],
    ) -> None:
        self.callback = callback

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        answer = self.callback(request)
        if isinstance(answer, Awaitable):
            answer = await answer
        if isinstance(answer, ApprovalDecision):
            return answer
        return ApprovalDecision(
            approved=bool(answer),
            reason="approved" if answer else "denied",
            decided_by=self.name,
        )
