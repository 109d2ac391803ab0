"""Crash recovery of koboi: SIGKILL trials of the crash demo, and what durability costs.

    uv run python benchmarks/crash_recovery/bench_crash.py            # 50 trials, N = 100, 1000
    uv run python benchmarks/crash_recovery/bench_crash.py --quick    # 5 trials, N = 100
    uv run python benchmarks/crash_recovery/bench_crash.py --trials 200 --no-postgres

Exit status: 1 when a trial is unsound (a step run twice, a completed step lost: it
raises, naming it), when PostgreSQL could not be reached (unless ``--no-postgres``),
or when a cost case failed; 0 otherwise. A trial whose run ended before the kill is
not counted and is run again, so every store gets the number of kills asked for.

Part 1 (trials): each trial starts ``koboi run`` on a copy of configs/crash_demo.yaml
(50 non-idempotent ``append_log`` steps, fast step time), SIGKILLs it at a random
time, resumes it in a new process (``koboi run --resume SESSION``) and audits the
log file against the journal. The trials run on SQLite (a file per trial) and on
PostgreSQL (a private schema), with the same kill delays, and print one table
with a column per store.

Part 2 (costs): the library with an instant model and a trivial tool, on each
store: time per step (one model call + one tool call), durable commits per
step, the machine's fsync time, the time to resume a 1000-step session, and the
database size after 1000 steps.

See README.md beside this file for what each figure means and the targets.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from koboi import (
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    InMemoryStore,
    KoboiAgent,
    Message,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    NewEvent,
    Store,
    ToolCall,
    Usage,
    tool,
)
from koboi import journal as J

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("crash_helpers", ROOT / "tests" / "crash_helpers.py")
assert _spec is not None and _spec.loader is not None
crash = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("crash_helpers", crash)
_spec.loader.exec_module(crash)

#: Figures from our issue, for comparison.
COMPARISON = [
    ("LangGraph + SQLite checkpointer", "10 ms/step at N=100, 56 ms/step at N=1000; 953 MiB DB"),
    ("Pydantic AI on DBOS", "17 ms/step"),
    ("LangGraph, default mode, SIGKILL at step 50", "re-ran 17-34 already-executed tool calls"),
]
RESUME_TARGET_MS = 200
SIZE_TARGET_MIB = 2


# -- part 1: SIGKILL trials ---------------------------------------------------------

#: The stores part 1 runs on, in the order of the table's columns.
TRIAL_STORES = ("SQLite", "PostgreSQL")


def trial(
    directory: Path, rng: random.Random, duration: float, step_seconds: float, store_url: str
) -> dict[str, Any]:
    """One random-time SIGKILL and resume of the crash demo; the audit of the result.

    The session is named up front (``--session``), so trials can share one database
    (the PostgreSQL schema of a whole run) without ``last`` picking another's session.
    """
    demo = crash.make_demo(directory, store_url=store_url, step_seconds=step_seconds)
    session = uuid.uuid4().hex
    proc = demo.start(session=session)
    deadline = time.monotonic() + 60
    while not demo.log.exists() and time.monotonic() < deadline:  # the run is under way
        if proc.popen.poll() is not None:
            raise RuntimeError(proc.describe())
        time.sleep(0.005)
    time.sleep(rng.uniform(0.0, duration))
    proc.kill()
    if proc.popen.returncode == 0:
        return {"killed": False}
    info, before = demo.journal(session)
    if not J.fold_state(before).interrupted:
        return {"killed": False}  # between run_finished and the exit: nothing to resume
    resumer = demo.resume(session)
    code = resumer.wait()
    if code != 0:
        raise RuntimeError(f"resume failed:\n{resumer.describe()}")
    _, events = demo.journal(info.id)
    first_new = events[len(before)]
    assert first_new.type == J.RUN_RESUMED, first_new
    report = crash.audit(events, demo.log_lines())
    crash.assert_sound(report)
    last = before[-1].type if before else "none"
    return {
        "killed": True,
        "killed_after": last,
        "step": sum(1 for e in before if e.type == J.MODEL_CALL_FINISHED),
        "duplicates": sum(n - 1 for n in report.duplicates.values()),
        "lost_completed": len(report.lost_completed),
        "rerun": len(report.restarted),
        "in_doubt": len(report.interrupted),
        "in_doubt_written": sum(1 for c in report.interrupted if report.line_of[c] in report.lines),
        "resume_latency": first_new.at - resumer.started_at,
    }


def trials_on(
    label: str, store_url: str, base: Path, count: int, seed: int, step_seconds: float
) -> dict[str, str]:
    """``count`` counted trials on one store; the figures of the table's column for it."""
    # The same seed on every store: the same sequence of kill delays, so the columns compare.
    rng = random.Random(seed)
    demo = crash.make_demo(base / "baseline", store_url=store_url, step_seconds=step_seconds)
    proc = demo.start(session=uuid.uuid4().hex)
    while not demo.log.exists() and proc.popen.poll() is None:
        time.sleep(0.005)
    start = time.monotonic()
    if proc.wait() != 0:
        raise RuntimeError(proc.describe())
    duration = time.monotonic() - start
    answer = proc.result()["output"]
    print(f"{label}: uninterrupted run (positive control) {duration:.2f} s from the first line")
    print(f"  to the exit, answer {answer!r}; trials ", end="", flush=True)
    results = []
    attempts = 0
    started = time.monotonic()
    while len(results) < count:
        attempts += 1
        outcome = trial(base / f"t{attempts:03d}", rng, duration, step_seconds, store_url)
        if outcome["killed"]:
            results.append(outcome)
            print(".", end="", flush=True)
    print(f" {time.monotonic() - started:.0f} s")
    latencies = sorted(r["resume_latency"] for r in results)
    kinds: dict[str, int] = {}
    for r in results:
        kinds[r["killed_after"]] = kinds.get(r["killed_after"], 0) + 1
    return {
        "uninterrupted run (control): answer": f"{answer!r} in {duration:.2f} s",
        "trials (killed mid-run)": f"{len(results)} (+{attempts - len(results)} ended first)",
        "killed at step (min / median / max)": _mmm([r["step"] for r in results], "{:.0f}"),
        "last journal event at the kill": ", ".join(
            f"{_short(k)} {v}" for k, v in sorted(kinds.items())
        ),
        "duplicate executions of non-idempotent steps (must be 0)": str(
            sum(r["duplicates"] for r in results)
        ),
        "completed steps lost (must be 0)": str(sum(r["lost_completed"] for r in results)),
        "tool calls started twice (must be 0)": str(sum(r["rerun"] for r in results)),
        "in-doubt calls, not re-run (effect had happened)": (
            f"{sum(r['in_doubt'] for r in results)} ({sum(r['in_doubt_written'] for r in results)})"
        ),
        "resume latency: process start -> first new event, median": (
            f"{statistics.median(latencies) * 1000:.0f} ms"
        ),
        "resume latency, max": f"{latencies[-1] * 1000:.0f} ms",
    }


