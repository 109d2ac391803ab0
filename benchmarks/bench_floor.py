"""How close each hot path is to its floor: step cost per store, resume, start-up.

Prints, in one run, with the floor measured beside each figure where there is one:

1. **Step cost** of an agent step (one instant model call + one trivial tool call,
   ``bench_loop.py``'s provider and tool) for the in-memory store (the kernel alone,
   and with the default plugins: koboi-governance's redaction and audit), SQLite
   ``durability=power_loss`` (FULL) and ``process`` (NORMAL), and PostgreSQL, at
   N = 10 / 100 / 1,000: median and best ms/step, durable commits per step, and for
   SQLite the bytes of WAL written per step. The floor beside the durable rows: the
   disk's ``write + fsync`` of 200 bytes, measured in the same directory, times the
   commits per step.
2. **Resume**: from the start of a ``koboi run --resume`` process to the commit of
   its first new event, for a 100-step session killed in step 50 and a 10,000-event
   session killed near its end (a SQLite store; the journal is cut where a SIGKILL
   between ``tool_call_started`` and the tool's end leaves it).
3. **Start-up**: ``koboi --help`` against ``python -c "import pydantic"``, and a whole
   ``koboi run`` of the quickstart.

``--python OTHER`` runs every case also with another environment's interpreter (a
checkout of another commit with its own venv), interleaved with this one, and
prints both side by side: a before/after table from one run on one machine.

    uv run python benchmarks/bench_floor.py                  # ~3 min
    uv run python benchmarks/bench_floor.py --quick          # N = 10, 100; fewer repeats
    uv run python benchmarks/bench_floor.py --python ../base/.venv/bin/python

PostgreSQL runs in a private schema of ``KOBOI_BENCH_POSTGRES_URL`` (default: the
local server), dropped afterwards; it is skipped when unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# -- children: each case runs in a fresh process of the interpreter under test ---------


def _store(url: str, directory: str) -> Any:
    if url == "memory":
        from koboi.store import InMemoryStore

        return InMemoryStore()
    from koboi_store_sql import SQLStore

    return SQLStore(url, base_dir=directory)


async def _child_steps(url: str, steps: int, repeats: int, directory: str) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from bench_loop import InstantProvider, echo  # the same instant model and tool

    from koboi import KoboiAgent

    counts = {"commits": 0}

    def counting(store: Any) -> Any:
        for name in ("append", "set_status"):
            method = getattr(store, name)

            async def counted(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
                counts["commits"] += 1
                return await _method(*args, **kwargs)

            setattr(store, name, counted)
        return store

    async def one(n: int) -> float:
        store = counting(_store(url, directory))
        agent = KoboiAgent.from_dict(
            {
                "llm": {"provider": "scripted"},  # replaced by provider= below
                "agent": {"max_iterations": n + 5, "stream": False},
            },
            provider=InstantProvider(n),
            store=store,
            extra_tools=[echo],
        )
        async with agent:
            counts["commits"] = 0
            start = time.perf_counter()
            result = await agent.run("go")
            elapsed = time.perf_counter() - start
        if result.outcome != "completed" or result.steps != n:
            raise RuntimeError(f"unexpected run: {result.outcome}, {result.steps} steps")
        return elapsed

    await one(10)  # warm-up: imports, the database's first connections, caches
    times = [await one(steps) / steps * 1000 for _ in range(repeats)]
    out: dict[str, Any] = {"ms": times, "commits": counts["commits"] / steps}
    if url.startswith("sqlite"):
        out["wal_bytes"] = await _wal_bytes_per_step(one, url, directory, steps)
    return out


def _size(path: Path) -> int:
    return path.stat().st_size


async def _wal_bytes_per_step(one: Any, url: str, directory: str, steps: int) -> float:
    """Bytes added to the WAL per step: a reader holding a snapshot from before the
    run keeps SQLite from checkpointing and restarting the WAL, so it only grows."""
    from koboi_store_sql.url import parse_store_url

    path = parse_store_url(url, Path(directory)).path
    assert path is not None
    wal = Path(f"{path}-wal")
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM sessions").fetchone()
        before = _size(wal)
        n = min(steps, 100)
        await one(n)
        return (_size(wal) - before) / n
    finally:
        reader.execute("ROLLBACK")
        reader.close()


def child_main(args: argparse.Namespace) -> None:
    out = asyncio.run(_child_steps(args.url, args.steps, args.repeats, args.dir))
    print(json.dumps(out))


# -- the parent -------------------------------------------------------------------------


def _run_child(
    python: str, url: str, steps: int, repeats: int, directory: str, env: dict[str, str]
) -> dict[str, Any] | str:
    command = [python, str(Path(__file__).resolve()), "--child", "--url", url]
    command += ["--steps", str(steps), "--repeats", str(repeats), "--dir", directory]
    proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env})
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or ["failed"])[-1][:70]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _fsync_ms(directory: Path, n: int = 200) -> float:
    from bench_store import bench_fsync  # the same raw write + fsync as bench_store.py

    return statistics.median(bench_fsync(directory, n)) / 1e6


def _label(python: str) -> str:
    return "this" if python == sys.executable else "other"


def steps_table(pythons: list[str], sizes: list[int], quick: bool) -> None:
    print("== 1. Step cost: one instant model call + one trivial tool call ==")
    with tempfile.TemporaryDirectory(prefix="koboi-floor-", dir=os.environ.get("TMPDIR")) as tmp:
        directory = Path(tmp)
        fsync = _fsync_ms(directory)
        from bench_store import _postgres_schema  # a private schema, dropped afterwards

        postgres = _postgres_schema()
        stores: list[tuple[str, str, dict[str, str]]] = [
            ("memory, kernel only", "memory", {"KOBOI_DISABLE_PLUGINS": "governance"}),
            ("memory, default plugins", "memory", {}),
            ("SQLite FULL", "sqlite:///{db}?durability=power_loss", {}),
            ("SQLite NORMAL", "sqlite:///{db}?durability=process", {}),
        ]
        if postgres is not None:
            stores.append(("PostgreSQL", postgres[0], {}))
        header = f"{'store':<24} {'N':>5} {'env':>5} {'ms/step':>8} {'best':>7} {'commits':>8}"
        header += f" {'WAL B/step':>10} {'floor ms':>9}"
        print(header)
        print("-" * len(header))
        try:
            for name, url, env in stores:
                for steps in sizes:
                    repeats = 3 if steps >= 1000 else (3 if quick else 7)
                    # With two environments: A, B, then B, A (each child half the
                    # repeats), so a machine that speeds up or slows down meanwhile
                    # weighs on both alike.
                    order = pythons if len(pythons) == 1 else [*pythons, *pythons[::-1]]
                    share = repeats if len(pythons) == 1 else max(2, (repeats + 1) // 2)
                    pooled: dict[str, list[dict[str, Any]]] = {p: [] for p in pythons}
                    for python in order:
                        db = f"{uuid.uuid4().hex[:8]}.db"
                        result = _run_child(python, url.format(db=db), steps, share, tmp, env)
                        if isinstance(result, str):
                            print(f"{name:<24} {steps:>5} {_label(python):>5} failed: {result}")
                            continue
                        pooled[python].append(result)
                    for python in pythons:
                        if not pooled[python]:
                            continue
                        times = [t for r in pooled[python] for t in r["ms"]]
                        commits = statistics.mean(r["commits"] for r in pooled[python])
                        wals = [r["wal_bytes"] for r in pooled[python] if "wal_bytes" in r]
                        wal = statistics.mean(wals) if wals else None
                        durable = url != "memory"
                        line = f"{name:<24} {steps:>5} {_label(python):>5} "
                        line += f"{statistics.median(times):>8.3f} {min(times):>7.3f} "
                        line += f"{commits:>8.2f} "
                        line += f"{wal:>10.0f} " if wal is not None else f"{'':>10} "
                        # The floor: the disk's fsync per commit (PostgreSQL also syncs
                        # its WAL at each commit with synchronous_commit on).
                        floor = fsync * commits if durable and "NORMAL" not in name else None
                        line += f"{floor:>9.3f}" if floor is not None else f"{'':>9}"
                        print(line, flush=True)
        finally:
            if postgres is not None:
                postgres[1]()
    print(f"fsync floor: write 200 B + fsync in the same directory, median {fsync:.3f} ms")
    print()


# -- resume -----------------------------------------------------------------------------


def _resume_config(directory: Path, steps: int) -> Path:
    script = [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} + 1"}}]}
        for i in range(1, steps + 1)
    ]
    script.append({"reply": "done"})
    config = {
        "agent": {
            "name": "resume_bench",
            "mode": "act",
            "max_iterations": steps + 5,
            "on_interrupted_tool": "tell_model",
        },
        "llm": {"provider": "scripted", "on_exhausted": "error", "script": script},
        "tools": {"builtin": ["calculator"]},
        "store": {"url": "sqlite:///resume.db"},
    }
    path = directory / f"resume_{steps}.yaml"
    path.write_text(json.dumps(config))  # YAML is a superset of JSON
    return path


_PREPARE = """
import asyncio, json, sys
from koboi import KoboiAgent
from koboi.store import NewEvent

