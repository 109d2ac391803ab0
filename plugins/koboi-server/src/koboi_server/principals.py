"""One principal only, on a sandbox that cannot keep sessions apart.

A server's principals (the owners of its API keys) each see only their own
sessions through the API; what their *tools* can reach is the sandbox's
business. A sandbox whose :attr:`koboi.Sandbox.isolates_sessions` is False
(``passthrough``, or ``restricted`` on a machine that cannot confine: see
``koboi sandbox check``) lets one session's tools read and write another's
files, so on such a sandbox the server serves one principal:

- at start, a store with active keys of two or more principals refuses the
  start, naming them and the ways out;
- while it runs, the principal of the oldest active key is the one served (the
  same on every replica); a request with another principal's key is refused
  with 403 ``single_principal``, which says why and what to change.

``server.shared_sandbox: true`` is the operator saying "serve several principals
anyway; they trust each other's tools": the check is then off, and the start
logs a warning saying what that means.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import anyio

from koboi.errors import KoboiError
from koboi.logs import get_logger
from koboi_server.errors import ApiError
from koboi_server.keys import ApiKey, KeyRing, Principal

log = get_logger("koboi.server")

#: How long the served principal is trusted before the keys are read again (on a
#: request of another principal only: the served principal's requests read nothing).
RECHECK_SECONDS = 5.0


def _ways_out(sandbox: str) -> str:
    return (
        "use a sandbox that isolates sessions ('sandbox.backend: restricted' where "
        "'koboi sandbox check' reports sessions isolated), revoke the other principals' "
        "keys, or set 'server.shared_sandbox: true' if they may reach each other's files"
        f" (sandbox {sandbox!r} does not keep sessions apart)"
    )


def served_principal(keys: Sequence[ApiKey]) -> str | None:
    """The principal of the oldest active key (None when there is none)."""
    active = sorted((k for k in keys if not k.revoked), key=lambda k: (k.created_at, k.key_id))
    return active[0].principal if active else None


class PrincipalGate:
    """Decides, per request, whether its principal may use this server (see the module)."""

    def __init__(
        self,
        keys: Callable[[], KeyRing],
        *,
        sessions_isolated: bool,
        shared_sandbox: bool,
        sandbox: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keys = keys
        self.sessions_isolated = sessions_isolated
        self.shared_sandbox = shared_sandbox
        self.sandbox = sandbox
        self._clock = clock
        self._served: str | None = None
        self._read_at = -float("inf")
        self._lock = anyio.Lock()

    @property
    def open(self) -> bool:
        """True when any principal may use the server."""
        return self.sessions_isolated or self.shared_sandbox

    async def check_start(self, *, announce: bool = True) -> None:
        """Refuse the start when active keys belong to several principals; with
        ``announce``, log what the server will do (once per start)."""
        if self.sessions_isolated:
            return
        keys = await self.keys().list()
        principals = sorted({k.principal for k in keys if not k.revoked})
        if self.shared_sandbox:
            if len(principals) > 1 and announce:
                log.warning(
                    "server.shared_sandbox is on: the tools of %s run in sandbox %r, which "
                    "does not keep sessions apart; each principal's tools can read and write "
                    "the others' files",
                    ", ".join(principals),
                    self.sandbox,
                )
            return
        if len(principals) > 1:
            raise KoboiError(
                f"this server would serve {len(principals)} principals "
                f"({', '.join(principals)}) on a sandbox that cannot keep their sessions "
                f"apart: {_ways_out(self.sandbox)}"
            )
        self._served, self._read_at = served_principal(keys), self._clock()
        if not announce:
            return
        log.warning(
            "sandbox %r does not keep sessions apart: this server serves one principal "
            "(%s); requests with another principal's key are refused",
            self.sandbox,
            self._served or "the owner of the first key created",
        )

    async def admit(self, principal: Principal) -> ApiError | None:
        """None when ``principal`` may go on; the 403 to answer otherwise."""
        if self.open or principal.name == self._served:
            return None
        async with self._lock:
            if self._clock() - self._read_at >= RECHECK_SECONDS or self._served is None:
                keys = await self.keys().list()
                self._served, self._read_at = served_principal(keys), self._clock()
            served = self._served
        if served is None or principal.name == served:
            if served is None:  # no key at all (dev_no_auth): the development principal
                self._served = principal.name
            return None
        return ApiError(
            403,
            "single_principal",
            f"this server serves principal {served!r} only: its sandbox cannot keep "
            f"sessions of different principals apart; {_ways_out(self.sandbox)}",
        )


__all__ = ["PrincipalGate", "served_principal"]
