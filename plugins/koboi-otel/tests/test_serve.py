"""A real ``koboi serve`` with telemetry, Prometheus metrics and JSON logs: the caller's
``traceparent`` is the parent of the run's span and is in the journal; ``/metrics`` needs
a key and parses with Prometheus' own parser; no log line, label or span holds the canary."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import yaml
from otel_kit import CANARY
from otlp_receiver import HTTPReceiver
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _config(tmp_path: Path, endpoint: str, **server: Any) -> Path:
    config = {
        "agent": {"name": "served", "max_iterations": 4},
        "llm": {
            "provider": "scripted",
            "model": "scripted-1",
            "rules": [
                {
                    "match": r"(?P<expr>\d+ \* \d+)",
                    "tool": "calculator",
                    "arguments": {"expression": "{expr}"},
                    "reply": "{expr} = {result}",
                }
            ],
        },
        "tools": {"builtin": ["calculator"]},
        "store": {"url": f"sqlite:///{tmp_path / 'koboi.db'}"},
        "telemetry": {"endpoint": endpoint, "metric_interval_seconds": 3600},
        "server": {"log_format": "json", "metrics": {"enabled": True}, **server},
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _key(config: Path) -> str:
    from koboi.agent import KoboiAgent
    from koboi_server import KeyRing

    async def create() -> str:
        async with KoboiAgent.from_config(config) as agent:
            _, token = await KeyRing(agent.store).create("alice")
            return token

    return anyio.run(create)


def _serve(config: Path, port: int, log: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "koboi_cli", "serve", str(config), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=config.parent,
        )
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


def test_serve_traces_measures_and_logs(tmp_path: Path) -> None:
    with HTTPReceiver() as receiver:
        config = _config(tmp_path, receiver.endpoint)
        key = _key(config)
        port = _free_port()
        log = tmp_path / "serve.log"
        proc = _serve(config, port, log)
        base = f"http://127.0.0.1:{port}"
        auth = {"Authorization": f"Bearer {key}"}
        try:
            answer = httpx.post(
                f"{base}/v1/chat",
                json={"message": f"What is 6 * 7? my token is {CANARY}"},
                headers={**auth, "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["output"] == "6 * 7 = 42"
            session_id = body["session_id"]
            assert answer.headers["x-request-id"]

            # The journal keeps the caller's trace.
            events = httpx.get(
                f"{base}/v1/sessions/{session_id}/events", headers=auth, timeout=10
            ).text
            started = next(
                json.loads(line[len("data: ") :])
                for line in events.splitlines()
                if line.startswith("data: ") and '"traceparent"' in line
            )
            assert started["trace"]["traceparent"] == f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
            # The session view shows tokens (the scripted model counts words).
            view = httpx.get(f"{base}/v1/sessions/{session_id}", headers=auth, timeout=10).json()
            assert view["runs"] == 1 and view["input_tokens"] > 0 and view["cost_usd"] == 0

            # /metrics: an API key, then Prometheus' own parser.
            assert httpx.get(f"{base}/metrics", timeout=10).status_code == 401
            scraped = httpx.get(f"{base}/metrics", headers=auth, timeout=10)
            assert scraped.status_code == 200
            families = {f.name: f for f in text_string_to_metric_families(scraped.text)}
            requests = families["koboi_server_requests"]
            chats = [
                s
                for s in requests.samples
                if s.name == "koboi_server_requests_total" and s.labels["route"] == "/v1/chat"
            ]
            assert chats and chats[0].labels == {
                "method": "POST",
                "route": "/v1/chat",
                "status": "200",
            }
            runs = families["koboi_server_runs_finished"].samples
            assert any(s.labels == {"outcome": "completed"} and s.value == 1 for s in runs)
            assert "koboi_server_jobs" in families and "koboi_server_job_leases_expired" in families
            telemetry_runs = families["koboi_runs"].samples
            assert any(s.labels.get("koboi_run_outcome") == "completed" for s in telemetry_runs)
            assert families["gen_ai_client_token_usage"].type == "histogram"
            assert CANARY not in scraped.text
        finally:
            proc.terminate()
            proc.wait(30)

        received = receiver.received
        received.wait_for(lambda r: any(s.name == "invoke_agent served" for s in r.spans))
        (run_span,) = [s for s in received.spans if s.name == "invoke_agent served"]
        assert run_span.trace_id == CALLER_TRACE
        assert run_span.parent_span_id == CALLER_SPAN
        assert CANARY.encode() not in b"".join(received.raw)

    # Structured logs: one JSON object per line, with the request's id and principal.
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert lines, log.read_text()
    access = [line for line in lines if line["logger"] == "uvicorn.access"]
    chat_line = next(line for line in access if "/v1/chat" in line["message"])
    assert chat_line["request_id"] == answer.headers["x-request-id"]
    assert chat_line["principal"] == "alice"
    assert CANARY not in log.read_text()
