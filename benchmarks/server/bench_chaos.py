"""Replica chaos: replicas of ``koboi serve`` on one PostgreSQL, SIGKILLed mid-job again and again.

    uv run python benchmarks/server/bench_chaos.py                     # 3 replicas, 20 kills (~4 min)
    uv run python benchmarks/server/bench_chaos.py --kills 50 --seed 7
    uv run python benchmarks/server/bench_chaos.py --replicas 2 --kills 5 --rate 1

A steady load of jobs (``log <line>``: the non-idempotent ``append_log``, one fsynced
line per call, slowed to ``--step-seconds``) and chats (half of them ``log`` too, half
arithmetic) goes to random live replicas, each request retried with its
``Idempotency-Key`` until a replica answers; every job is followed over SSE by a client
that reconnects with ``Last-Event-ID`` to another live replica whenever its stream breaks.
Meanwhile a replica holding a running job (mostly one whose journal ends in
``tool_call_started``: the tool is running) is SIGKILLed, restarted after a while, and so
on; there is always at least one replica alive.

First the same load runs for ``--control-seconds`` with no kill (the positive control),
then with the kills. The table has a column for each. The figures come from the journal,
the jobs table, the shared log file, the SSE streams received, and triggers on the
private schema that note which process (libpq ``application_name``) wrote each journal
row and each job update (``tests/replica_helpers.py``). A ``problems`` line lists every
violation found (it must say "none"); the script exits 1 when there is one, or when
PostgreSQL cannot be reached.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "replica_helpers", ROOT / "tests" / "replica_helpers.py"
)
assert _spec is not None and _spec.loader is not None
rh = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("replica_helpers", rh)
_spec.loader.exec_module(rh)

FIGURES = [
    ("seconds", "wall time of the phase, s"),
    ("kills", "replicas SIGKILLed mid-job"),
    ("kills_mid_tool", "  of which while append_log ran"),
    ("jobs", "jobs accepted (202)"),
    ("completed", "jobs completed (must equal jobs accepted)"),
    ("taken_over", "jobs claimed more than once (taken over)"),
    ("victims_finished_elsewhere", "jobs of killed holders finished by another process"),
    ("in_doubt", "in-doubt calls reported, not re-run (jobs and chats)"),
    ("duplicates", "non-idempotent calls run twice (must be 0)"),
    ("chats", "chats answered 200"),
    ("chats_retried", "  of which needed more than one attempt"),
    ("chats_cut_mid_request", "  of which lost their replica mid-request"),
    ("chats_replayed", "  of which answered from the key (Idempotent-Replayed)"),
    ("slowest_chat_seconds", "slowest chat, first attempt to its answer, s"),
    ("followers", "SSE clients (one per job)"),
    ("streams_broken", "streams cut by a dead replica"),
    ("stream_hops", "reconnections to another replica"),
    ("events_streamed", "events received (with an id)"),
    ("stream_problems", "events missed, repeated or unlike the journal (must be 0)"),
    ("empty_sessions", "empty sessions left in the store (all phases so far)"),
]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--rate", type=float, default=2.0, help="jobs/s and chats/s (each)")
    parser.add_argument("--step-seconds", type=float, default=0.4, help="append_log duration")
    parser.add_argument("--lease", type=float, default=2.0, help="session and job lease, s")
    parser.add_argument("--control-seconds", type=float, default=10.0)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, koboi at {ROOT}")
    print(
        f"{args.replicas} replicas on PostgreSQL ({rh.POSTGRES_URL}, a private schema), seed "
        f"{seed}, {args.rate:g} jobs/s + {args.rate:g} chats/s, append_log {args.step_seconds:g} s, "
        f"leases {args.lease:g} s"
    )
    rh.require_postgres()
    columns: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="koboi-chaos-") as tmp, rh.pg_schema() as schema:
        cluster = rh.Cluster(
            Path(tmp),
            schema,
            args.replicas,
            step_seconds=args.step_seconds,
            lease=args.lease,
            job_lease=args.lease,
        )
        try:
            cluster.start()
            print(f"control: {args.control_seconds:g} s of load, no kill")
            columns["control (no kill)"] = rh.run_load(
                cluster, rng, "control", kills=0, seconds=args.control_seconds, rate=args.rate
            )
            print(f"chaos: {args.kills} kills")
            columns[f"{args.kills} kills"] = rh.run_load(
                cluster,
                rng,
                "chaos",
                kills=args.kills,
                rate=args.rate,
                give_up_seconds=60 + 30 * args.kills,
                report=lambda line: print("  " + line, flush=True),
            )
        finally:
            cluster.close()
    rows = [(label, *(str(c.get(key, "")) for c in columns.values())) for key, label in FIGURES]
    _table(["figure", *columns], rows)
    found = 0
    for name, column in columns.items():
        problems = column["problems"]
        found += len(problems)
        print(f"\nproblems ({name}): {'none' if not problems else len(problems)}")
        for problem in problems[:50]:
            print(f"  {problem}")
    if found:  # a lost job, a step run twice, a stream that missed or repeated an event
        raise SystemExit(f"\nFAILED: {found} problem(s) found (above)")


def _table(headers: list[str], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"\n{time.monotonic() - started:.0f} s in all")
