"""Pricing, pools (failover, circuit breaker), the response cache and budgets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from koboi import KoboiAgent
from koboi import journal as J
from koboi.config import Pricing, validate_config
from koboi.errors import ConfigError, ProviderError
from koboi.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ResponseDone,
    TextDelta,
    ToolSpec,
    Usage,
)
from koboi.models import (
    CachedProvider,
    PricedProvider,
    ProviderPool,
    cost_usd,
    request_key,
)
from koboi.provider import ModelProvider, collect_reports, report
from koboi.store import InMemoryStore
from koboi_scripted import ScriptedProvider

pytestmark = pytest.mark.anyio


class Member(ModelProvider):
    """A pool member whose outcome each test sets: fail (before or after text) or answer."""

    def __init__(self, name: str, *, fail: bool = False, fail_after_text: bool = False) -> None:
        self.name = name
        self.model = f"{name}-model"
        self.fail = fail
        self.fail_after_text = fail_after_text
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.fail:
            raise ProviderError(f"{self.name} is down (HTTP 503)", status=503, retryable=True)
        return ModelResponse(message=Message.assistant(f"answer from {self.name}"))

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        self.calls += 1
        if self.fail and not self.fail_after_text:
            raise ProviderError(f"{self.name} is down (HTTP 503)", status=503, retryable=True)
        yield TextDelta(text=f"answer from {self.name}")
        if self.fail_after_text:
            raise ProviderError(f"{self.name} broke mid-stream", emitted=True)
        yield ResponseDone(
            response=ModelResponse(message=Message.assistant(f"answer from {self.name}"))
        )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


REQUEST = ModelRequest(messages=[Message.user("hi")])


# -- pricing -----------------------------------------------------------------------


def test_cost_counts_cached_tokens_at_their_own_price() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=200_000, cache_read_tokens=400_000)
    pricing = Pricing(input=2.0, output=10.0, cache_read=0.5)
    # 600k uncached * 2 + 400k cached * 0.5 + 200k out * 10, per million
    assert cost_usd(usage, pricing) == pytest.approx(1.2 + 0.2 + 2.0)


def test_cache_prices_default_to_the_input_price() -> None:
    usage = Usage(input_tokens=100, cache_write_tokens=100)
    assert cost_usd(usage, Pricing(input=3.0)) == pytest.approx(300 / 1_000_000)


async def test_priced_provider_sets_cost_on_complete_and_stream() -> None:
    turn = {"reply": "ok", "usage": {"input_tokens": 1000, "output_tokens": 500}}
    priced = PricedProvider(ScriptedProvider.from_turns([turn, turn]), Pricing(input=1, output=4))
    done = await priced.complete(REQUEST)
    assert done.cost_usd == pytest.approx((1000 * 1 + 500 * 4) / 1e6)
    events = [e async for e in priced.stream(REQUEST)]
    final = events[-1]
    assert isinstance(final, ResponseDone)
    assert final.response.cost_usd == pytest.approx(done.cost_usd)


# -- pools ---------------------------------------------------------------------------


async def test_pool_fails_over_in_order_and_reports_why() -> None:
    a, b, c = Member("a", fail=True), Member("b"), Member("c")
    pool = ProviderPool("main", [("a", a), ("b", b), ("c", c)])
    with collect_reports() as reports:
        response = await pool.complete(REQUEST)
    assert response.message.content == "answer from b"
    assert (a.calls, b.calls, c.calls) == (1, 1, 0)
    assert [r.kind for r in reports] == ["failover"]
    assert reports[0].data["provider"] == "a"
    assert reports[0].data["next"] == "b"
    assert "HTTP 503" in reports[0].data["reason"]


async def test_pool_stream_fails_over_before_any_text() -> None:
    a, b = Member("a", fail=True), Member("b")
    pool = ProviderPool("main", [("a", a), ("b", b)])
    events = [e async for e in pool.stream(REQUEST)]
    assert isinstance(events[-1], ResponseDone)
    assert events[-1].response.message.content == "answer from b"


async def test_pool_never_fails_over_once_text_was_delivered() -> None:
    a, b = Member("a", fail_after_text=True), Member("b")
    pool = ProviderPool("main", [("a", a), ("b", b)])
    seen: list[ModelStreamEvent] = []

    async def consume() -> None:
        async for event in pool.stream(REQUEST):
            seen.append(event)

    with pytest.raises(ProviderError, match="mid-stream"):
        await consume()
    assert b.calls == 0
    assert [type(e) for e in seen] == [TextDelta]


async def test_breaker_opens_after_threshold_then_half_opens_and_closes() -> None:
    clock = Clock()
    a, b = Member("a", fail=True), Member("b")
    pool = ProviderPool(
        "main", [("a", a), ("b", b)], failure_threshold=2, cooldown_seconds=30, clock=clock
    )
    with collect_reports() as reports:
        await pool.complete(REQUEST)
        await pool.complete(REQUEST)
    assert a.calls == 2
    assert [r.kind for r in reports] == ["failover", "breaker_open", "failover"]
    # Open: a is skipped entirely.
    await pool.complete(REQUEST)
    assert a.calls == 2
    # Cooldown over: one trial call; a still fails, so it opens again at once.
    clock.now += 31
    with collect_reports() as reports:
        await pool.complete(REQUEST)
    assert a.calls == 3
    assert "breaker_open" in [r.kind for r in reports]
    await pool.complete(REQUEST)
    assert a.calls == 3
    # a recovers: after the next cooldown its trial succeeds and the breaker closes.
    clock.now += 31
    a.fail = False
    with collect_reports() as reports:
        response = await pool.complete(REQUEST)
    assert response.message.content == "answer from a"
    assert [r.kind for r in reports] == ["breaker_closed"]
    assert pool.breakers["a"].failures == 0


async def test_pool_with_every_breaker_open_says_so() -> None:
    clock = Clock()
    a = Member("a", fail=True)
    pool = ProviderPool("main", [("a", a)], failure_threshold=1, cooldown_seconds=60, clock=clock)
    with pytest.raises(ProviderError, match="every provider failed"):
        await pool.complete(REQUEST)
    with pytest.raises(ProviderError, match=r"being skipped.*a \(for 60 s more\)"):
        await pool.complete(REQUEST)
    assert a.calls == 1


# -- the cache -----------------------------------------------------------------------

WEATHER = ToolSpec(name="weather", description="Weather.", parameters={"type": "object"})


def test_request_key_depends_on_everything_that_decides_the_answer() -> None:
    ident = {"provider": "openai", "model": "gpt-4o", "options": {"temperature": 0.2}}
    base = request_key(ident, REQUEST)
    assert base == request_key(dict(ident), ModelRequest(messages=[Message.user("hi")]))
    variants = [
        request_key({**ident, "model": "gpt-4o-mini"}, REQUEST),
        request_key({**ident, "options": {"temperature": 0.3}}, REQUEST),
        request_key({**ident, "options": {"temperature": 0.2, "seed": 1}}, REQUEST),
        request_key({**ident, "provider": "anthropic"}, REQUEST),
        request_key(ident, ModelRequest(messages=[Message.user("hi!")])),
        request_key(ident, ModelRequest(messages=[Message.system("s"), Message.user("hi")])),
        request_key(ident, ModelRequest(messages=[Message.user("hi")], tools=[WEATHER])),
        request_key(ident, ModelRequest(messages=[Message.user("hi")], options={"seed": 2})),
        request_key(
            ident,
            ModelRequest(messages=[Message.user("hi")], response_format={"type": "json_object"}),
        ),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_request_key_ignores_key_order_in_options() -> None:
    one = ModelRequest(messages=[Message.user("x")], options={"a": 1, "b": 2})
    two = ModelRequest(messages=[Message.user("x")], options={"b": 2, "a": 1})
    assert request_key({"p": 1}, one) == request_key({"p": 1}, two)


async def test_record_then_replay_serves_without_calling_the_model() -> None:
    store = InMemoryStore()
    live = ScriptedProvider.from_turns(["recorded answer"])
    recorder = CachedProvider(live, store, "record")
    first = await recorder.complete(REQUEST)
    assert len(live.requests) == 1
    offline = ScriptedProvider.from_turns(["recorded answer"])
    replayer = CachedProvider(offline, store, "replay")
    with collect_reports() as reports:
        again = await replayer.complete(REQUEST)
    assert again == first
    assert offline.requests == []
    assert [r.kind for r in reports] == ["cache_hit"]
    streamed = [e async for e in replayer.stream(REQUEST)]
    assert [type(e) for e in streamed] == [TextDelta, ResponseDone]


async def test_replay_miss_names_the_request() -> None:
    replayer = CachedProvider(ScriptedProvider.from_turns([]), InMemoryStore(), "replay")
    request = ModelRequest(
        messages=[Message.user("What is the weather in Paris?")], tools=[WEATHER]
    )
    with pytest.raises(ProviderError) as info:
        await replayer.complete(request)
    text = str(info.value)
    assert "no recorded response" in text
    assert "What is the weather in Paris?" in text
    assert "tools: weather" in text
    assert replayer.key(request)[:16] in text


async def test_cache_mode_records_misses_and_serves_hits() -> None:
    store = InMemoryStore()
    live = ScriptedProvider.from_turns(["one"], rules=[{"match": ".", "reply": "rule"}])
    cached = CachedProvider(live, store, "cache")
    events = [e async for e in cached.stream(REQUEST)]
    assert isinstance(events[-1], ResponseDone)
    assert len(await store.cache_keys()) == 1
    await cached.complete(REQUEST)
    assert len(live.requests) == 1


class Counter(ModelProvider):
    """Answers "answer N" on its Nth call: a model whose answers change over time."""

    name = "counter"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        return ModelResponse(message=Message.assistant(f"answer {self.calls}"))


async def test_record_mode_always_calls_the_model_and_keeps_the_latest() -> None:
    store = InMemoryStore()
    live = Counter()
    recorder = CachedProvider(live, store, "record")
    await recorder.complete(REQUEST)
    second = await recorder.complete(REQUEST)
    assert live.calls == 2
    entry = await store.cache_get(recorder.key(REQUEST))
    assert entry is not None
    assert entry["response"]["message"]["content"] == second.message.content == "answer 2"


# -- through the agent: config, journal, budgets ------------------------------------------


def _scripted(script: list[Any], **extra: Any) -> dict[str, Any]:
    return {"provider": "scripted", "script": script, "on_exhausted": "error", **extra}


async def test_pool_from_config_journals_the_failover() -> None:
    config = {
        "providers": {
            # An empty script with on_exhausted: error fails on the first call.
            "broken": _scripted([]),
            "backup": _scripted(["from the backup"]),
            "main": {"pool": ["broken", "backup"], "failure_threshold": 2},
        },
        "llm": "main",
        "agent": {"stream": False},
    }
    store = InMemoryStore()
    async with KoboiAgent.from_dict(config, store=store) as agent:
        result = await agent.run("hello")
    assert result.output == "from the backup"
    events = await store.read(result.session_id)
    kinds = [e.type for e in events]
    assert J.PROVIDER_EVENT in kinds
    failover = next(e for e in events if e.type == J.PROVIDER_EVENT)
    assert failover.data["kind"] == "failover"
    assert failover.data["provider"] == "broken"
    assert failover.data["next"] == "backup"
    # Journaled before the call's outcome, in the same step.
    assert kinds.index(J.PROVIDER_EVENT) < kinds.index(J.MODEL_CALL_FINISHED)


async def test_cached_agent_run_replays_offline(monkeypatch: Any) -> None:
    store = InMemoryStore()
    script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}, "42"]
    config = {
        "llm": _scripted(script),
        "tools": {"builtin": ["calculator"]},
        "cache": {"mode": "record"},
    }
    async with KoboiAgent.from_dict(config, store=store) as agent:
        recorded = await agent.run("What is 6*7?")
    assert recorded.output == "42"
    assert len(await store.cache_keys()) == 2
    # Same config, replay mode: the model is never called, every answer is from the cache.
    monkeypatch.setenv("KOBOI_CACHE_MODE", "replay")
    offline = ScriptedProvider.from_turns(script)
    async with KoboiAgent.from_dict(config, store=store, provider=offline) as agent:
        replayed = await agent.run("What is 6*7?")
    assert replayed.outcome == "completed"
    assert replayed.output == "42"
    assert offline.requests == []
    # A different question is a miss, and the run fails naming it.
    async with KoboiAgent.from_dict(config, store=store, provider=offline) as agent:
        missed = await agent.run("What is 7*8?")
    assert missed.outcome == "failed"
    assert "no recorded response" in (missed.error or "")
    assert "What is 7*8?" in (missed.error or "")
    assert offline.requests == []


async def test_a_changed_script_is_not_served_old_answers() -> None:
    one = ScriptedProvider.from_turns(["one"]).cache_identity()
    two = ScriptedProvider.from_turns(["two"]).cache_identity()
    assert one != two


async def test_bad_cache_mode_in_the_environment_is_a_clear_error(monkeypatch: Any) -> None:
    monkeypatch.setenv("KOBOI_CACHE_MODE", "sometimes")
    with pytest.raises(ConfigError, match=r"KOBOI_CACHE_MODE.*not a cache mode"):
        async with KoboiAgent.from_dict({"llm": _scripted(["x"])}):
            pass


async def test_token_budget_stops_the_run_and_refuses_pending_tools() -> None:
    usage = {"input_tokens": 600, "output_tokens": 500}
    script = [
        {
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}],
            "usage": usage,
        },
        "never reached",
    ]
    config = {
        "llm": _scripted(script),
        "tools": {"builtin": ["calculator"]},
        "agent": {"max_total_tokens": 1000, "stream": False},
    }
    store = InMemoryStore()
    async with KoboiAgent.from_dict(config, store=store) as agent:
        result = await agent.run("add")
    assert result.outcome == "budget_exceeded"
    assert "agent.max_total_tokens" in (result.error or "")
    assert "1100 tokens" in (result.error or "")
    events = await store.read(result.session_id)
    budget = next(e for e in events if e.type == J.BUDGET_EXCEEDED)
    assert budget.data == {"step": 1, "budget": "max_total_tokens", "limit": 1000, "used": 1100}
    refused = next(e for e in events if e.type == J.TOOL_CALL_REFUSED)
    assert refused.data["stage"] == "budget"
    assert not any(e.type == J.TOOL_CALL_STARTED for e in events)
    assert events[-1].type == J.RUN_FINISHED
    assert events[-1].data["outcome"] == "budget_exceeded"
    # The conversation stays well formed: the refused call has its result.
    assert result.messages[-1].role == "tool"
    assert (await store.get_session(result.session_id)).status == "failed"


async def test_cost_budget_uses_the_configured_prices() -> None:
    turn = {
        "tool_calls": [{"name": "calculator", "arguments": {"expression": "2+2"}}],
        "usage": {"input_tokens": 100_000, "output_tokens": 10_000},
    }
    config = {
        "llm": _scripted([turn, turn, turn], pricing={"input": 2.5, "output": 10.0}),
        "tools": {"builtin": ["calculator"]},
        "agent": {"max_cost_usd": 0.5, "stream": False},
    }
    async with KoboiAgent.from_dict(config) as agent:
        result = await agent.run("spend")
    # Each call costs 0.25 + 0.10 = 0.35 USD: the second one crosses 0.5.
    assert result.outcome == "budget_exceeded"
    assert result.steps == 2
    assert result.cost_usd == pytest.approx(0.70)
    assert "agent.max_cost_usd" in (result.error or "")


async def test_run_without_prices_costs_nothing_and_is_not_stopped() -> None:
    config = {"llm": _scripted(["hi"]), "agent": {"max_cost_usd": 0.01}}
    async with KoboiAgent.from_dict(config) as agent:
        result = await agent.run("hello")
    assert result.outcome == "completed"
    assert result.cost_usd == 0.0


class Reporter(ModelProvider):
    """A provider that retried once (as the HTTP providers do) before it answered."""

    name = "reporter"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        report("retry", attempt=1, delay_seconds=0.5, reason="HTTP 429, rate limited")
        return ModelResponse(message=Message.assistant("done"))


async def test_provider_reports_are_journaled_in_order() -> None:
    store = InMemoryStore()
    async with KoboiAgent.from_dict(
        {"llm": _scripted([]), "agent": {"stream": False}}, provider=Reporter(), store=store
    ) as agent:
        result = await agent.run("go")
    events = await store.read(result.session_id)
    kinds = [e.type for e in events]
    assert kinds[kinds.index(J.MODEL_CALL_STARTED) + 1] == J.PROVIDER_EVENT
    event = events[kinds.index(J.PROVIDER_EVENT)]
    assert event.data == {
        "kind": "retry",
        "step": 1,
        "attempt": 1,
        "delay_seconds": 0.5,
        "reason": "HTTP 429, rate limited",
    }


class BreaksMidStream(ModelProvider):
    name = "breaks"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("stream only")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        yield TextDelta(text="The answer is")
        raise ProviderError("connection reset (the stream broke after 13 characters)", emitted=True)


async def test_a_stream_broken_midway_shows_in_the_journal_where_it_broke() -> None:
    store = InMemoryStore()
    async with KoboiAgent.from_dict(
        {"llm": _scripted([])}, provider=BreaksMidStream(), store=store
    ) as agent:
        result = await agent.run("go")
    assert result.outcome == "failed"
    failed = next(e for e in await store.read(result.session_id) if e.type == J.MODEL_CALL_FAILED)
    assert failed.data["streamed"] == "The answer is"
    assert "13 characters" in failed.data["error"]


# -- config validation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("providers", "llm", "message"),
    [
        (
            {"a": _scripted(["x"]), "p": {"pool": ["a", "nope"]}},
            "p",
            r"providers\.p\.pool\[1\]: names provider 'nope'",
        ),
        (
            {"a": _scripted(["x"]), "p": {"pool": ["a"]}, "q": {"pool": ["p"]}},
            "q",
            "is itself a pool",
        ),
        ({"a": _scripted(["x"]), "p": {"pool": []}}, "p", "at least one provider"),
        ({"a": _scripted(["x"]), "p": {"pool": ["a", "a"]}}, "p", "more than once"),
        (
            {"a": _scripted(["x"]), "p": {"pool": ["a"], "model": "m"}},
            "p",
            r"providers\.p\.model: unknown key for a pool",
        ),
        ({"a": {**_scripted(["x"]), "pool": ["a"]}}, "a", "both 'provider' and 'pool'"),
        ({"a": {"model": "m"}}, "a", r"providers\.a\.provider: is required"),
        ({"a": _scripted(["x"], pricing={"input": -1})}, "a", r"providers\.a\.pricing\.input"),
    ],
)
def test_bad_pools_and_prices_are_clear_config_errors(
    providers: dict[str, Any], llm: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_config({"providers": providers, "llm": llm})


def test_inline_pool_in_llm_validates() -> None:
    config = validate_config(
        {"providers": {"a": _scripted(["x"]), "b": _scripted(["y"])}, "llm": {"pool": ["a", "b"]}}
    )
    assert config.llm.pool == ["a", "b"]
    assert set(config.provider_options) == {"a", "b"}


def test_unknown_cache_mode_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"cache\.mode"):
        validate_config({"llm": _scripted(["x"]), "cache": {"mode": "sometimes"}})


# -- context windows ----------------------------------------------------------------


class Windowed(Member):
    def __init__(self, name: str, window: int | None) -> None:
        super().__init__(name)
        self.window = window

    def context_window(self) -> int | None:
        return self.window


async def test_a_provider_states_no_window_unless_it_knows_one() -> None:
    assert Member("plain").context_window() is None
    assert PricedProvider(Windowed("w", 8000), Pricing()).context_window() == 8000


async def test_a_pool_states_the_smallest_window_of_its_members() -> None:
    pool = ProviderPool(
        "p", [("a", Windowed("a", 128_000)), ("b", Windowed("b", 8000)), ("c", Member("c"))]
    )
    assert pool.context_window() == 8000
    assert ProviderPool("q", [("c", Member("c"))]).context_window() is None


async def test_the_config_overrides_the_window_a_provider_states() -> None:
    from koboi.models import build_model
    from koboi.plugins import default_host

    config = validate_config(
        {"llm": {"provider": "scripted", "context_window": 4000}}, base_dir=None, env={}
    )
    model = build_model(config, default_host().catalog(), None)
    assert model.context_window() == 4000
    # It changes nothing else: the answers and the cache identity are the provider's.
    assert model.cache_identity()["provider"] == "scripted"
    assert (await model.complete(ModelRequest(messages=[Message.user("hi")]))).message.content
    # An application's own provider gets the config's window too, and a pool its own.
    given = build_model(config, default_host().catalog(), None, provider=Windowed("x", 9))
    assert given.context_window() == 4000
    pooled = validate_config(
        {
            "providers": {"a": _scripted(["x"]), "main": {"pool": ["a"], "context_window": 123}},
            "llm": "main",
        },
        base_dir=None,
        env={},
    )
    assert build_model(pooled, default_host().catalog(), None).context_window() == 123


def test_a_window_that_is_not_a_positive_number_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        validate_config({"llm": {"provider": "scripted", "context_window": 0}}, env={})
    assert "llm.context_window" in str(caught.value)
