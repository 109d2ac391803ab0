"""Console logins: who a browser is, kept in the store, never the API key itself.

Logging in checks an API key exactly as the server's ``/v1`` routes do
(:meth:`koboi_server.keys.KeyRing.verify`); the console then gives the browser a
login token of its own (256 random bits, in an HttpOnly, SameSite=Strict cookie) and
keeps, in the store's keyed records (kind ``console.login``, shared by every
replica), the SHA-256 of that token with the principal, the key's id, the login's
CSRF token and its expiry. Every request checks the record *and* that the key is
still unrevoked (:meth:`~koboi_server.keys.KeyRing.active`): revoking the key ends
its logins at once, on every replica.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from koboi.store import records_of

if TYPE_CHECKING:
    from koboi.store import Store
    from koboi_server.keys import Principal

KIND = "console.login"
#: The login cookie (its value is the login token) and the login form's CSRF cookie.
COOKIE = "koboi_console"
LOGIN_CSRF_COOKIE = "koboi_console_login"
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{43}$")


@dataclass(frozen=True)
class Login:
    """One browser's login."""

    principal: str
    key_id: str
    #: The synchronizer token every form of this login carries.
    csrf: str
    expires_at: float


def new_token() -> str:
    """256 random bits, URL-safe (a login token, a CSRF token)."""
    return secrets.token_urlsafe(32)


def well_formed(token: str | None) -> bool:
    return token is not None and _TOKEN.match(token) is not None


def _key(token: str) -> str:
    # Stored by hash: whoever reads the store cannot use a login from it.
    return hashlib.sha256(token.encode()).hexdigest()


class Logins:
    """The console logins of one store."""

    def __init__(self, store: Store, *, lifetime_seconds: float) -> None:
        self.records = records_of(store, "console logins (koboi-console)")
        self.lifetime = lifetime_seconds

    async def open(self, principal: Principal) -> tuple[str, Login]:
        """A new login for ``principal`` (authenticated by its key); its token, shown once."""
        if principal.key_id is None:
            raise ValueError("a console login needs an API key")
        token = new_token()
        login = Login(principal.name, principal.key_id, new_token(), time.time() + self.lifetime)
        data = {
            "principal": login.principal,
            "key_id": login.key_id,
            "csrf": login.csrf,
            "created_at": time.time(),
            "expires_at": login.expires_at,
        }
        await self.records.record_put(KIND, _key(token), data, expires_at=login.expires_at)
        return token, login

    async def find(self, token: str | None) -> Login | None:
        """The unexpired login of ``token``; None for anything else."""
        if token is None or not well_formed(token):
            return None
        data = await self.records.record_get(KIND, _key(token))
        if data is None or float(data.get("expires_at", 0.0)) <= time.time():
            return None
        return Login(
            principal=str(data["principal"]),
            key_id=str(data["key_id"]),
            csrf=str(data["csrf"]),
            expires_at=float(data["expires_at"]),
        )

    async def close(self, token: str | None) -> None:
        """End the login of ``token`` (logging out)."""
        if token is not None and well_formed(token):
            await self.records.record_delete(KIND, _key(token))
