"""API keys: created once and shown once, stored hashed in the store, checked in constant time.

A key reads ``koboi_<key id>_<secret>``. The key id (16 hex digits) is not
secret: it names the key in ``koboi keys list`` and ``revoke``. The store
keeps, per key id, the principal the key acts as and the SHA-256 of the
whole key — never the key itself. The secret is 256 random bits, so a plain
hash is as good as a slow one here: nobody can guess their way to a preimage.

Keys live in the store's keyed records (kind ``server.api_key``), so every
replica sharing the store sees a new or revoked key at its next request.

**Scopes.** A key has scopes; a route requires one. The server's own routes
require :data:`FULL_SCOPE` (``api``: the whole API, what every key had before
scopes existed, and what a stored key without scopes has); an extension's routes
require the scope it declares (:class:`~koboi_server.extensions.ServerExtension`).
A key with ``api`` may call every route; a key without it only the routes whose
scope it holds. A key may also carry its own request rate limit and a spending
budget (``rate_per_minute``, ``budget_usd``) for what it runs.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from koboi.errors import KoboiError
from koboi.store import records_of

if TYPE_CHECKING:
    from koboi.store import Store

KIND = "server.api_key"
PREFIX = "koboi_"
_TOKEN = re.compile(r"^koboi_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
_KEY_ID = re.compile(r"^(?:koboi_)?([0-9a-f]{16})$")
_SCOPE = re.compile(r"^[a-z][a-z0-9_.:-]{0,63}$")
_PRINCIPAL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$")
#: Compared against when a key id is unknown, so that case costs the same work.
_DUMMY_HASH = hashlib.sha256(b"koboi: no such key").hexdigest()

DEV_PRINCIPAL = "dev"
#: The scope of the whole API: every route of the server, and every extension's.
FULL_SCOPE = "api"
#: The scope of a key that may only invoke the agent (``koboi keys create --peer``).
INVOKE_SCOPE = "invoke"


@dataclass(frozen=True)
class ApiKey:
    """What the store knows about a key (never the key itself)."""

    key_id: str
    principal: str
    name: str
    created_at: float
    revoked_at: float | None = None
    #: What the key may call (see the module): ``("api",)`` for a full key.
    scopes: tuple[str, ...] = (FULL_SCOPE,)
    #: Requests per minute this key may make (None: no limit of its own).
    rate_per_minute: int | None = None
    #: What the key's principal may spend on runs, in USD (None: no budget of its own).
    budget_usd: float | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def shown_prefix(self) -> str:
        """How the key starts: enough to recognise it, useless to use it."""
        return f"{PREFIX}{self.key_id}_…"


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: the owner of what it creates and all it may see."""

    name: str
    #: The key that authenticated the request; None for the development principal.
    key_id: str | None
    #: The key's scopes (see the module); the development principal has the full API.
    scopes: tuple[str, ...] = (FULL_SCOPE,)
    rate_per_minute: int | None = None
    budget_usd: float | None = None

    def allows(self, scope: str) -> bool:
        """Whether this principal's key may call a route that requires ``scope``."""
        return FULL_SCOPE in self.scopes or scope in self.scopes

    @property
    def label(self) -> str:
        return f"{self.name} (key {self.key_id})" if self.key_id else f"{self.name} (no key)"


def check_principal(name: str) -> str:
    if not _PRINCIPAL.match(name):
        raise KoboiError(
            f"principal {name!r} is not a valid name: use 1 to 64 letters, digits and . _ @ + - "
            "(starting with a letter or digit)"
        )
    return name


def check_scopes(scopes: Sequence[str]) -> tuple[str, ...]:
    """The scopes, checked (lower-case names) and without repeats; at least one."""
    checked: list[str] = []
    for scope in scopes:
        if not _SCOPE.match(scope):
            raise KoboiError(
                f"scope {scope!r} is not a valid name: use 1 to 64 lower-case letters, digits "
                "and _ . : - (starting with a letter)"
            )
        if scope not in checked:
            checked.append(scope)
    if not checked:
        raise KoboiError("a key needs at least one scope (api: the whole API)")
    return tuple(checked)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_token(token: str) -> str | None:
    """The key id of a well-formed key, else None."""
    match = _TOKEN.match(token)
    return match.group(1) if match else None