def _short(event_type: str) -> str:
    return {
        J.TOOL_CALL_STARTED: "tool_started",
        J.MODEL_CALL_STARTED: "model_started",
    }.get(event_type, event_type)


def run_trials(count: int, seed: int, step_seconds: float, postgres: bool) -> list[str]:
    """Part 1; what could not be measured (a finding raises: an unsound trial)."""
    stores = TRIAL_STORES if postgres else TRIAL_STORES[:1]
    print(
        f"\n== Part 1: {count} SIGKILL + resume trials of the crash demo per store (seed {seed}) =="
    )
    print(
        f"50 steps of append_log, KOBOI_DEMO_STEP_SECONDS={step_seconds}; SQLite: a file per "
        "trial (default durability); PostgreSQL: one private schema, a session per trial"
    )
    columns: dict[str, dict[str, str]] = {}
    unmeasured: list[str] = []
    with tempfile.TemporaryDirectory(prefix="koboi-crash-") as tmp:
        base = Path(tmp)
        for label in stores:
            directory = base / label
            if label == "SQLite":
                columns[label] = trials_on(
                    label, "sqlite:///.koboi/koboi.db", directory, count, seed, step_seconds
                )
                continue
            with ExitStack() as stack:
                try:
                    url = stack.enter_context(crash.postgres_schema())
                except Exception as exc:  # an unreachable server: say so, keep the other column
                    print(f"{label}: not measured: {type(exc).__name__}: {exc}")
                    columns[label] = {}
                    unmeasured.append(f"{label} trials: {type(exc).__name__}: {exc}")
                    continue
                # Anything raised from here on is a finding, not an unavailable store.
                columns[label] = trials_on(label, url, directory, count, seed, step_seconds)
    figures = list(next(iter(c for c in columns.values() if c), {}))
    rows = [(f, *(columns[s].get(f, "not measured") for s in columns)) for f in figures]
    _table(["figure", *columns], rows)
    return unmeasured


def _mmm(values: list[float], spec: str) -> str:
    return " / ".join(spec.format(v) for v in (min(values), statistics.median(values), max(values)))


# -- part 2: costs -------------------------------------------------------------------


