"""Orchestration benchmark: what a node costs, against LangGraph in the same run; how fast
a 1,000-node run killed half-way resumes; and SIGKILL trials of the five-node demo.

    uv run python benchmarks/orchestration/bench_orchestration.py            # everything
    uv run python benchmarks/orchestration/bench_orchestration.py --quick    # N = 10, 100
    uv run python benchmarks/orchestration/bench_orchestration.py --no-langgraph --trials 0

Part 1 runs a chain of N nodes (10, 100, 1,000) in-process, each node one agent whose
one model call is answered at once by ``fake_model.answer`` (the same function
LangGraph's nodes call). koboi: the ``orchestration`` runner in ``dag`` mode, every node
a durable child run (its own session, its start and end journaled), on the in-memory
store and on SQLite (``durability: power_loss``, the default: an fsync per commit).
LangGraph: ``StateGraph`` of N chained nodes (one super-step each), without a
checkpointer, with ``InMemorySaver`` and with ``SqliteSaver``, in an environment of its
own (``.nox/bench-langgraph``, made with uv on first use; ``--langgraph-python`` to
use another), measured in the same run. Figures: milliseconds per node / super-step
(the best of a few runs).

Part 2 runs a 1,000-node chain on SQLite in a child process, SIGKILLs it once half the
nodes have finished, and resumes it here: the time until the first unfinished node
starts (the journal read, the route and plan checks, the finished nodes answered from
their journals), the whole resume, and a check that no finished node ran again.

Part 3 (``--trials``): SIGKILLs of the five-node demo (tests/orchestration_crash_helpers.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from fake_model import answer  # noqa: E402

from koboi import KoboiAgent  # noqa: E402
from koboi.messages import Message, ModelRequest, ModelResponse, Usage  # noqa: E402
from koboi.provider import ModelProvider  # noqa: E402

LANGGRAPH_ENV = ROOT / ".nox" / "bench-langgraph"
LANGGRAPH_PACKAGES = ["langgraph", "langgraph-checkpoint-sqlite"]


class FakeProvider(ModelProvider):
    """koboi's side of the fake model: ``fake_model.answer`` on the last user message."""

    name = "fake"
    model = "fake"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        last = next(m for m in reversed(request.messages) if m.role == "user")
        return ModelResponse(
            message=Message.assistant(answer(last.content)),
            usage=Usage(input_tokens=1, output_tokens=1, requests=1),
        )


def chain_config(n: int, store_url: str) -> dict[str, Any]:
    agents = [{"name": f"n{i:04d}", "tools": []} for i in range(n)]
    for i in range(1, n):
        agents[i]["depends_on"] = [f"n{i - 1:04d}"]
    return {
        "agent": {
            "name": "bench",
            "runner": "orchestration",
            "stream": False,
            # The tree's model calls: one per node.
            "max_iterations": n + 10,
        },
        "llm": {"provider": "scripted"},
        "store": {"url": store_url},
        "orchestration": {"execution": {"mode": "dag", "max_parallel": 1}, "agents": agents},
    }


async def run_chain(n: int, store_url: str, directory: Path, session: str) -> float:
    config = chain_config(n, store_url)
    async with KoboiAgent.from_dict(config, base_dir=directory, provider=FakeProvider()) as agent:
        began = time.perf_counter()
        result = await agent.run("go", session_id=session)
        took = time.perf_counter() - began
    if result.outcome != "completed":
        raise RuntimeError(f"the chain of {n} ended {result.outcome}: {result.error}")
    return took


# -- part 1 --------------------------------------------------------------------------------


def koboi_per_node(n: int, repeats: int, directory: Path) -> dict[str, float]:
    figures: dict[str, float] = {}
    for label, url in (("memory", "memory://"), ("sqlite", "sqlite:///bench.db")):
        runs = []
        for r in range(repeats + 1):  # the first is a warm-up
            took = anyio.run(run_chain, n, url, directory, f"{label}-{n}-{r}")
            runs.append(took)
        figures[label] = min(runs[1:]) / n * 1000
    return figures