async def main(config, cut_step):
    agent = KoboiAgent.from_config(config)
    async with agent:
        result = await agent.run("go")
        store = agent.store
        events = await store.read(result.session_id)
        # Cut after the tool_call_started of step `cut_step`: a SIGKILL while that
        # tool ran leaves the journal so.
        cut = next(
            i for i, e in enumerate(events)
            if e.type == "tool_call_started" and e.data.get("step") == cut_step
        )
        killed = (await store.create_session()).id
        kept = [NewEvent(e.type, e.data) for e in events[: cut + 1]]
        for start in range(0, len(kept), 500):
            await store.append(killed, kept[start : start + 500])
        await store.set_status(killed, "running")
        print(json.dumps({"session": killed, "events": len(kept)}))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""

_FIRST_NEW = """
import json, sqlite3, sys
row = sqlite3.connect(sys.argv[1]).execute(
    "SELECT min(at) FROM events WHERE session_id = ? AND seq > ?", (sys.argv[2], int(sys.argv[3]))
).fetchone()
print(json.dumps(row[0]))
"""


def _koboi(python: str) -> str:
    return str(Path(python).parent / "koboi")


def resume_table(pythons: list[str], quick: bool) -> None:
    print("== 2. Resume: process start to the commit of the first new event (SQLite FULL) ==")
    cases = [(100, 50), (2500, 2499)]  # 4 events per step: the second is ~10,000 events
    trials = 3 if quick else 5
    print(f"{'session':<34} {'env':>5} {'events':>7} {'median ms':>10} {'best ms':>8}")
    print("-" * 68)
    for steps, cut in cases:
        for python in pythons:
            with tempfile.TemporaryDirectory(prefix="koboi-resume-") as tmp:
                directory = Path(tmp)
                config = _resume_config(directory, steps)
                prepared = subprocess.run(
                    [python, "-c", _PREPARE, str(config), str(cut)],
                    capture_output=True,
                    text=True,
                    cwd=directory,
                )
                if prepared.returncode != 0:
                    print(f"{steps}-step session: could not prepare: {prepared.stderr[-200:]}")
                    continue
                made = json.loads(prepared.stdout.strip().splitlines()[-1])
                samples = []
                for _ in range(trials):
                    copy = directory / "trial"
                    shutil.rmtree(copy, ignore_errors=True)
                    copy.mkdir()
                    for name in os.listdir(directory):
                        if name.startswith("resume"):
                            shutil.copy2(directory / name, copy / name)
                    started = time.time()
                    run = subprocess.run(
                        [
                            _koboi(python),
                            "run",
                            str(copy / config.name),
                            "--resume",
                            made["session"],
                            "--yes",
                            "--json",
                        ],
                        capture_output=True,
                        text=True,
                        cwd=copy,
                    )
                    if run.returncode != 0:
                        print(f"resume failed: {run.stderr[-300:]}")
                        break
                    first = subprocess.run(
                        [
                            python,
                            "-c",
                            _FIRST_NEW,
                            str(copy / "resume.db"),
                            made["session"],
                            str(made["events"]),
                        ],
                        capture_output=True,
                        text=True,
                    )
                    samples.append((json.loads(first.stdout) - started) * 1000)
                if samples:
                    label = f"{steps} steps, killed in step {cut}"
                    print(
                        f"{label:<34} {_label(python):>5} {made['events']:>7} "
                        f"{statistics.median(samples):>10.0f} {min(samples):>8.0f}",
                        flush=True,
                    )
    print()


