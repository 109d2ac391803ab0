"""Which koboi session a completion runs in.

1. ``X-Koboi-Session: <session id>``: that session of the caller's, continued (404 for
   an id that is not theirs, as everywhere in koboi).
2. Else ``user``: the caller's conversation of that name. The first request with a
   ``user`` makes a session and remembers it (a keyed record of the store, per
   principal and name, created atomically: of concurrent first requests one session
   wins); later ones continue it.
3. Else a new session for this request alone.

Whichever it is, the answer names it in the ``X-Koboi-Session`` header (and in
``koboi.session_id``): send it back to continue there.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from koboi.errors import SessionNotFound
from koboi.store import new_session_id

if TYPE_CHECKING:
    from koboi_server.keys import Principal
    from koboi_server.state import ServerState

#: Keyed records ``(principal, user) -> session``.
KIND = "openai-compat.conversation"
HEADER = "X-Koboi-Session"


@dataclass(frozen=True)
class Choice:
    """The session a completion runs in."""

    session_id: str | None
    #: Make the session (with ``session_id``, or a random id when None).
    create: bool

    @property
    def continuing(self) -> bool:
        """The session exists: its journal holds the conversation."""
        return not self.create


def conversation_key(principal: Principal, user: str) -> str:
    digest = hashlib.sha256(user.encode()).hexdigest()[:32]
    return f"{principal.name}/{digest}"


async def choose(
    state: ServerState, principal: Principal, header: str | None, user: str | None
) -> Choice:
    if header is not None and header.strip():
        return Choice(header.strip(), create=False)
    if not user:
        return Choice(None, create=True)
    key = conversation_key(principal, user)
    record = await state.records.record_get(KIND, key)
    if record is None:
        candidate = new_session_id()
        if await state.records.record_create(KIND, key, {"session_id": candidate, "user": user}):
            return Choice(candidate, create=True)
        record = await state.records.record_get(KIND, key)  # a concurrent request won
        if record is None:  # pragma: no cover - the winner's record cannot vanish
            return Choice(candidate, create=True)
    session_id = str(record["session_id"])
    try:
        await state.store.get_session(session_id)
    except SessionNotFound:
        # The name was claimed but its first run never made the session (refused by
        # the limits, say): make it now.
        return Choice(session_id, create=True)
    return Choice(session_id, create=False)
