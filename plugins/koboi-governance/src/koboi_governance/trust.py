"""The trust database: "always" approvals kept in the store as scoped rules.

A rule names one tool and what its arguments must be: by default exactly the
arguments that were approved (their canonical JSON), or, for a rule written by
hand with ``koboi trust add``, a glob per argument. Rules expire; a revoked or
expired rule never matches again. Rules live in the store (kind ``trust``), so
every process sharing it — replicas of a server included — sees the same ones.

A rule belongs to whoever made it: the session's owner (a server principal; None
for a command-line run) and the agent. It matches only calls of sessions with
the same owner and agent, so one principal's "always" never lets another
principal's call through. A rule stored before rules had owners counts as a
command-line rule (owner None, any agent).
"""

from __future__ import annotations

import fnmatch
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koboi.approval import canonical_arguments
from koboi.store import KeyedRecords

KIND = "trust"


@dataclass(frozen=True)
class TrustRule:
    """One stored rule."""

    id: str
    tool: str
    #: Exact canonical JSON of the approved arguments, or None when ``patterns`` is used.
    arguments: str | None
    #: Argument name -> glob (for string values) or exact value.
    patterns: Mapping[str, Any] | None
    created_at: float
    expires_at: float
    created_by: str
    session_id: str = ""
    note: str = ""
    #: Who the rule belongs to: the session owner (principal) that made it; None for
    #: a command-line run.
    owner: str | None = None
    #: The agent it was made for (``agent.name``); None: any agent of the owner.
    agent: str | None = None

    def belongs_to(self, owner: str | None, agent: str | None) -> bool:
        """True when the rule may decide for a session of ``owner`` running ``agent``."""
        return self.owner == owner and (self.agent is None or self.agent == agent)

    def matches(self, tool: str, arguments: Mapping[str, Any]) -> bool:
        if tool != self.tool:
            return False
        if self.arguments is not None:
            return canonical_arguments(arguments) == self.arguments
        for name, wanted in (self.patterns or {}).items():
            if name not in arguments:
                return False
            value = arguments[name]
            if isinstance(wanted, str):
                if not isinstance(value, str) or not _glob(wanted).fullmatch(value):
                    return False
            elif value != wanted or type(value) is not type(wanted):
                return False
        # Arguments the rule does not name must be absent: a rule for {"path": "src/*"}
        # does not also trust {"path": "src/a", "force": true}.
        return set(arguments) <= set(self.patterns or {})

    def to_record(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "arguments": self.arguments,
            "patterns": dict(self.patterns) if self.patterns is not None else None,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "created_by": self.created_by,
            "session_id": self.session_id,
            "note": self.note,
            "owner": self.owner,
            "agent": self.agent,
        }

    @classmethod
    def from_record(cls, key: str, data: Mapping[str, Any]) -> TrustRule:
        return cls(
            id=key,
            tool=str(data["tool"]),
            arguments=data.get("arguments"),
            patterns=data.get("patterns"),
            created_at=float(data.get("created_at", 0.0)),
            expires_at=float(data.get("expires_at", 0.0)),
            created_by=str(data.get("created_by", "")),
            session_id=str(data.get("session_id", "")),
            note=str(data.get("note", "")),
            owner=data.get("owner"),
            agent=data.get("agent"),
        )

    def describe(self) -> str:
        what = (
            self.arguments
            if self.arguments is not None
            else canonical_arguments(self.patterns or {})
        )
        return f"{self.tool} {what}"


_GLOBS: dict[str, re.Pattern[str]] = {}


def _glob(pattern: str) -> re.Pattern[str]:
    compiled = _GLOBS.get(pattern)
    if compiled is None:
        compiled = _GLOBS[pattern] = re.compile(fnmatch.translate(pattern), re.DOTALL)
    return compiled


class TrustBook:
    """Trust rules of one store, read fresh on each lookup (revocation takes effect at once)."""

    def __init__(self, store: KeyedRecords) -> None:
        self.store = store

    async def add(
        self,
        tool: str,
        *,
        arguments: Mapping[str, Any] | None = None,
        patterns: Mapping[str, Any] | None = None,
        ttl_seconds: float,
        created_by: str,
        session_id: str = "",
        note: str = "",
        owner: str | None = None,
        agent: str | None = None,
    ) -> TrustRule:
        if (arguments is None) == (patterns is None):
            raise ValueError("a trust rule needs either exact arguments or argument patterns")
        now = time.time()
        rule = TrustRule(
            id=f"tr_{secrets.token_hex(8)}",
            tool=tool,
            arguments=canonical_arguments(arguments) if arguments is not None else None,
            patterns=dict(patterns) if patterns is not None else None,
            created_at=now,
            expires_at=now + ttl_seconds,
            created_by=created_by,
            session_id=session_id,
            note=note,
            owner=owner,
            agent=agent,
        )
        await self.store.record_put(KIND, rule.id, rule.to_record(), expires_at=rule.expires_at)
        return rule

    async def rules(self) -> list[TrustRule]:
        return [
            TrustRule.from_record(key, data) for key, data in await self.store.record_list(KIND)
        ]

    async def match(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        owner: str | None = None,
        agent: str | None = None,
    ) -> TrustRule | None:
        """The first unexpired rule of ``owner`` (for ``agent``) that matches the call."""
        now = time.time()
        for rule in await self.rules():
            if (
                rule.expires_at > now
                and rule.belongs_to(owner, agent)
                and rule.matches(tool, arguments)
            ):
                return rule
        return None

    async def revoke(self, rule_id: str) -> bool:
        return await self.store.record_delete(KIND, rule_id)
