"""Context strategies: what each costs per model call at 100 and 2,000 turns, and the
tokens it sends per turn.

    uv run python benchmarks/context/bench_context.py            # ~1-2 min
    uv run python benchmarks/context/bench_context.py --quick    # 100 and 400 turns

The session is koboi-context's scripted long session (plugins/koboi-context/tests/
context_testkit.py): a user message a turn, a tool call every third, some long tool
results, a 4,000-token window counted with tiktoken. For each strategy and length:

- ``strategy us/call``: time spent in the strategy's before_model_call, median (and
  90th percentile) over the calls of the last 100 turns (what one call costs late in
  the session; the mean also carries the garbage collector's pauses, which grow with
  the number of live objects a long session holds, whatever the strategy);
- ``loop ms/call``: the whole loop per model call (kernel, journal, model), median over
  the same calls, for scale;
- ``tokens/turn``: mean tokens of the requests sent over the last 100 turns;
- the floor beside them: ``history tokens``, what sending the whole history at the
  last turn would take (noop's request: it stops once that passes the window).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "plugins" / "koboi-context" / "tests"
STRATEGIES = ["truncation", "smart_truncation", "sliding_window", "key_facts", "summarise"]


def testkit() -> Any:
    spec = importlib.util.spec_from_file_location(
        "koboi_context_testkit", TESTS / "context_testkit.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def play(kit: Any, strategy: str, turns: int) -> dict[str, float]:
    import koboi_context.plugin
    from koboi import KoboiAgent, PluginHost
    from koboi.store import InMemoryStore
    from koboi_context.interceptor import ContextStrategy

    timings: list[tuple[int, float]] = []  # (turn, seconds in the strategy)
    calls: list[tuple[int, float, int]] = []  # (turn, loop time of the call, tokens sent)

    original = ContextStrategy.before_model_call

    async def timed(self: Any, request: Any, run: Any) -> Any:
        started = time.perf_counter()
        result = await original(self, request, run)
        elapsed = time.perf_counter() - started
        last_user = next(m for m in reversed(request.messages) if m.role == "user")
        timings.append((int(last_user.content.split()[1].rstrip(":")), elapsed))
        return result

    ContextStrategy.before_model_call = timed  # type: ignore[method-assign]
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_context.plugin, "context", dist="koboi-context")
    host.add_plugin(kit.PLUGIN, "testkit", dist="bench")
    model = kit.WindowedModel(4000)
    inner = model.complete
    last = [time.perf_counter()]

    async def complete(request: Any) -> Any:
        from koboi.sidecalls import call_purpose

        response = await inner(request)
        now = time.perf_counter()
        if call_purpose() is None:
            last_user = next(m for m in reversed(request.messages) if m.role == "user")
            turn = int(last_user.content.split()[1].rstrip(":"))
            calls.append((turn, now - last[0], model.sizes[-1][1]))
        last[0] = now
        return response

    model.complete = complete  # type: ignore[method-assign]
    config = kit.session_config(strategy, turns=turns, window=4000)
    try:
        async with KoboiAgent.from_dict(
            config, host=host, provider=model, store=InMemoryStore()
        ) as agent:
            result = await agent.run(kit.turn_text(1))
    finally:
        ContextStrategy.before_model_call = original  # type: ignore[method-assign]
    assert result.outcome == "completed", result.error
    late = turns - 100
    strategy_us = [s * 1e6 for t, s in timings if t > late]
    loop_ms = [s * 1e3 for t, s, _ in calls if t > late]
    tokens_by_turn: dict[int, int] = {}
    for t, _, tokens in calls:
        if t > late:
            tokens_by_turn[t] = tokens_by_turn.get(t, 0) + tokens
    return {
        "strategy_us": statistics.median(strategy_us),
        "strategy_p90": statistics.quantiles(strategy_us, n=10)[-1],
        "loop_ms": statistics.median(loop_ms),
        "tokens_turn": statistics.fmean(tokens_by_turn.values()),
        "max_request": max(size for _, size in model.sizes),
    }


def history_tokens(kit: Any, turns: int) -> int:
    """What the whole conversation at the last turn would take (noop's request)."""
    counter = kit.WindowedModel(4000).counter
    total = 0
    for turn in range(1, turns + 1):
        total += counter.count(kit.turn_text(turn)) + 4
        if kit.asks_tool(turn):
            total += counter.count(kit.lookup_result(f"key-{turn}")) + 20
        total += counter.count(kit.answer_text(turn, kit.asks_tool(turn))) + 4
    return total


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="100 and 400 turns")
    args = parser.parse_args()
    lengths = (100, 400) if args.quick else (100, 2000)
    kit = testkit()
    print("scripted session, 4,000-token window (o200k_base); figures over the last 100 turns")
    print(
        f"{'strategy':<17} {'turns':>5} {'strategy us/call':>17} {'p90':>6} {'loop ms/call':>13} "
        f"{'tokens/turn':>12} {'max request':>12}"
    )
    for strategy in STRATEGIES:
        for turns in lengths:
            figures = await play(kit, strategy, turns)
            print(
                f"{strategy:<17} {turns:>5} {figures['strategy_us']:>17.0f} "
                f"{figures['strategy_p90']:>6.0f} "
                f"{figures['loop_ms']:>13.2f} {figures['tokens_turn']:>12.0f} "
                f"{figures['max_request']:>12.0f}",
                flush=True,
            )
    for turns in lengths:
        print(
            f"floor: the whole history at turn {turns} is {history_tokens(kit, turns):,} tokens "
            "(what noop would send; it stops at the window)"
        )


if __name__ == "__main__":
    anyio.run(main)