def langgraph_python(given: str | None) -> Path | None:
    """LangGraph's interpreter: ``given``, else the benchmark's own environment (made with uv
    on first use); None when it cannot be had (no network to PyPI, say)."""
    if given:
        return Path(given)
    python = LANGGRAPH_ENV / "bin" / "python"
    if python.exists():
        return python
    print(f"making LangGraph's environment in {LANGGRAPH_ENV} (uv, once) ...", flush=True)
    made = subprocess.run(
        ["uv", "venv", "--quiet", "--python", sys.executable, str(LANGGRAPH_ENV)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode == 0:
        made = subprocess.run(
            ["uv", "pip", "install", "--quiet", "--python", str(python), *LANGGRAPH_PACKAGES],
            capture_output=True,
            text=True,
            check=False,
        )
    if made.returncode != 0:
        print(f"  LangGraph could not be installed: {made.stderr.strip()[-400:]}")
        return None
    return python


def langgraph_per_step(python: Path, n: int, repeats: int, directory: Path) -> dict[str, Any]:
    done = subprocess.run(
        [str(python), str(HERE / "bench_langgraph.py"), str(n), str(repeats), str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench_langgraph.py failed:\n{done.stderr[-2000:]}")
    data: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return data


def part_one(sizes: list[int], python: Path | None, directory: Path) -> None:
    print("\n## Part 1: orchestration overhead per node (instant fake model)\n")
    header = f"{'N':>6}  {'koboi memory':>13}  {'koboi SQLite':>13}"
    if python is not None:
        header += f"  {'LG none':>9}  {'LG memory':>10}  {'LG SQLite':>10}"
    print(header + "   (ms per node / super-step)")
    version = ""
    for n in sizes:
        repeats = 3 if n <= 100 else 1
        koboi = koboi_per_node(n, repeats, directory)
        row = f"{n:>6}  {koboi['memory']:>13.3f}  {koboi['sqlite']:>13.3f}"
        if python is not None:
            lg = langgraph_per_step(python, n, repeats, directory)
            version = lg.get("version", "?")

            def ms(value: Any, n: int = n) -> str:
                return f"{value / n * 1000:.3f}" if value is not None else "-"

            row += f"  {ms(lg['none']):>9}  {ms(lg['memory']):>10}  {ms(lg['sqlite']):>10}"
        print(row, flush=True)
    if python is not None:
        print(f"\nLangGraph {version} ({python})")
    print(
        "koboi: every node a child run in its own session (run_started, model call, "
        "run_finished) plus the parent's node_started / node_finished; SQLite commits "
        "with an fsync (durability power_loss)."
    )


# -- part 2 --------------------------------------------------------------------------------


def child_run(n: int, directory: Path) -> None:
    """(In the child process.) The chain on SQLite, session 'half', until killed."""
    anyio.run(run_chain, n, "sqlite:///resume.db", directory, "half")


def finished_nodes(database: Path) -> int:
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5) as connection:
            row = connection.execute(
                "SELECT count(*) FROM events WHERE session_id = 'half' AND type = ?",
                ("orchestration.node_finished",),
            ).fetchone()
    except sqlite3.Error:
        return 0
    return int(row[0]) if row else 0


async def resume_chain(n: int, directory: Path) -> dict[str, Any]:
    from koboi.events import ChildEvent

    config = chain_config(n, "sqlite:///resume.db")
    async with KoboiAgent.from_dict(config, base_dir=directory, provider=FakeProvider()) as agent:
        events = await agent.store.read("half")
        done = {str(e.data["node"]) for e in events if e.type == "orchestration.node_finished"}
        from koboi.subagents import child_session_id

        # A node's session derives from its run's start (seq 1: the session's first run).

        before = {
            node: len(await agent.store.read(child_session_id("half", f"1:node:{node}")))
            for node in done
        }
        began = time.perf_counter()
        first_new = None
        outcome = None
        async for event in agent.resume("half"):
            if first_new is None and isinstance(event, ChildEvent) and event.tag not in done:
                first_new = time.perf_counter() - began
            if event.kind == "final":
                outcome = event.result.outcome  # type: ignore[union-attr]
        total = time.perf_counter() - began
        rerun = [
            node
            for node, count in before.items()
            if len(await agent.store.read(child_session_id("half", f"1:node:{node}"))) != count
        ]
    return {
        "finished_before": len(done),
        "first_new_node_s": first_new,
        "total_s": total,
        "outcome": outcome,
        "rerun": rerun,
    }


def part_two(n: int, directory: Path) -> None:
    print(f"\n## Part 2: resume of a {n}-node run killed half-way (SQLite)\n")
    directory.mkdir(parents=True, exist_ok=True)
    database = directory / "resume.db"
    child = subprocess.Popen(
        [sys.executable, __file__, "--child-run", str(n), str(directory)],
        env={**os.environ, "KOBOI_STRICT_PLUGINS": "1"},
    )
    began = time.monotonic()
    while finished_nodes(database) < n // 2:
        if child.poll() is not None:
            raise RuntimeError("the child ended before it was killed")
        if time.monotonic() - began > 900:
            child.kill()
            raise RuntimeError("the child did not get half-way in 15 minutes")
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    figures = anyio.run(resume_chain, n, directory)
    rate = (figures["total_s"] - (figures["first_new_node_s"] or 0)) / max(
        1, n - figures["finished_before"]
    )
    print(f"nodes finished before the kill:        {figures['finished_before']}")
    print(f"resume -> first unfinished node starts: {figures['first_new_node_s'] * 1000:.0f} ms")
    print(
        f"whole resume (the rest of the run):     {figures['total_s']:.2f} s ({rate * 1000:.2f} ms per remaining node)"
    )
    print(f"outcome: {figures['outcome']}; finished nodes that ran again: {len(figures['rerun'])}")


# -- part 3 --------------------------------------------------------------------------------


def part_three(trials: int, seed: int, directory: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "orchestration_crash_helpers", ROOT / "tests" / "orchestration_crash_helpers.py"
    )
    assert spec is not None and spec.loader is not None
    helpers = importlib.util.module_from_spec(spec)
    sys.modules["orchestration_crash_helpers"] = helpers
    spec.loader.exec_module(helpers)
    print(f"\n## Part 3: {trials} SIGKILLs of the five-node demo (seed {seed})\n")
    expected = helpers.baseline(directory / "baseline")
    rng = random.Random(seed)
    kills, runs, problems, in_doubt, wrong = 0, 0, 0, 0, 0
    while kills < trials:
        runs += 1
        result = helpers.trial(directory / f"run-{runs}", random.Random(rng.randrange(1 << 30)))
        kills += len(result.kills)
        problems += len(result.problems)
        in_doubt += len(result.in_doubt)
        wrong += result.output != expected["output"]
        for problem in result.problems:
            print(f"  PROBLEM (run {runs}): {problem}")
    print(f"kills: {kills} in {runs} runs; runs that ended with another output: {wrong}")
    print(f"problems (a finished node run again, a call started twice, a line twice): {problems}")
    print(f"calls left in doubt and not run again: {in_doubt}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 10 and 100 only")
    parser.add_argument("--no-langgraph", action="store_true")
    parser.add_argument("--langgraph-python", help="LangGraph's interpreter")
    parser.add_argument("--no-resume", action="store_true")
    parser.add_argument("--resume-nodes", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=20, help="SIGKILLs of part 3 (0: none)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--child-run", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_run:
        child_run(int(args.child_run[0]), Path(args.child_run[1]))
        return
    os.environ.setdefault("KOBOI_STRICT_PLUGINS", "1")
    sizes = [10, 100] if args.quick else [10, 100, 1000]
    python = None if args.no_langgraph else langgraph_python(args.langgraph_python)
    with tempfile.TemporaryDirectory(prefix="koboi-bench-orch-") as tmp:
        directory = Path(tmp)
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
        part_one(sizes, python, directory)
        if not args.no_resume:
            part_two(args.resume_nodes, directory / "resume")
        if args.trials:
            part_three(args.trials, args.seed, directory / "trials")


if __name__ == "__main__":
    main()
