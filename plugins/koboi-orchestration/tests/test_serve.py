"""``koboi serve`` runs an orchestrated agent, as a chat and as a job: a real server in
a subprocess, a real HTTP client. The SSE stream carries the nodes' events (tagged),
and an approval a node asks for reaches the HTTP client, who decides it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

CONFIG = """
agent: {name: served-dag, runner: orchestration, mode: act, stream: false,
        approval_timeout_seconds: 60, max_iterations: 30}
llm: {provider: scripted}
providers:
  ops_model:
    provider: scripted
    rules:
      - {match: 'log (?P<line>[a-z0-9-]+)', tool: append_log, arguments: {line: "{line}"},
         reply: "ops did: {result}"}
    fallback: "ops: nothing to log"
  writer_model:
    provider: scripted
    rules:
      - {match: 'Output of ops ---\\s*(?P<said>[^\\n]+)', reply: "Report: {said}"}
    fallback: "Report: nothing"
tools: {builtin: [append_log]}
sandbox: {backend: passthrough, workdir: work}
store: {url: "sqlite:///koboi.db"}
server: {access_log: false, keepalive_seconds: 0.5, poll_seconds: 0.1, job_poll_seconds: 0.2,
         chat_wait_seconds: 20}
orchestration:
  execution: {mode: dag}
  agents:
    - {name: ops, llm: ops_model, tools: [append_log]}
    - {name: writer, llm: writer_model, tools: [], depends_on: [ops]}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """``koboi serve`` on a free port (one for this module's tests: starting it is most of
    their time), and a key of alice's: (base URL, key, workdir)."""
    tmp_path = tmp_path_factory.mktemp("served")
    config = tmp_path / "dag.yaml"
    config.write_text(textwrap.dedent(CONFIG), encoding="utf-8")
    (tmp_path / "work").mkdir()
    key = _make_key(config)
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    command = [sys.executable, "-m", "koboi_cli", "serve", str(config), "--port", str(port)]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.1)
        yield base, key, tmp_path / "work"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hang is a failure
            proc.kill()
        log.close()


def _make_key(config: Path) -> str:
    from koboi.config import build_store, load_config, resolve_store_url
    from koboi.plugins import default_host
    from koboi_server import KeyRing

    catalog = default_host().catalog()
    loaded = load_config(config, catalog)
    store = build_store(resolve_store_url(loaded, catalog), loaded.base_dir, catalog)

    async def create() -> str:
        async with store:
            _, token = await KeyRing(store).create("alice")
            return str(token)

    return anyio.run(create)


def sse(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any], int | None]]:
    name, data, ident = "message", [], None
    for line in response.iter_lines():
        if line == "":
            if data:
                yield name, json.loads("\n".join(data)), ident
            name, data, ident = "message", [], None
        elif not line.startswith(":"):
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
            elif key == "id":
                ident = int(value)


def test_a_chat_streams_the_nodes_and_a_nodes_approval_reaches_the_client(
    served: tuple[str, str, Path],
) -> None:
    base, key, work = served
    headers = {"Authorization": f"Bearer {key}"}
    seen: list[tuple[str, dict[str, Any]]] = []
    with (
        httpx.Client(base_url=base, headers=headers, timeout=60) as client,
        client.stream("POST", "/v1/chat/stream", json={"message": "log deploy-42"}) as response,
    ):
        assert response.status_code == 200, response.read()
        for name, data, _ in sse(response):
            seen.append((name, data))
            if name == "pending_approval":
                # Asked inside the node "ops" (a child run): announced on this stream.
                assert data["tool"] == "append_log" and data["child_session_id"]
                decided = client.post(
                    f"/v1/approvals/{data['approval_id']}", json={"decision": "approve"}
                )
                assert decided.status_code == 200, decided.text
            if name in ("final", "error"):
                break
    names = [n for n, _ in seen]
    final = seen[-1][1]
    assert names[-1] == "final", seen
    assert final["outcome"] == "completed", final
    assert final["output"] == "Report: ops did: appended deploy-42"
    assert "deploy-42\n" in (work / "crash_demo.log").read_text()
    children = [d for n, d in seen if n == "child_event"]
    tags = {c["tag"] for c in children}
    assert tags == {"ops", "writer"}
    kinds = {c["event"]["kind"] for c in children if c["tag"] == "ops"}
    assert {"tool_call", "tool_result", "final"} <= kinds
    assert names.index("pending_approval") < names.index("final")
    nodes = [d["type"] for n, d in seen if n == "plugin_event"]
    assert nodes.count("orchestration.node_finished") == 2


def test_a_json_chat_answers_202_with_the_nodes_approval(served: tuple[str, str, Path]) -> None:
    base, key, work = served
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        answer = client.post("/v1/chat", json={"message": "log json-7"})
        assert answer.status_code == 202, answer.text
        body = answer.json()
        assert body["status"] == "awaiting_approval"
        (approval,) = body["approvals"]
        assert approval["tool"] == "append_log" and approval["session_id"] != body["session_id"]
        assert client.post(f"/v1/approvals/{approval['approval_id']}", json={"decision": "approve"})
        with client.stream("GET", f"/v1/sessions/{body['session_id']}/events") as events:
            final = next(d for n, d, _ in sse(events) if n == "final")
    assert final["outcome"] == "completed" and final["output"] == "Report: ops did: appended json-7"
    assert "json-7\n" in (work / "crash_demo.log").read_text()


def test_a_job_runs_the_graph(served: tuple[str, str, Path]) -> None:
    base, key, _ = served
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        created = client.post("/v1/jobs", json={"input": "nothing to do"})
        assert created.status_code == 202, created.text
        job = created.json()
        deadline = time.monotonic() + 60
        while job["status"] not in ("completed", "failed", "cancelled"):
            assert time.monotonic() < deadline, job
            time.sleep(0.2)
            job = client.get(f"/v1/jobs/{job['id']}").json()
    assert job["status"] == "completed", job
    assert job["result"]["output"] == "Report: ops: nothing to log"


def test_a_nodes_approval_in_a_job_reaches_the_jobs_stream(served: tuple[str, str, Path]) -> None:
    base, key, work = served
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        job = client.post("/v1/jobs", json={"input": "log job-9"}).json()
        names: list[str] = []
        with client.stream("GET", f"/v1/jobs/{job['id']}/events") as events:
            for name, data, _ in sse(events):
                names.append(name)
                if name == "pending_approval":
                    status = client.get(f"/v1/jobs/{job['id']}").json()["status"]
                    assert status == "awaiting_approval"
                    assert data["child_session_id"] and data["tool"] == "append_log"
                    decided = client.post(
                        f"/v1/approvals/{data['approval_id']}", json={"decision": "approve"}
                    )
                    assert decided.status_code == 200, decided.text
                if name in ("final", "error", "idle"):
                    break
        deadline = time.monotonic() + 60
        while job["status"] not in ("completed", "failed", "cancelled"):
            assert time.monotonic() < deadline, job
            time.sleep(0.2)
            job = client.get(f"/v1/jobs/{job['id']}").json()
    assert "pending_approval" in names and "child_event" in names
    assert job["status"] == "completed", job
    assert job["result"]["output"] == "Report: ops did: appended job-9"
    assert "job-9\n" in (work / "crash_demo.log").read_text()