# -- start-up ---------------------------------------------------------------------------


def startup_table(pythons: list[str], quick: bool) -> None:
    print("== 3. Start-up: wall time of a fresh process ==")
    runs = 7 if quick else 15
    print(f"{'command':<44} {'env':>5} {'median ms':>10} {'best ms':>8} {'x pydantic':>10}")
    print("-" * 81)
    with tempfile.TemporaryDirectory(prefix="koboi-start-") as tmp:
        config = Path(tmp) / "quickstart.yaml"
        shutil.copy2(ROOT / "configs" / "quickstart.yaml", config)
        question = ["-m", "What is 2 + 2?"]
        commands = {
            python: {
                'python -c "import pydantic"': [python, "-c", "import pydantic"],
                "koboi --help": [_koboi(python), "--help"],
                "koboi run quickstart.yaml -m 'What is 2 + 2?'": [
                    _koboi(python),
                    "run",
                    str(config),
                    *question,
                ],
            }
            for python in pythons
        }
        samples = {python: {name: [] for name in commands[python]} for python in pythons}
        # Interleaved, every command of every environment in each round: a machine whose
        # speed drifts weighs on all of them alike.
        for _ in range(runs):
            for python in pythons:
                for name, command in commands[python].items():
                    start = time.perf_counter()
                    subprocess.run(command, capture_output=True, cwd=tmp, check=True)
                    samples[python][name].append((time.perf_counter() - start) * 1000)
        for python in pythons:
            pydantic = statistics.median(samples[python]['python -c "import pydantic"'])
            for name, values in samples[python].items():
                median = statistics.median(values)
                print(
                    f"{name:<44} {_label(python):>5} {median:>10.0f} {min(values):>8.0f} "
                    f"{median / pydantic:>10.2f}",
                    flush=True,
                )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 10, 100; fewer repeats")
    parser.add_argument("--python", help="another environment's interpreter, side by side")
    parser.add_argument(
        "--only",
        choices=["steps", "resume", "startup"],
        action="append",
        help="run only these parts (repeatable)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args)
        return
    pythons = [sys.executable]
    if args.python:
        pythons.append(str(Path(args.python).absolute()))
    parts = args.only or ["steps", "resume", "startup"]
    print(f"koboi floor benchmark - Python {platform.python_version()}, {os.cpu_count()} CPUs")
    print(f"this:  {sys.executable}")
    if args.python:
        print(f"other: {pythons[1]}")
    print()
    sizes = [10, 100] if args.quick else [10, 100, 1000]
    if "steps" in parts:
        steps_table(pythons, sizes, args.quick)
    if "resume" in parts:
        resume_table(pythons, args.quick)
    if "startup" in parts:
        startup_table(pythons, args.quick)


if __name__ == "__main__":
    main()
