"""API keys: created once and shown once, stored hashed in the store, checked in constant time.

A key reads ``koboi_<key id>_<secret>``. The key id (16 hex digits) is not
secret: it names the key in ``koboi keys list`` and ``revoke``. The store
keeps, per key id, the principal the key acts as and the SHA-256 of the
whole key — never the key itself. The secret is 256 random bits, so a plain
hash is as good as a slow one here: nobody can guess their way to a preimage.

Keys live in the store's keyed records (kind ``server.api_key``), so every
replica sharing the store sees a new or revoked key at its next request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from koboi.errors import KoboiError

if TYPE_CHECKING:
    from koboi.store import Store

KIND = "server.api_key"
PREFIX = "koboi_"
_TOKEN = re.compile(r"^koboi_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
_KEY_ID = re.compile(r"^(?:koboi_)?([0-9a-f]{16})$")
_PRINCIPAL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$")
#: Compared against when a key id is unknown, so that case costs the same work.
_DUMMY_HASH = hashlib.sha256(b"koboi: no such key").hexdigest()

DEV_PRINCIPAL = "dev"


@dataclass(frozen=True)
class ApiKey:
    """What the store knows about a key (never the key itself)."""

    key_id: str
    principal: str
    name: str
    created_at: float
    revoked_at: float | None = None

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


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_token(token: str) -> str | None:
    """The key id of a well-formed key, else None."""
    match = _TOKEN.match(token)
    return match.group(1) if match else None


def _key(key_id: str, data: dict[str, Any]) -> ApiKey:
    revoked = data.get("revoked_at")
    return ApiKey(
        key_id=key_id,
        principal=str(data.get("principal", "")),
        name=str(data.get("name", "")),
        created_at=float(data.get("created_at", 0.0)),
        revoked_at=float(revoked) if revoked is not None else None,
    )


class KeyRing:
    """The API keys kept in one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def create(self, principal: str, *, name: str = "") -> tuple[ApiKey, str]:
        """Make a key for ``principal``; return it and the key text (shown once, never stored)."""
        check_principal(principal)
        if len(name) > 200:
            raise KoboiError("a key's name must be at most 200 characters")
        while True:
            key_id = secrets.token_hex(8)
            if await self.store.record_get(KIND, key_id) is None:
                break
        token = f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
        data = {
            "principal": principal,
            "name": name,
            "hash": hash_token(token),
            "created_at": time.time(),
            "revoked_at": None,
        }
        await self.store.record_put(KIND, key_id, data)
        return _key(key_id, data), token

    async def list(self) -> list[ApiKey]:
        """Every key, revoked ones too, oldest first."""
        keys = [_key(key_id, data) for key_id, data in await self.store.record_list(KIND)]
        return sorted(keys, key=lambda k: (k.created_at, k.key_id))

    async def revoke(self, ref: str) -> ApiKey:
        """Revoke the key ``ref`` (its id, or its id after ``koboi_``): it stops working at once."""
        match = _KEY_ID.match(ref.strip())
        if not match:
            raise KoboiError(
                f"{ref!r} is not a key id: give the 16 hex digits shown by 'koboi keys list'"
            )
        key_id = match.group(1)
        data = await self.store.record_get(KIND, key_id)
        if data is None:
            raise KoboiError(f"no key {key_id} in this store (see 'koboi keys list')")
        if data.get("revoked_at") is None:
            data = {**data, "revoked_at": time.time()}
            await self.store.record_put(KIND, key_id, data)
        return _key(key_id, data)

    async def verify(self, token: str) -> Principal | None:
        """The principal of a valid, unrevoked key; None for anything else."""
        key_id = parse_token(token)
        data = await self.store.record_get(KIND, key_id) if key_id else None
        stored = str(data.get("hash", "")) if data else _DUMMY_HASH
        matches = hmac.compare_digest(hash_token(token), stored)
        if data is None or not matches or data.get("revoked_at") is not None:
            return None
        return Principal(name=str(data["principal"]), key_id=key_id)
