"""Replay speed: how long a captured 1000-step session takes to replay offline.

    uv run python benchmarks/replay/bench_replay.py              # N = 1000, 7 repeats
    uv run python benchmarks/replay/bench_replay.py --quick      # N = 100, 3 repeats
    uv run python benchmarks/replay/bench_replay.py --steps 5000

Setup: a config whose scripted model makes N - 1 calculator calls, one per step,
then answers (N model calls, N - 1 tool calls); the session is run once with the
library on a memory store, captured with ``capture_session`` and written to a
bundle in a temporary directory. Then, interleaved:

- ``in-process``: ``read_bundle`` (unzip, check every digest and the checksum)
  plus ``replay_bundle`` (validate the config, open the agent, run the loop with
  every answer, result and approval served from the bundle, compare each event
  as it is journaled), as a program embedding koboi would;
- ``koboi run``: ``koboi run bench.koboi --replay-mode replay`` as a new process,
  in a fresh directory with an empty environment, as a user or CI runs it —
  interpreter start-up and plugin discovery included;
- ``koboi --help``: the same process start-up with no replay, for reference.

Target (issue 8): a captured 1000-step session replays in under 1 s offline.
Nothing here asserts: it prints figures (see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

TARGET_SECONDS = 1.0


def write_config(directory: Path, steps: int) -> Path:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} + 1"}}]}
        for i in range(steps - 1)
    ]
    script.append({"reply": f"Done after {steps} steps."})
    config = {
        "agent": {"name": "bench-replay", "mode": "act", "max_iterations": steps + 5},
        "llm": {"provider": "scripted", "on_exhausted": "error", "script": script},
        "tools": {"builtin": ["calculator"]},
        "store": {"url": "memory://"},
    }
    path = directory / "bench.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


async def record(config: Path, bundle_path: Path) -> dict[str, Any]:
    """Run the config once and capture its session into ``bundle_path``."""
    from koboi.agent import KoboiAgent
    from koboi.plugins import default_host
    from koboi_replay.capture import capture_session

    started = time.perf_counter()
    agent = KoboiAgent.from_config(config)
    async with agent:
        result = await agent.run("go")
        recorded = time.perf_counter() - started
        captured = await capture_session(
            agent.store, result.session_id, config_path=config, host=default_host()
        )
    size = captured.bundle.write(bundle_path, overwrite=True)
    return {
        "outcome": result.outcome,
        "steps": result.steps,
        "record_seconds": recorded,
        "bytes": size,
        "contents": captured.bundle.manifest["contents"],
    }


async def replay_in_process(bundle_path: Path) -> tuple[float, float, float, bool]:
    """(read + verify, whole replay, the replay's own measure of its loop, identical)."""
    from koboi.plugins import default_host
    from koboi_replay.bundle import read_bundle
    from koboi_replay.replayer import replay_bundle

    started = time.perf_counter()
    bundle = read_bundle(bundle_path)
    read = time.perf_counter() - started
    report = await replay_bundle(bundle, host=default_host(), base_dir=bundle_path.parent)
    total = time.perf_counter() - started
    return read, total, report.seconds, report.identical


def run_process(
    argv: list[str], cwd: Path, env: dict[str, str]
) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run ``argv`` in ``cwd`` with nothing in its environment but ``env``."""
    started = time.perf_counter()
    result = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    return time.perf_counter() - started, result


def koboi_script() -> list[str]:
    beside = Path(sys.executable).with_name("koboi")
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "koboi_cli"]


def row(label: str, samples: list[float]) -> str:
    return (
        f"  {label:<34} median {statistics.median(samples) * 1000:8.1f} ms   "
        f"min {min(samples) * 1000:8.1f} ms   max {max(samples) * 1000:8.1f} ms"
    )


def run_configuration(
    label: str, directory: Path, steps: int, repeats: int, disabled: str | None
) -> None:
    """Record a session and time its replays with the plugins of this configuration."""
    from koboi.plugins import reset_default_host

    env: dict[str, str] = {}
    if disabled:
        os.environ["KOBOI_DISABLE_PLUGINS"] = env["KOBOI_DISABLE_PLUGINS"] = disabled
    else:
        os.environ.pop("KOBOI_DISABLE_PLUGINS", None)
    reset_default_host()
    config = write_config(directory, steps)
    bundle_path = directory / "bench.koboi"
    recorded = asyncio.run(record(config, bundle_path))
    contents = recorded["contents"]
    print(f"\n== {label} ==")
    print(
        f"session: {recorded['steps']} steps ({recorded['outcome']}), "
        f"{contents['events']} events, {contents['model_calls']} model calls, "
        f"{contents['tool_results']} tool results, {contents['audit']} audit records; "
        f"recorded in {recorded['record_seconds']:.2f} s; bundle {recorded['bytes'] / 1024:.0f} KiB"
    )
    fresh = directory / "fresh"
    fresh.mkdir(exist_ok=True)
    replay_argv = [*koboi_script(), "run", str(bundle_path), "--replay-mode", "replay"]
    help_argv = [*koboi_script(), "--help"]
    # One of each first: warm the page cache and Python's bytecode cache.
    asyncio.run(replay_in_process(bundle_path))
    run_process(replay_argv, fresh, env)

    reads, totals, loops, walls, helps = [], [], [], [], []
    verdicts: set[str] = set()
    for _ in range(repeats):
        read, total, loop, identical = asyncio.run(replay_in_process(bundle_path))
        reads.append(read)
        totals.append(total)
        loops.append(loop)
        verdicts.add("identical" if identical else "DIVERGED")
        wall, result = run_process(replay_argv, fresh, env)
        walls.append(wall)
        first = result.stdout.splitlines()[0] if result.stdout else result.stderr.strip()
        verdicts.add(first.removeprefix("replay: "))
        helps.append(run_process(help_argv, fresh, env)[0])

    print(f"replay of {steps} steps, {repeats} repeats (verdicts: {', '.join(sorted(verdicts))}):")
    print(row("in-process: read + verify bundle", reads))
    print(row("in-process: replay loop + compare", loops))
    print(row("in-process: total", totals))
    print(row("koboi run --replay-mode replay", walls))
    print(row("koboi --help (start-up only)", helps))
    per_step = statistics.median(loops) / steps * 1e6
    best = statistics.median(totals)
    verdict = "met" if best < TARGET_SECONDS else "NOT met"
    print(f"  loop + compare per step: {per_step:.0f} µs")
    print(
        f"  target (< {TARGET_SECONDS:.0f} s for {steps} steps, in-process): {best:.3f} s -> "
        f"{verdict}; koboi run adds its process start-up (median "
        f"{statistics.median(walls) - best:.3f} s more)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="model calls in the session")
    parser.add_argument("--repeats", type=int, default=7, help="timed replays of each kind")
    parser.add_argument("--quick", action="store_true", help="N = 100, 3 repeats")
    args = parser.parse_args()
    steps, repeats = (100, 3) if args.quick else (args.steps, args.repeats)
    os.environ.setdefault("KOBOI_STRICT_PLUGINS", "1")
    os.environ.pop("KOBOI_CACHE_MODE", None)
    from koboi.plugins import PluginHost

    installed = {info.id for info in PluginHost(strict=False).discover()}
    configurations: list[tuple[str, str | None]] = [("every installed plugin", None)]
    if "governance" in installed:
        # Governance works on every step (redaction of each event, the audit trail):
        # shown apart, so the replay's own cost can be told from the pipeline's.
        configurations.append(("without koboi-governance (KOBOI_DISABLE_PLUGINS)", "governance"))
    print(f"koboi replay benchmark: python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    for label, disabled in configurations:
        with tempfile.TemporaryDirectory(prefix="koboi-bench-replay-") as scratch:
            run_configuration(label, Path(scratch), steps, repeats, disabled)


if __name__ == "__main__":
    main()