class InstantProvider(ModelProvider):
    """Answers at once: a call to ``echo`` (or ``poke``) on calls 1..N-1, a text on call N."""

    name = "instant"
    model = "instant"

    def __init__(self, steps: int, tool_name: str = "echo") -> None:
        self.steps = steps
        self.calls = 0
        self.tool_name = tool_name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        usage = Usage(input_tokens=10, output_tokens=5, requests=1)
        if self.calls < self.steps:
            call = ToolCall(
                id=f"call_{self.calls}", name=self.tool_name, arguments={"x": self.calls}
            )
            message = Message(role="assistant", tool_calls=(call,))
            return ModelResponse(
                message=message, usage=usage, finish_reason="tool_calls", model="instant"
            )
        return ModelResponse(message=Message.assistant("done"), usage=usage, model="instant")


@tool(thread=False)
def echo(x: int) -> int:
    """Return x.

    Args:
        x: any integer.
    """
    return x


@tool(thread=False, risk="moderate")
def poke(x: int) -> int:
    """Return x (needs approval: risk moderate).

    Args:
        x: any integer.
    """
    return x


class YesApprover(Approver):
    name = "yes"

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True, decided_by=self.name)


class CountingStore:
    """Counts the durable commits a store makes (append batches and status updates)."""

    def __init__(self, store: Store) -> None:
        self.appends = 0
        self.statuses = 0
        append, set_status = store.append, store.set_status

        async def counted_append(*args: Any, **kwargs: Any) -> Any:
            self.appends += 1
            return await append(*args, **kwargs)

        async def counted_status(*args: Any, **kwargs: Any) -> Any:
            self.statuses += 1
            return await set_status(*args, **kwargs)

        store.append = counted_append  # type: ignore[method-assign]
        store.set_status = counted_status  # type: ignore[method-assign]


def make_store(url: str, directory: Path) -> Store:
    if url == "memory://":
        return InMemoryStore()
    from koboi_store_sql.plugin import create_store

    return create_store(url, directory)


async def cost_case(url: str, directory: Path, steps: int, approval: bool) -> dict[str, Any]:
    store = make_store(url, directory)
    counter = CountingStore(store)
    provider = InstantProvider(steps, "poke" if approval else "echo")
    agent = KoboiAgent.from_dict(
        {"llm": {"provider": "scripted"}, "agent": {"max_iterations": steps + 5, "stream": False}},
        base_dir=directory,
        provider=provider,
        store=store,
        extra_tools=[poke if approval else echo],
        approver=YesApprover(),
    )
    async with agent:
        start = time.perf_counter()
        result = await agent.run("go")
        elapsed = time.perf_counter() - start
        if result.outcome != "completed" or result.steps != steps:
            raise RuntimeError(f"unexpected run: {result.outcome} after {result.steps} steps")
        commits = counter.appends + counter.statuses
        resume_ms = await resume_time(agent, store, result.session_id) if steps >= 1000 else None
    return {
        "ms_step": elapsed / steps * 1000,
        "commits_step": commits / steps,
        "appends_step": counter.appends / steps,
        "resume_ms": resume_ms,
        "size": db_size(url, directory),
    }


async def resume_time(agent: KoboiAgent, store: Store, session_id: str) -> dict[str, float]:
    """Copy the session up to the middle of its last tool call (a SIGKILL there), then time
    (a) read + fold of the journal, (b) ``agent.resume`` up to its first new event."""
    events = await store.read(session_id)
    cut = max(i for i, e in enumerate(events) if e.type == J.TOOL_CALL_STARTED) + 1
    info = await store.create_session(config_name="resume-bench")
    batch = [NewEvent(e.type, dict(e.data)) for e in events[:cut]]
    for i in range(0, len(batch), 500):
        await store.append(info.id, batch[i : i + 500])
    start = time.perf_counter()
    state = J.fold_state(await store.read(info.id))
    fold = time.perf_counter() - start
    assert state.interrupted and state.pending, "the copy must end in a tool call"
    # The run's provider has answered all its N calls: from now on it says "done" at once.
    start = time.perf_counter()
    resumed = agent.resume(info.id)
    first = await resumed.__anext__()
    to_first = time.perf_counter() - start
    async for _ in resumed:
        pass
    del first
    return {"fold": fold * 1000, "first_event": to_first * 1000, "events": len(batch)}


def db_size(url: str, directory: Path) -> int | None:
    if url == "memory://":
        return None
    if url.startswith("sqlite"):
        return sum(p.stat().st_size for p in directory.glob("koboi.db*"))
    import psycopg

    conninfo = crash.POSTGRES_URL.replace("postgresql+psycopg://", "postgresql://", 1)
    schema = url.split("search_path%3D", 1)[1].split("&", 1)[0] if "search_path%3D" in url else None
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else None


