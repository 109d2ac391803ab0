"""From the ``llm`` / ``providers`` config to the one provider the loop calls.

The loop sees a single :class:`~koboi.provider.ModelProvider`; around the
provider plugins, the kernel composes three general behaviours:

- :class:`PricedProvider` sets ``ModelResponse.cost_usd`` from the provider's
  ``pricing``, so budgets and reports see what each call cost;
- :class:`ProviderPool` tries named providers in order (failover) and skips
  one that keeps failing for a cooldown (circuit breaker); each failover and
  each breaker change is reported to the journal;
- :class:`CachedProvider` keeps answers in the store, keyed by a canonical
  hash of the request (``cache.mode``: live, record, replay, cache).

A ``context_window`` in a provider's section wraps it in :class:`StatedWindow`,
which states that window whatever the provider says.

Built as member -> priced -> pool -> cache: a cached answer keeps the cost it
had when it was recorded, and the cache key does not depend on which member
of a pool answered.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from koboi.errors import ConfigError, ConfigProblem, KoboiError, ProviderError, describe_error
from koboi.messages import (
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ResponseDone,
    TextDelta,
    Usage,
)
from koboi.provider import ModelProvider, report

if TYPE_CHECKING:
    from koboi.config import AgentConfig, Pricing, ProviderSection
    from koboi.plugins import Catalog
    from koboi.store import ResponseCache, Store

CacheMode = Literal["live", "record", "replay", "cache"]
CACHE_MODES: tuple[CacheMode, ...] = ("live", "record", "replay", "cache")
#: Bumped when the key recipe changes, so old entries are never served for new requests.
CACHE_KEY_VERSION = 1


def cost_usd(usage: Usage, pricing: Pricing) -> float:
    """What ``usage`` costs at ``pricing`` (US dollars per million tokens)."""
    cached = usage.cache_read_tokens + usage.cache_write_tokens
    uncached = max(0, usage.input_tokens - cached)
    read_price = pricing.input if pricing.cache_read is None else pricing.cache_read
    write_price = pricing.input if pricing.cache_write is None else pricing.cache_write
    total = (
        uncached * pricing.input
        + usage.cache_read_tokens * read_price
        + usage.cache_write_tokens * write_price
        + usage.output_tokens * pricing.output
    )
    return total / 1_000_000


class _Wrapper(ModelProvider):
    """A provider around another one; name and model are the inner one's."""

    def __init__(self, inner: ModelProvider) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model

    async def aclose(self) -> None:
        await self.inner.aclose()

    def context_window(self) -> int | None:
        return self.inner.context_window()

    def cache_identity(self) -> dict[str, Any]:
        return self.inner.cache_identity()


class PricedProvider(_Wrapper):
    """Sets ``cost_usd`` on each response from the provider's ``pricing``."""

    def __init__(self, inner: ModelProvider, pricing: Pricing) -> None:
        super().__init__(inner)
        self.pricing = pricing

    def _priced(self, response: ModelResponse) -> ModelResponse:
        return response.model_copy(update={"cost_usd": cost_usd(response.usage, self.pricing)})

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return self._priced(await self.inner.complete(request))

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        async for event in self.inner.stream(request):
            if isinstance(event, ResponseDone):
                event = ResponseDone(response=self._priced(event.response))
            yield event


class StatedWindow(_Wrapper):
    """A provider whose context window the config states (``context_window`` of its
    section), whatever the provider itself says."""

    def __init__(self, inner: ModelProvider, tokens: int) -> None:
        super().__init__(inner)
        self.tokens = tokens

    def context_window(self) -> int | None:
        return self.tokens

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self.inner.complete(request)

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        return self.inner.stream(request)


# -- failover -------------------------------------------------------------------


@dataclass
class _Breaker:
    """Consecutive failures of one pool member, and until when it is skipped."""

    failures: int = 0
    open_until: float | None = None


