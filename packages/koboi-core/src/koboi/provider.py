"""The ``ModelProvider`` contract.

A provider turns a :class:`~koboi.messages.ModelRequest` into a
:class:`~koboi.messages.ModelResponse`, either at once (:meth:`complete`) or
as a stream of events (:meth:`stream`) that ends with exactly one
:class:`~koboi.messages.ResponseDone` carrying the whole response.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator

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
