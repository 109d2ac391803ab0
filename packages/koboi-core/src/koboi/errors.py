"""The one exception hierarchy of koboi.

Every error a user can cause derives from :class:`KoboiError`. The CLI turns a
``KoboiError`` into one clear line and a non-zero exit code; anything else is a
bug and shows a traceback with ``--debug``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class KoboiError(Exception):
    """Base class of every error koboi raises on purpose."""


@dataclass(frozen=True)
class ConfigProblem:
    """One problem found in a config file.

    ``path`` is the dotted key path (``tools.builtin[2]``), ``message`` says what
    is wrong and ``hint`` what to do about it.
    """

    path: str
    message: str
    hint: str = ""

    def render(self, source: str | None = None) -> str:
        where = f"{source}: " if source else ""
        key = f"{self.path}: " if self.path else ""
        text = f"{where}{key}{self.message}"
        if self.hint:
            text += f" ({self.hint})"
        return text


class ConfigError(KoboiError):
    """A config file is invalid. Carries every problem found, not just the first."""

    def __init__(self, problems: Sequence[ConfigProblem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        lines = [p.render(source) for p in self.problems]
        if len(lines) == 1:
            message = lines[0]
        else:
            message = f"{len(lines)} problems in config:\n" + "\n".join(f"  - {x}" for x in lines)
        super().__init__(message)


class PluginError(KoboiError):
    """A plugin could not be loaded, is incompatible, or registered something twice."""


class RegistrationError(PluginError):
    """Two plugins registered the same name, or a registration was malformed."""


class ToolError(KoboiError):
    """A tool failed. The message is shown to the model as the tool result."""


class ToolArgumentError(ToolError):
    """The arguments a model gave for a tool did not validate."""


class ProviderError(KoboiError):
    """A model provider failed to produce a response.

    ``status`` is the HTTP status when the backend answered with one;
    ``retryable`` says whether the same request may succeed if sent again
    (connection errors, timeouts, 408/409/429, 5xx). ``emitted`` is true when
    the failure happened after part of a streamed reply already reached the
    caller: such a call is never retried or failed over, since the caller has
    seen text that a second attempt would repeat. ``retry_after`` is the wait,
    in seconds, the backend asked for (``Retry-After``), when it asked.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        emitted: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.emitted = emitted
        self.retry_after = retry_after


class StoreError(KoboiError):
    """The store could not read or write."""


class SessionNotFound(StoreError):
    """No session with that id exists in the store."""


class LeaseHeld(StoreError):
    """Another process is running the session."""

    def __init__(self, holder: str, expires_at: float, session_id: str | None = None) -> None:
        import time

        self.holder = holder
        self.expires_at = expires_at
        self.session_id = session_id
        left = max(0.0, expires_at - time.time())
        which = f"session {session_id}" if session_id else "session"
        super().__init__(
            f"{which} is being run by {holder} (its lease expires in {left:.0f} s unless renewed)"
        )


class FencedOut(StoreError):
    """This process's lease on a session was taken over; it must not write any more."""


class MissingCapability(StoreError):
    """A feature needs an optional store capability (keyed records, a job queue, a
    response cache) that the configured store does not have."""


class JobNotFound(StoreError):
    """No job with that id exists in the store."""


class IdempotencyConflict(StoreError):
    """An idempotency key was used again with a different request."""


class SandboxError(KoboiError):
    """The sandbox refused or failed to run something."""


class BudgetExceeded(KoboiError):
    """A run stopped because a configured budget was used up."""


class Suspend(Exception):
    """Raised by a tool (``ctx.suspend(...)``) to end the run *suspended*: it waits for input.

    The generic pause: waiting for a human, a peer agent, an MCP elicitation. The
    tool must raise it before it has done anything it would not do again: when the
    run is continued (``agent.resume(session_id, reply=...)``, or the next message of
    the session), the same call runs again with the reply in ``ctx.reply``.

    :param reason: what the run waits for, in words for a person.
    :param kind: a short word for what kind of input (``input``, ``approval``,
        ``elicitation``, ``peer``...).
    :param data: JSON-safe details for whoever answers (a form schema, a question).
    """

    def __init__(
        self, reason: str, *, kind: str = "input", data: dict[str, object] | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.data = dict(data or {})


def describe_error(exc: BaseException) -> str:
    """One line for an error: a :class:`KoboiError`'s own message, else its type and text.

    What the journal and the model see when something fails.
    """
    if isinstance(exc, KoboiError):
        return str(exc)
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
