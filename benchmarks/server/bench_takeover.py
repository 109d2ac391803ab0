"""Job takeover time: a replica dies mid-job, how long until another replica has finished it.

Two real ``koboi serve`` processes share one store (SQLite file by default, or
PostgreSQL with ``--store``). Replica A claims a job whose tool (``append_log``,
not idempotent) stops right after its effect, before the journal knows the call
finished; A is then SIGKILLed and replica B, already running, must claim the job
once A's lease has expired and resume its session from the journal. The figure
is the time from the SIGKILL to B reporting the job ``completed``, against the
lease expiry (``server.job_lease_seconds`` and ``agent.lease_seconds``, both
``--lease``). Target (issue 7): under 2x the lease expiry. Each trial also checks
that the effect happened once.

    uv run python benchmarks/server/bench_takeover.py                  # 3 trials, lease 5 s
    uv run python benchmarks/server/bench_takeover.py --lease 2 --trials 5
    uv run python benchmarks/server/bench_takeover.py \\
        --store "postgresql+psycopg://postgres@127.0.0.1:5432/test"    # a private schema
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

CONFIG = """
agent: {{name: takeover, mode: yolo, lease_seconds: {lease}}}
llm:
  provider: scripted
  rules:
    - match: 'log (?P<line>[\\w-]+)'
      tool: append_log
      arguments: {{line: "{{line}}"}}
      reply: "logged: {{result}}"
tools: {{builtin: [append_log]}}
sandbox: {{backend: passthrough, workdir: work}}
store: {{url: "{store}"}}
server: {{access_log: false, job_lease_seconds: {lease}, job_poll_seconds: 0.1}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(config: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "koboi_cli", "serve", str(config), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=config.parent,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("koboi serve did not start")


def trial(directory: Path, config: Path, key: str, n: int) -> float:
    marker = directory / f"paused-{n}"
    line = f"trial-{n}"
    env_a = {**os.environ, "KOBOI_DEMO_PAUSE_AFTER_EFFECT": line}
    env_a["KOBOI_DEMO_PAUSE_MARKER"] = str(marker)
    env_a["KOBOI_DEMO_STEP_SECONDS"] = "0"
    replica_a, url_a = start_server(config, env_a)
    replica_b = None
    try:
        headers = {"Authorization": f"Bearer {key}"}
        job = httpx.post(
            url_a + "/v1/jobs", json={"input": f"log {line}"}, headers=headers, timeout=30
        ).json()
        deadline = time.monotonic() + 30
        while not marker.exists():
            if time.monotonic() > deadline:
                raise SystemExit("replica A never ran the job's tool")
            time.sleep(0.01)
        # B is up before A dies: what is measured is the takeover, not B's start.
        replica_b, url_b = start_server(config, {**os.environ, "KOBOI_DEMO_STEP_SECONDS": "0"})
        replica_a.send_signal(signal.SIGKILL)
        replica_a.wait(10)
        killed = time.perf_counter()
        while True:
            state = httpx.get(url_b + f"/v1/jobs/{job['id']}", headers=headers, timeout=30).json()
            if state["status"] in ("completed", "failed", "cancelled"):
                break
            if time.perf_counter() - killed > 120:
                raise SystemExit(f"the job was not taken over: {state}")
            time.sleep(0.02)
        took = time.perf_counter() - killed
        if state["status"] != "completed":
            raise SystemExit(f"the job ended {state['status']}: {state['result']}")
        lines = (directory / "work" / "crash_demo.log").read_text().splitlines()
        if lines.count(line) != 1:
            raise SystemExit(f"the effect of {line} happened {lines.count(line)} times")
        return took
    finally:
        for proc in (replica_a, replica_b):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="", help="store URL (default: SQLite in a temp dir)")
    parser.add_argument("--lease", type=float, default=5.0, help="lease expiry, seconds")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    schema = None
    store = args.store
    if store.startswith("postgresql"):
        import psycopg

        schema = f"bench_takeover_{uuid.uuid4().hex[:8]}"
        conninfo = store.replace("postgresql+psycopg://", "postgresql://", 1)
        with psycopg.connect(conninfo, autocommit=True) as db:
            db.execute(f'CREATE SCHEMA "{schema}"')
        store = f"{store}?options=-csearch_path%3D{schema}"
    try:
        with tempfile.TemporaryDirectory(prefix="koboi-takeover-") as tmp:
            directory = Path(tmp)
            config = directory / "agent.yaml"
            config.write_text(
                CONFIG.format(lease=args.lease, store=store or "sqlite:///koboi.db"),
                encoding="utf-8",
            )
            command = ["keys", "create", "--config", str(config), "--principal", "bench"]
            made = subprocess.run(
                [sys.executable, "-m", "koboi_cli", *command, "--json"],
                capture_output=True,
                text=True,
                cwd=directory,
                check=True,
                timeout=120,
            )
            key = json.loads(made.stdout)["key"]
            times = [trial(directory, config, key, n) for n in range(args.trials)]
    finally:
        if schema is not None:
            import psycopg

            with psycopg.connect(conninfo, autocommit=True) as db:
                db.execute(f'DROP SCHEMA "{schema}" CASCADE')
    backend = "PostgreSQL" if schema else "SQLite"
    print(f"job takeover after SIGKILL, 2 replicas on {backend}, lease {args.lease:g} s")
    print("  trials: " + ", ".join(f"{t:.2f} s" for t in times))
    median, worst = statistics.median(times), max(times)
    ratio = worst / args.lease
    verdict = "meets" if ratio < 2 else "MISSES"
    print(f"  median {median:.2f} s, worst {worst:.2f} s = {ratio:.2f}x the lease expiry")
    print(f"  target: under 2x the lease expiry ({2 * args.lease:g} s): {verdict}")


if __name__ == "__main__":
    main()
