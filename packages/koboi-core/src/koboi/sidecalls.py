"""Side model calls: a plugin asks the run's own model stack something, journaled.

A summary for a context strategy, a query rewrite for retrieval, a routing
decision, a plan: ``await run.model.complete(request, purpose="summary")`` goes
through the run's provider stack (pool, retries, pricing, response cache), is
journaled (``side_call_started`` before it, ``side_call_finished`` with the whole
response after), counts against the run's budgets, and is answered from the
journal when the same side call (same purpose, same request) was already
answered in the run being resumed, so resume and replay do not ask again.

While a side call runs, :func:`call_purpose` says what it is for: a provider that
answers from a recording (replay) tells side calls from the loop's own.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from koboi import journal as J
from koboi.errors import BudgetExceeded, KoboiError, ProviderError, describe_error
from koboi.messages import Message, ModelRequest, ModelResponse, ToolSpec, Usage
from koboi.provider import collect_reports

if TYPE_CHECKING:
    from koboi.provider import ModelProvider, ProviderReport

_PURPOSE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")

_purpose: ContextVar[str | None] = ContextVar("koboi_call_purpose", default=None)


def call_purpose() -> str | None:
    """The purpose of the side call being made in this task; None for the loop's calls."""
    return _purpose.get()


@contextlib.contextmanager
def purpose_of_call(purpose: str | None) -> Iterator[None]:
    token = _purpose.set(purpose)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            _purpose.reset(token)


class BudgetUse(NamedTuple):
    """A budget that is used up: which (``max_total_tokens``, ``max_cost_usd``,
    ``max_iterations``), its limit, how much was used, and whose it is (None: the
    run's own; else the session of the parent run whose budget a child shares)."""

    budget: str
    limit: float
    used: float
    of_session: str | None = None

    def describe(self) -> str:
        unit = {"max_total_tokens": "tokens", "max_iterations": "model calls"}.get(
            self.budget, "USD"
        )
        whose = (
            f"the run tree of session {self.of_session} used" if self.of_session else "the run used"
        )
        return f"{whose} {self.used:g} {unit}, its limit is {self.limit:g} (agent.{self.budget})"


class SideCallHost(Protocol):
    """What :class:`RunModel` needs of the run (implemented by the loop)."""

    step: int

    @property
    def provider(self) -> ModelProvider: ...

    async def record(self, type_: str, data: Mapping[str, Any], *, commit: bool = True) -> int: ...

    def over_budget(self) -> BudgetUse | None: ...

    def charge(self, usage: Usage, cost_usd: float) -> None: ...

    def answered_side_call(self, purpose: str, key: str) -> Mapping[str, Any] | None: ...

    async def record_reports(
        self, step: int, reports: Sequence[ProviderReport], purpose: str | None = None
    ) -> None: ...


class RunModel:
    """The run's model, for side calls. Get it as ``run.model`` (or ``ctx.model`` in a tool)."""

    def __init__(self, host: SideCallHost) -> None:
        self._host = host

    @property
    def context_window(self) -> int | None:
        """Tokens the run's model stack takes in one call (prompt and answer), as the
        provider states it or the config overrides it (``context_window``); None when
        unknown. A pool states the smallest window of its members."""
        return self._host.provider.context_window()

    async def complete(self, request: ModelRequest, *, purpose: str) -> ModelResponse:
        """Ask the run's model stack ``request`` for ``purpose`` (a short word:
        ``summary``, ``rag.rewrite``...); return the whole response.

        Raises :class:`~koboi.errors.BudgetExceeded` when the run's budget is already
        used up, and :class:`~koboi.errors.ProviderError` when the call fails (both
        journaled). The response is not shown to the model unless the plugin adds it.
        """
        if not isinstance(purpose, str) or not _PURPOSE.match(purpose):
            raise KoboiError(
                f"side call purpose {purpose!r} must be a short lower-case word "
                "(letters, digits, '_', '.', '-'), such as 'summary'"
            )
        host = self._host
        over = host.over_budget()
        if over is not None:
            raise BudgetExceeded(f"no side call ({purpose}): budget used up: {over.describe()}")
        from koboi.models import request_key

        key = request_key(host.provider.cache_identity(), request)
        answered = host.answered_side_call(purpose, key)
        if answered is not None:
            # Answered before the process died: the journal has it, nobody asks again.
            return ModelResponse.model_validate(answered)
        step = host.step
        await host.record(J.SIDE_CALL_STARTED, {"step": step, "purpose": purpose, "key": key})
        with collect_reports() as reports, purpose_of_call(purpose):
            try:
                response = await host.provider.complete(request)
            except Exception as exc:  # journaled as the side call's failure, then raised
                error = describe_error(exc)
                await host.record_reports(step, reports, purpose)
                await host.record(
                    J.SIDE_CALL_FAILED,
                    {"step": step, "purpose": purpose, "key": key, "error": error},
                    commit=False,
                )
                if isinstance(exc, ProviderError):
                    raise
                raise ProviderError(f"side call ({purpose}) failed: {error}") from exc
        await host.record_reports(step, reports, purpose)
        await host.record(
            J.SIDE_CALL_FINISHED,
            {
                "step": step,
                "purpose": purpose,
                "key": key,
                "response": response.model_dump(mode="json", exclude_defaults=True),
            },
            commit=False,
        )
        host.charge(response.usage, response.cost_usd or 0.0)
        return response

    async def ask(
        self,
        prompt: str,
        *,
        purpose: str,
        system: str = "",
        tools: Sequence[ToolSpec] = (),
    ) -> str:
        """:meth:`complete` with one user message (and a system prompt); its text."""
        messages = [Message.system(system)] if system else []
        messages.append(Message.user(prompt))
        request = ModelRequest(messages=messages, tools=list(tools))
        response = await self.complete(request, purpose=purpose)
        return response.message.content
