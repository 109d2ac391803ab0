"""A key's spending budget: what its principal's runs may cost, in USD.

A key created with ``budget_usd`` (``koboi keys create --budget-usd``) carries it
to every request (:class:`~koboi_server.keys.Principal`). Routes that start runs
(chat, jobs, and extensions that run the agent) ask :func:`check_budget` first:
once the principal's sessions have cost the budget, new runs are refused with 402
``budget_exhausted``. A run already going is not stopped: the budget is checked
between runs, so the last one may overshoot it by its own cost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from koboi.journal import totals_of
from koboi_server.errors import ApiError

if TYPE_CHECKING:
    from koboi.store import Store
    from koboi_server.keys import Principal

#: Sessions read to sum what a principal spent (newest first).
MAX_SESSIONS = 100_000


async def spent_usd(store: Store, owner: str) -> float:
    """What the sessions of ``owner`` have cost, in USD (from the store's session totals)."""
    total = 0.0
    for info in await store.list_sessions(owner=owner, limit=MAX_SESSIONS):
        totals = info.totals
        if totals is None:
            totals = totals_of(await store.read(info.id))
        total += float(totals.cost_usd or 0.0)
    return total


async def check_budget(store: Store, principal: Principal) -> None:
    """402 ``budget_exhausted`` when the principal's key has a budget and it is spent."""
    if principal.budget_usd is None:
        return
    spent = await spent_usd(store, principal.name)
    if spent >= principal.budget_usd:
        raise ApiError(
            402,
            "budget_exhausted",
            f"this key's budget of {principal.budget_usd:g} USD is spent ({spent:.4f} USD "
            f"used by principal {principal.name!r}); ask the operator for a new key",
        )


__all__ = ["check_budget", "spent_usd"]