def _scopes_of(data: dict[str, Any]) -> tuple[str, ...]:
    # A key stored before scopes existed has the whole API, as it had then.
    scopes = data.get("scopes")
    return tuple(str(s) for s in scopes) if isinstance(scopes, list) and scopes else (FULL_SCOPE,)


def _key(key_id: str, data: dict[str, Any]) -> ApiKey:
    revoked = data.get("revoked_at")
    rate = data.get("rate_per_minute")
    budget = data.get("budget_usd")
    return ApiKey(
        key_id=key_id,
        principal=str(data.get("principal", "")),
        name=str(data.get("name", "")),
        created_at=float(data.get("created_at", 0.0)),
        revoked_at=float(revoked) if revoked is not None else None,
        scopes=_scopes_of(data),
        rate_per_minute=int(rate) if rate is not None else None,
        budget_usd=float(budget) if budget is not None else None,
    )


class KeyRing:
    """The API keys kept in one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.records = records_of(store, "API keys (koboi keys, koboi serve)")

    async def create(
        self,
        principal: str,
        *,
        name: str = "",
        scopes: Sequence[str] = (FULL_SCOPE,),
        rate_per_minute: int | None = None,
        budget_usd: float | None = None,
    ) -> tuple[ApiKey, str]:
        """Make a key for ``principal``; return it and the key text (shown once, never stored).

        ``scopes`` is what the key may call (see the module); ``rate_per_minute`` and
        ``budget_usd`` are the key's own limits (None: none)."""
        check_principal(principal)
        checked = check_scopes(scopes)
        if len(name) > 200:
            raise KoboiError("a key's name must be at most 200 characters")
        if rate_per_minute is not None and rate_per_minute < 1:
            raise KoboiError("a key's rate limit must be at least 1 request per minute")
        if budget_usd is not None and budget_usd < 0:
            raise KoboiError("a key's budget must be 0 USD or more")
        while True:
            key_id = secrets.token_hex(8)
            if await self.records.record_get(KIND, key_id) is None:
                break
        token = f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
        data = {
            "principal": principal,
            "name": name,
            "hash": hash_token(token),
            "created_at": time.time(),
            "revoked_at": None,
            "scopes": list(checked),
            "rate_per_minute": rate_per_minute,
            "budget_usd": budget_usd,
        }
        await self.records.record_put(KIND, key_id, data)
        return _key(key_id, data), token

    async def list(self) -> list[ApiKey]:
        """Every key, revoked ones too, oldest first."""
        keys = [_key(key_id, data) for key_id, data in await self.records.record_list(KIND)]
        return sorted(keys, key=lambda k: (k.created_at, k.key_id))

    async def revoke(self, ref: str) -> ApiKey:
        """Revoke the key ``ref`` (its id, or its id after ``koboi_``): it stops working at once."""
        match = _KEY_ID.match(ref.strip())
        if not match:
            raise KoboiError(
                f"{ref!r} is not a key id: give the 16 hex digits shown by 'koboi keys list'"
            )
        key_id = match.group(1)
        data = await self.records.record_get(KIND, key_id)
        if data is None:
            raise KoboiError(f"no key {key_id} in this store (see 'koboi keys list')")
        if data.get("revoked_at") is None:
            data = {**data, "revoked_at": time.time()}
            await self.records.record_put(KIND, key_id, data)
        return _key(key_id, data)

    async def active(self, key_id: str) -> Principal | None:
        """The principal of the key ``key_id`` while it is unrevoked; None once it is revoked or
        gone. For what authenticated with a key once and keeps a session of its own (a web
        console's login): the key's revocation ends that session too."""
        well_formed = len(key_id) == 16 and _KEY_ID.match(key_id) is not None
        data = await self.records.record_get(KIND, key_id) if well_formed else None
        if data is None or data.get("revoked_at") is not None:
            return None
        return Principal(name=str(data["principal"]), key_id=key_id)

    async def verify(self, token: str) -> Principal | None:
        """The principal of a valid, unrevoked key; None for anything else."""
        key_id = parse_token(token)
        data = await self.records.record_get(KIND, key_id) if key_id else None
        stored = str(data.get("hash", "")) if data else _DUMMY_HASH
        matches = hmac.compare_digest(hash_token(token), stored)
        if data is None or not matches or data.get("revoked_at") is not None:
            return None
        key = _key(str(key_id), data)
        return Principal(
            name=key.principal,
            key_id=key_id,
            scopes=key.scopes,
            rate_per_minute=key.rate_per_minute,
            budget_usd=key.budget_usd,
        )
