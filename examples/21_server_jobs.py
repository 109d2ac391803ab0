"""koboi serve with background jobs, end to end on this machine (koboi-agent[api]):
mint a key, start the server, queue a job with koboi-agent's body
``{"message": "Summarize the Q3 report"}``, wait for it, stream a chat over SSE,
and stop the server. Offline: configs/server_deploy.yaml uses the scripted model.

Everything happens in a temporary copy of the checkout's configs/ and data/, so the
key and the sessions go to that copy's .koboi/koboi.db (the default store of the
working directory, which `koboi keys create` and `koboi serve` share).

    python examples/21_server_jobs.py
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def koboi(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "koboi", *args], cwd=cwd, capture_output=True, text=True, check=True
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copytree(ROOT / "configs", work / "configs")
        shutil.copytree(ROOT / "data", work / "data")
        key = json.loads(koboi("keys", "create", "--json", cwd=work).stdout)["key"]
        port = free_port()
        listen = ["--host", "127.0.0.1", "--port", str(port)]
        server = subprocess.Popen(
            [sys.executable, "-m", "koboi", "serve", "configs/server_deploy.yaml", *listen],
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(
                base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30
            ) as c:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        if c.get("/readyz").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"the server did not start: {server.stderr.read()}")
                    time.sleep(0.2)

                job = c.post("/v1/jobs", json={"message": "Summarize the Q3 report"})
                job.raise_for_status()
                job_id = job.json()["id"]
                print(f"queued job {job_id} ({job.status_code})")
                while (view := c.get(f"/v1/jobs/{job_id}").json())["status"] not in (
                    "completed",
                    "failed",
                    "cancelled",
                ):
                    time.sleep(0.1)
                print(f"job {view['status']}: {view['result']['output']}")

                with c.stream("POST", "/v1/chat/stream", json={"message": "What is 2+2?"}) as r:
                    for line in r.iter_lines():
                        if line.startswith("event: "):
                            print(f"  sse {line[7:]}")
                        if line == "event: final":
                            break
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