class ProviderPool(ModelProvider):
    """Named providers tried in order, with a circuit breaker per member.

    A call goes to the first member whose breaker is closed (or whose cooldown
    has passed: one trial call is let through, "half open"). When it fails
    before anything reached the caller, the next member is tried and the
    reason is reported (``failover``). ``failure_threshold`` consecutive
    failures open a member's breaker for ``cooldown_seconds``; a success
    closes it. A stream that fails after text was delivered is not failed
    over: the caller has seen text another model would not repeat.
    """

    name = "pool"

    def __init__(
        self,
        label: str,
        members: Sequence[tuple[str, ModelProvider]],
        *,
        failure_threshold: int = 3,
        cooldown_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not members:
            raise KoboiError(f"pool {label!r} has no members")
        self.label = label
        self.members = list(members)
        self.model = members[0][1].model
        self.failure_threshold = failure_threshold
        self.cooldown_seconds = cooldown_seconds
        self._clock = clock
        self.breakers = {name: _Breaker() for name, _ in members}

    def cache_identity(self) -> dict[str, Any]:
        return {"pool": [p.cache_identity() for _, p in self.members]}

    def context_window(self) -> int | None:
        # Any member may answer a call: the request must fit the smallest window known.
        known = [w for _, p in self.members if (w := p.context_window()) is not None]
        return min(known) if known else None

    async def aclose(self) -> None:
        errors: list[BaseException] = []
        for _, provider in self.members:
            try:
                await provider.aclose()
            except Exception as exc:  # close every member; report the first failure after
                errors.append(exc)
        if errors:
            raise errors[0]

    # -- breaker -------------------------------------------------------------

    def _candidates(self) -> list[tuple[str, ModelProvider]]:
        now = self._clock()
        ready = []
        for name, provider in self.members:
            breaker = self.breakers[name]
            if breaker.open_until is None or now >= breaker.open_until:
                ready.append((name, provider))
        if ready:
            return ready
        waits = ", ".join(
            f"{name} (for {max(0.0, (b.open_until or now) - now):.0f} s more)"
            for name, b in self.breakers.items()
        )
        raise ProviderError(
            f"pool {self.label}: every provider is being skipped after repeated failures: "
            f"{waits} (failure_threshold {self.failure_threshold}, cooldown_seconds "
            f"{self.cooldown_seconds:g})",
            retryable=True,
        )

    def _succeeded(self, name: str) -> None:
        breaker = self.breakers[name]
        if breaker.open_until is not None:
            report("breaker_closed", pool=self.label, provider=name)
        breaker.failures, breaker.open_until = 0, None

    def _failed(self, name: str, error: BaseException) -> None:
        breaker = self.breakers[name]
        breaker.failures += 1
        half_open = breaker.open_until is not None
        if half_open or breaker.failures >= self.failure_threshold:
            breaker.open_until = self._clock() + self.cooldown_seconds
            report(
                "breaker_open",
                pool=self.label,
                provider=name,
                failures=breaker.failures,
                cooldown_seconds=self.cooldown_seconds,
                reason=describe_error(error),
            )

    def _failover(self, name: str, error: BaseException, following: str | None) -> None:
        report(
            "failover",
            pool=self.label,
            provider=name,
            next=following,
            reason=describe_error(error),
        )

    def _all_failed(self, errors: list[tuple[str, BaseException]]) -> ProviderError:
        detail = "; ".join(f"{name}: {describe_error(exc)}" for name, exc in errors)
        retryable = all(isinstance(e, ProviderError) and e.retryable for _, e in errors)
        return ProviderError(
            f"pool {self.label}: every provider failed ({detail})", retryable=retryable
        )

    # -- calls ---------------------------------------------------------------

    async def complete(self, request: ModelRequest) -> ModelResponse:
        candidates = self._candidates()
        errors: list[tuple[str, BaseException]] = []
        for index, (name, provider) in enumerate(candidates):
            try:
                response = await provider.complete(request)
            except Exception as exc:  # any member failure is a failover, journaled
                self._failed(name, exc)
                errors.append((name, exc))
                following = candidates[index + 1][0] if index + 1 < len(candidates) else None
                self._failover(name, exc, following)
                continue
            self._succeeded(name)
            return response
        raise self._all_failed(errors)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        candidates = self._candidates()
        errors: list[tuple[str, BaseException]] = []
        for index, (name, provider) in enumerate(candidates):
            emitted = False
            try:
                async for event in provider.stream(request):
                    if isinstance(event, TextDelta):
                        emitted = True
                    yield event
                    if isinstance(event, ResponseDone):
                        self._succeeded(name)
                        return
                raise ProviderError(f"{name}: the stream ended without a response")
            except Exception as exc:  # as for complete(), unless text already reached the caller
                self._failed(name, exc)
                if emitted or (isinstance(exc, ProviderError) and exc.emitted):
                    raise
                errors.append((name, exc))
                following = candidates[index + 1][0] if index + 1 < len(candidates) else None
                self._failover(name, exc, following)
        raise self._all_failed(errors)


# -- the response cache ------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(identity: dict[str, Any], request: ModelRequest) -> str:
    """The cache key of ``request`` to a provider of ``identity``: a SHA-256 hex digest.

    It covers everything that decides the answer: the provider's identity
    (name, model, answer-changing settings such as temperature and seed), every
    message (with tool calls and provider data), the tools offered, the
    request's options and its response format.
    """
    payload = {
        "v": CACHE_KEY_VERSION,
        "provider": identity,
        "messages": [m.model_dump(mode="json", exclude_defaults=True) for m in request.messages],
        "tools": [t.model_dump(mode="json") for t in request.tools],
        "options": dict(request.options),
        "response_format": request.response_format,
    }
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def describe_request(request: ModelRequest) -> str:
    """A short, recognisable description of a request for error messages."""
    last_user = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    snippet = " ".join(last_user.split())
    if len(snippet) > 60:
        snippet = snippet[:57] + "..."
    tools = ", ".join(t.name for t in request.tools) or "none"
    return f"{len(request.messages)} messages, last user message {snippet!r}, tools: {tools}"


class CachedProvider(_Wrapper):
    """Answers from the store's response cache, per ``mode``.

    ``record`` always calls the model and keeps the answer; ``replay`` never
    calls it, and a request it has no answer for is an error that names the
    request; ``cache`` serves what it has and records what it lacks.
    """

    def __init__(self, inner: ModelProvider, store: ResponseCache, mode: CacheMode) -> None:
        super().__init__(inner)
        if mode == "live":
            raise KoboiError("CachedProvider needs a cache mode other than 'live'")
        self.store = store
        self.mode = mode
        self.identity = inner.cache_identity()

    def key(self, request: ModelRequest) -> str:
        return request_key(self.identity, request)

    async def _lookup(self, key: str, request: ModelRequest) -> ModelResponse | None:
        if self.mode == "record":
            return None
        entry = await self.store.cache_get(key)
        if entry is not None:
            try:
                response = ModelResponse.model_validate(entry["response"])
            except (KeyError, ValueError) as exc:
                raise ProviderError(
                    f"the response cache entry {key[:16]} is damaged ({exc}); delete it or "
                    "record it again"
                ) from None
            report("cache_hit", key=key[:16])
            return response
        if self.mode == "replay":
            raise ProviderError(
                f"replay: no recorded response for this request (cache key {key[:16]}; "
                f"{self.identity_text()}; {describe_request(request)}); record it first "
                "with cache.mode: record"
            )
        return None

    def identity_text(self) -> str:
        return canonical_json(self.identity)

    async def _keep(self, key: str, response: ModelResponse) -> None:
        await self.store.cache_put(
            key,
            {
                "response": response.model_dump(mode="json", exclude_defaults=True),
                "provider": self.identity,
                "created_at": time.time(),
            },
        )

    async def complete(self, request: ModelRequest) -> ModelResponse:
        key = self.key(request)
        cached = await self._lookup(key, request)
        if cached is not None:
            return cached
        response = await self.inner.complete(request)
        await self._keep(key, response)
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        key = self.key(request)
        cached = await self._lookup(key, request)
        if cached is not None:
            if cached.message.content:
                yield TextDelta(text=cached.message.content)
            yield ResponseDone(response=cached)
            return
        async for event in self.inner.stream(request):
            if isinstance(event, ResponseDone):
                await self._keep(key, event.response)
            yield event


# -- assembly ---------------------------------------------------------------------


def cache_mode(config: AgentConfig, override: str | None = None) -> CacheMode:
    """The response cache mode: ``override`` when given (a caller's explicit choice,
    ``koboi run --cache-mode``), else what the config was validated with
    (``KOBOI_CACHE_MODE`` when set, else ``cache.mode``)."""
    chosen = (override or config.cache_mode or config.cache.mode).strip().lower()
    for mode in CACHE_MODES:
        if chosen == mode:
            return mode
    raise ConfigError(
        [
            ConfigProblem(
                "cache.mode",
                f"'{chosen}' is not a cache mode",
                f"use one of {', '.join(CACHE_MODES)}",
            )
        ]
    )


def _plugin_provider(
    catalog: Catalog, section: ProviderSection, options: Any, where: str
) -> ModelProvider:
    entry = catalog.providers.get(section.provider or "")
    if entry is None:
        raise KoboiError(f"{where}: provider {section.provider!r} is not installed")
    made = entry.target(options)
    if not isinstance(made, ModelProvider):
        raise KoboiError(
            f"provider plugin {entry.plugin!r} returned {made!r}, not a koboi.ModelProvider"
        )
    provider: ModelProvider = made
    if section.pricing is not None:
        provider = PricedProvider(provider, section.pricing)
    if section.context_window is not None:
        provider = StatedWindow(provider, section.context_window)
    return provider


def build_model(
    config: AgentConfig,
    catalog: Catalog,
    store: Store | None,
    *,
    provider: ModelProvider | None = None,
    mode: str | None = None,
) -> ModelProvider:
    """The provider the loop calls for ``config``: plugin(s), prices, pool and cache.

    ``provider``, when given (``KoboiAgent(provider=...)``), replaces the
    configured plugin or pool; the config's prices and cache mode still apply.
    ``mode`` overrides the config's cache mode. ``store`` holds the response cache
    (a store with the response-cache capability); it must be open before the first call.
    """
    section = config.llm
    label = config.llm_name or "llm"
    if provider is not None:
        if section.pricing is not None:
            provider = PricedProvider(provider, section.pricing)
        if section.context_window is not None:
            provider = StatedWindow(provider, section.context_window)
    elif section.pool is not None:
        members = [
            (
                name,
                _plugin_provider(
                    catalog,
                    config.providers[name],
                    config.provider_options.get(name),
                    f"providers.{name}",
                ),
            )
            for name in section.pool
        ]
        provider = ProviderPool(
            label,
            members,
            failure_threshold=section.failure_threshold,
            cooldown_seconds=section.cooldown_seconds,
        )
        if section.context_window is not None:
            provider = StatedWindow(provider, section.context_window)
    else:
        provider = _plugin_provider(catalog, section, config.llm_options, label)
    chosen = cache_mode(config, mode)
    if chosen != "live":
        if store is None:
            raise KoboiError(f"cache.mode {chosen} needs a store to keep answers in")
        from koboi.store import cache_of

        cache = cache_of(store, f"the response cache (cache.mode: {chosen})")
        provider = CachedProvider(provider, cache, chosen)
    return provider
