"""The ``ModelProvider`` contract.

A provider turns a :class:`~koboi.messages.ModelRequest` into a
:class:`~koboi.messages.ModelResponse`, either at once (:meth:`complete`) or
as a stream of events (:meth:`stream`) that ends with exactly one
:class:`~koboi.messages.ResponseDone` carrying the whole response.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from koboi.messages import ModelRequest, ModelResponse, ModelStreamEvent, ResponseDone, TextDelta


class ModelProvider(ABC):
    """A model behind some API (or a script)."""

    #: Registered provider name (``openai``, ``scripted``...).
    name: str = "provider"
    #: The model this instance talks to.
    model: str = ""

    @abstractmethod
    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Return the full response. Raise :class:`~koboi.errors.ProviderError` on failure."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Yield text deltas as they arrive, then one ``ResponseDone``.

        The default implementation calls :meth:`complete` and yields its text as
        one delta; providers with a streaming API override it. The text of all
        deltas must equal the final message's content.
        """
        response = await self.complete(request)
        if response.message.content:
            yield TextDelta(text=response.message.content)
        yield ResponseDone(response=response)

    async def aclose(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Release connections. Called once when the agent closes."""

    def context_window(self) -> int | None:
        """How many tokens this model's context window holds (prompt and answer
        together), or None when the provider does not know.

        Providers state it for the models they know; a config overrides it with the
        kernel-owned key ``context_window`` of the provider's section (``llm`` or a
        ``providers`` entry). Context strategies budget the request with it.
        """
        return None

    def cache_identity(self) -> dict[str, Any]:
        """What, besides the request, decides this provider's answer (JSON-safe).

        The response cache keys answers by a hash of this and the request, so
        two providers that would answer the same request differently must
        differ here. The default is the provider and model name; providers
        with answer-changing settings (a temperature in their config...) add
        them. Never include a credential.
        """
        return {"provider": self.name, "model": self.model}


@dataclass(frozen=True)
class ProviderReport:
    """Something a provider did on the way to an answer that the journal should show.

    ``kind`` is a short word (``retry``, ``failover``, ``breaker_open``,
    ``cache_hit``...); ``data`` holds JSON-safe details, never a credential.
    """

    kind: str
    data: dict[str, Any] = field(default_factory=dict)


_reports: ContextVar[list[ProviderReport] | None] = ContextVar(
    "koboi_provider_reports", default=None
)


def report(kind: str, **data: Any) -> None:
    """Tell the journal about a retry, a failover or a cache decision during a model call.

    Providers, pools and caches call this while they work; the loop collects the
    reports of each model call and journals each as a ``provider_event`` before
    the call's outcome. Outside a run (a provider used on its own) it does
    nothing, so calling it is always safe.
    """
    sink = _reports.get()
    if sink is not None:
        sink.append(ProviderReport(kind, dict(data)))


@contextlib.contextmanager
def collect_reports() -> Iterator[list[ProviderReport]]:
    """Collect the :func:`report` calls made inside the block (the loop's side of the seam)."""
    sink: list[ProviderReport] = []
    token = _reports.set(sink)
    try:
        yield sink
    finally:
        _reports.reset(token)
