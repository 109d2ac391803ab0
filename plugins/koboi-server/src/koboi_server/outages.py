"""Store failures, told apart from bugs, and said once in the log.

A store that fails — a database restarted, a connection cut, a full disk — fails
every background loop of the server at once (job workers, recovery, webhooks) on
every poll until it is back. That is news once: :class:`StoreOutage` logs one
warning when the first loop meets it, nothing while it lasts, and one line when
the store answers again. A bug is different: :class:`LoopErrors` logs it with its
traceback (a :class:`~koboi.errors.KoboiError` with its line), once per distinct
error while it repeats.

:func:`is_store_failure` is the test: a :class:`~koboi.errors.StoreError` other than
the store's *answers* (a lease held or taken over, no such session or job, a key used
twice, a missing capability), or an exception that came out of a store call
(:func:`mark_store_failure`, which the job runner's store wrapper applies: what the
kernel re-raises when its journal write fails, whatever its type), also when it is
the cause or context of the exception at hand.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable

import anyio

from koboi.errors import (
    FencedOut,
    IdempotencyConflict,
    JobNotFound,
    KoboiError,
    LeaseHeld,
    MissingCapability,
    SessionNotFound,
    StoreError,
    describe_error,
)
from koboi.logs import get_logger

log = get_logger("koboi.server")

#: StoreErrors that are the store's answer about the data (or its lack of a capability),
#: not a failure of the store.
_ANSWERS = (
    FencedOut,
    LeaseHeld,
    SessionNotFound,
    JobNotFound,
    IdempotencyConflict,
    MissingCapability,
)

_MARK = "_koboi_store_failure"

#: How far along causes, contexts and groups to look.
_DEPTH = 16


def mark_store_failure(exc: BaseException) -> None:
    """Note that ``exc`` came out of a store call (whatever its type)."""
    with contextlib.suppress(AttributeError, TypeError):
        setattr(exc, _MARK, True)


def is_store_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is (or was caused by) a failure of the store itself, which may pass."""
    stack: list[BaseException] = [exc]
    seen: set[int] = set()
    while stack and len(seen) < _DEPTH:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
            continue
        if getattr(current, _MARK, False):
            return True
        if isinstance(current, _ANSWERS):
            continue
        if isinstance(current, StoreError):
            return True
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False


class StoreOutage:
    """Whether the store is failing, as the server's background loops see it.

    One warning when the first loop reports a failure, nothing more while any loop
    still fails, one line when every loop that failed has had the store answer again.
    """

    def __init__(self) -> None:
        self._since: float | None = None
        self._failing: set[str] = set()

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def failed(self, where: str, exc: BaseException) -> None:
        """``where`` (a loop's name) met a store failure."""
        self._failing.add(where)
        if self._since is not None:
            log.debug("%s: the store still fails: %s", where, describe_error(exc))
            return
        self._since = time.monotonic()
        log.warning(
            "the store fails (%s: %s); the server keeps retrying, and says when it answers again",
            where,
            _one_line(exc),
        )

    def answered(self, where: str) -> None:
        """``where`` had the store answer."""
        self._failing.discard(where)
        if self._since is None or self._failing:
            return
        log.warning("the store answers again, after %.1f s", time.monotonic() - self._since)
        self._since = None


class LoopErrors:
    """What one background loop logs of its failures: store failures through the shared
    :class:`StoreOutage`, other errors with their traceback, once while they repeat."""

    def __init__(self, name: str, outage: StoreOutage) -> None:
        self.name = name
        self.outage = outage
        self._last_bug: tuple[type[BaseException], str] | None = None

    def ok(self) -> None:
        """The loop's pass went through."""
        self.outage.answered(self.name)
        self._last_bug = None

    def failed(self, exc: BaseException) -> None:
        """The loop's pass failed with ``exc``."""
        if is_store_failure(exc):
            self.outage.failed(self.name, exc)
            return
        signature = (type(exc), str(exc))
        if signature == self._last_bug:
            log.debug("%s failed again: %s", self.name, _one_line(exc))
            return
        self._last_bug = signature
        if isinstance(exc, KoboiError):
            # An error the code knows how to say (a refusal, a bad record): its line is enough.
            log.warning("%s failed (retried): %s", self.name, _one_line(exc))
        else:
            log.error("%s failed (retried; said once while it repeats)", self.name, exc_info=exc)


def _one_line(exc: BaseException) -> str:
    return " ".join(describe_error(exc).split())


async def supervised(
    name: str,
    outage: StoreOutage,
    loop: Callable[..., Awaitable[object]],
    *args: object,
    first_delay: float = 1.0,
    max_delay: float = 30.0,
) -> None:
    """Run the background ``loop(*args)``, restarting it when it raises.

    Each loop catches its own failures; this is the net under them. An exception
    escaping a task of the app's task group would end the whole lifespan (the
    store closed under requests still being served), so a loop that escapes is
    logged (through :class:`LoopErrors`: once while the same error repeats) and
    started again after a pause that doubles up to ``max_delay``. A loop that
    returns is done; cancellation goes through.
    """
    errors = LoopErrors(name, outage)
    delay = first_delay
    while True:
        try:
            await loop(*args)
            return
        except Exception as exc:  # the net under the loop: logged, then the loop restarts
            errors.failed(exc)
        await anyio.sleep(delay)
        delay = min(delay * 2, max_delay)