def fsync_time(directory: Path, count: int = 200) -> tuple[float, float]:
    """Median and min time of write(100 bytes) + fsync on this machine's disk, in ms."""
    path = directory / "fsync.probe"
    times = []
    with open(path, "ab") as f:
        for _ in range(count):
            f.write(b"x" * 100)
            f.flush()
            start = time.perf_counter()
            os.fsync(f.fileno())
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000, min(times) * 1000


@contextmanager
def _no_schema() -> Iterator[str]:
    yield ""


def run_costs(sizes: list[int], postgres: bool) -> list[str]:
    """Part 2; the cases that failed (an error instead of a figure)."""
    print("\n== Part 2: journal cost per step (one model call + one tool call), instant model ==")
    variants: list[tuple[str, str, bool]] = [
        ("memory", "memory://", False),
        ("SQLite FULL (power_loss)", "sqlite:///koboi.db?durability=power_loss", False),
        ("SQLite FULL + approval per call", "sqlite:///koboi.db?durability=power_loss", True),
        ("SQLite NORMAL (process)", "sqlite:///koboi.db?durability=process", False),
    ]
    if postgres:
        variants.append(("PostgreSQL (synchronous_commit on)", "postgres", False))
    rows: list[tuple[str, ...]] = []
    resume_rows: list[tuple[str, ...]] = []
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="koboi-cost-") as tmp:
        base = Path(tmp)
        fsync_median, fsync_min = fsync_time(base)
        for label, url, approval in variants:
            for steps in sizes:
                directory = base / f"{len(rows)}"
                directory.mkdir()
                try:
                    # PostgreSQL: a private schema per case, dropped after it.
                    schema = crash.postgres_schema() if url == "postgres" else _no_schema()
                    with schema as pg_url:
                        case_url = pg_url or url
                        r = asyncio.run(cost_case(case_url, directory, steps, approval))
                except Exception as exc:  # say so, go on with the others; exit 1 at the end
                    rows.append((label, str(steps), f"error: {exc}"[:70], "", ""))
                    failed.append(f"{label}, {steps} steps: {type(exc).__name__}: {exc}")
                    continue
                size = "" if r["size"] is None else f"{r['size'] / 1024:.0f} KiB"
                commits = f"{r['commits_step']:.2f} ({r['appends_step']:.2f} appends)"
                rows.append((label, str(steps), f"{r['ms_step']:.2f}", commits, size))
                if r["resume_ms"]:
                    rm = r["resume_ms"]
                    resume_rows.append(
                        (label, f"{rm['events']}", f"{rm['fold']:.1f}", f"{rm['first_event']:.1f}")
                    )
    _table(["store", "N steps", "ms/step", "durable commits/step", "DB size after N"], rows)
    print(
        f"\nfsync on this machine (write 100 B + fsync in {tempfile.gettempdir()}): "
        f"median {fsync_median:.2f} ms, min {fsync_min:.2f} ms"
    )
    if resume_rows:
        print(f"\nResume of a session killed in its 1000th step (target < {RESUME_TARGET_MS} ms):")
        _table(
            ["store", "events", "read + fold_state ms", "agent.resume -> first event ms"],
            resume_rows,
        )
    print(f"DB size target after 1000 steps: < {SIZE_TARGET_MIB} MiB")
    print("\nFor comparison (from the issue):")
    for name, figure in COMPARISON:
        print(f"  {name}: {figure}")
    return failed


def _table(headers: list[str], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line)
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=50, help="SIGKILL trials (default 50)")
    parser.add_argument("--quick", action="store_true", help="5 trials, N = 100 only")
    parser.add_argument("--seed", type=int, default=None, help="random seed of the kill times")
    parser.add_argument("--step-seconds", type=float, default=0.02, help="KOBOI_DEMO_STEP_SECONDS")
    parser.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL")
    parser.add_argument("--no-trials", action="store_true", help="only part 2")
    parser.add_argument("--no-costs", action="store_true", help="only part 1")
    args = parser.parse_args()
    trials = 5 if args.quick else args.trials
    sizes = [100] if args.quick else [100, 1000]
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, koboi at {ROOT}")
    failures: list[str] = []
    if not args.no_trials:
        failures += run_trials(trials, seed, args.step_seconds, postgres=not args.no_postgres)
    if not args.no_costs:
        failures += run_costs(sizes, postgres=not args.no_postgres)
    if failures:  # an unsound trial raised already; this is what went unmeasured
        print("\nFAILED (not measured):\n" + "\n".join(f"  {f}" for f in failures))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
