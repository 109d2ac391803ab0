"""Two ``koboi serve`` instances on two hosts of their own, one calling the other over A2A.

The test makes two network namespaces (``ip netns``), each with its own address,
joined by a veth pair (A ↔ B), and a second pair from this host to A (the test's
HTTP client reaches the caller there). The callee serves on B's address only, so the
caller reaches it over the network between the two hosts, never over a shared
loopback. Each instance has its own SQLite store (read back from the files).

- a chat on A that uses the peer on B: the answer, and one trace id in both journals;
- a job on A whose peer task runs on B while B is killed (SIGKILL) and restarted: the
  task resumes on B, A's call follows it to its end;
- a job on A killed (SIGKILL) during its peer call and restarted: A's call resumes
  the same task on B (no second task), and the job completes.

Needs root (network namespaces); on a machine without them the test is skipped,
and fails when ``CI`` is set.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from a2a_testkit import ServeProcess, journal, make_key, require, signing_key, store_call

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(900)]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass
class Hosts:
    a: str  # namespace of the caller
    b: str  # namespace of the callee
    a_addr: str  # the caller's address (this host reaches it)
    b_addr: str  # the callee's address (only A reaches it)


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    can = os.geteuid() == 0 and shutil.which("ip") is not None
    require(can, "network namespaces need root and iproute2 (ip netns)")
    tag = uuid.uuid4().hex[:6]
    net = random.randint(100, 250)
    sub = random.randint(1, 250)
    a, b = f"kba-{tag}", f"kbb-{tag}"
    link_ab, link_ha = f"kab{tag}", f"kha{tag}"
    hosts = Hosts(a, b, f"10.{net}.{sub}.6", f"10.{net}.{sub}.2")
    try:
        for ns in (a, b):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        # A <-> B: 10.n.s.1 / 10.n.s.2
        _ip("link", "add", link_ab, "type", "veth", "peer", "name", link_ab + "b")
        _ip("link", "set", link_ab, "netns", a)
        _ip("link", "set", link_ab + "b", "netns", b)
        _ip("-n", a, "addr", "add", f"10.{net}.{sub}.1/30", "dev", link_ab)
        _ip("-n", b, "addr", "add", f"10.{net}.{sub}.2/30", "dev", link_ab + "b")
        _ip("-n", a, "link", "set", link_ab, "up")
        _ip("-n", b, "link", "set", link_ab + "b", "up")
        # this host <-> A: 10.n.s.5 / 10.n.s.6
        _ip("link", "add", link_ha, "type", "veth", "peer", "name", link_ha + "a")
        _ip("link", "set", link_ha + "a", "netns", a)
        _ip("addr", "add", f"10.{net}.{sub}.5/30", "dev", link_ha)
        _ip("-n", a, "addr", "add", f"10.{net}.{sub}.6/30", "dev", link_ha + "a")
        _ip("link", "set", link_ha, "up")
        _ip("-n", a, "link", "set", link_ha + "a", "up")
        yield hosts
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
        subprocess.run(["ip", "link", "del", link_ha], check=False, capture_output=True)


SETTINGS = {
    "shared_sandbox": True,
    "poll_seconds": 0.1,
    "job_poll_seconds": 0.1,
    "job_lease_seconds": 3,
    "recovery_interval_seconds": 0.5,
    "drain_seconds": 2.0,
    "access_log": True,
}


def _callee(tmp: Path, addr: str, port: int, private: Path) -> Path:
    config = {
        "agent": {"name": "calc", "mode": "yolo", "system_prompt": "I do arithmetic and logs."},
        "llm": {
            "provider": "scripted",
            "rules": [
                {
                    "match": r"log (?P<line>[\w-]+)",
                    "tool": "append_log",
                    "arguments": {"line": "{line}"},
                    "reply": "logged: {result}",
                },
                {
                    "match": r"(?P<expr>\d[\d\s+*/().-]*\d)",
                    "tool": "calculator",
                    "arguments": {"expression": "{expr}"},
                    "reply": "{expr} = {result}",
                },
            ],
        },
        "tools": {"builtin": ["calculator", "append_log"]},
        "sandbox": {"backend": "passthrough", "workdir": str(tmp / "work")},
        "store": {"url": f"sqlite:///{tmp / 'callee.db'}"},
        "server": {**SETTINGS, "host": addr, "port": port},
        "a2a": {"serve": {"signing": {"key_file": str(private)}}},
    }
    (tmp / "work").mkdir(exist_ok=True)
    path = tmp / "callee.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _caller(tmp: Path, addr: str, port: int, peer_url: str, public: Path) -> Path:
    config = {
        "agent": {"name": "desk", "mode": "auto"},
        "llm": {
            "provider": "scripted",
            "rules": [
                {
                    "match": r"ask calc (?P<q>.+)",
                    "tool": "calc__calc",
                    "arguments": {"message": "{q}"},
                    "reply": "calc says: {result}",
                }
            ],
        },
        "sandbox": {"backend": "passthrough", "workdir": str(tmp / "work")},
        "store": {"url": f"sqlite:///{tmp / 'caller.db'}"},
        "server": {**SETTINGS, "host": addr, "port": port},
        "a2a": {
            "peers": [
                {
                    "name": "calc",
                    "url": peer_url,
                    "api_key": "${PEER_KEY}",
                    "public_key_file": str(public),
                    "risk": "safe",
                    "idempotent": True,
                    "timeout_seconds": 300,
                }
            ]
        },
    }
    (tmp / "work").mkdir(exist_ok=True)
    path = tmp / "caller.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _wait(check: Callable[[], Any], what: str, within: float = 120.0) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _jobs(config: Path, owner: str | None = None) -> list[Any]:
    async def work(store: Any) -> list[Any]:
        return list(await store.list_jobs(owner=owner, limit=100))

    found: list[Any] = store_call(config, work)
    return found


def _events(config: Path, session_id: str, kind: str) -> list[Any]:
    return [e for e in journal(config, session_id) if e.type == kind]


def _trace_id(traceparent: str) -> str:
    return traceparent.split("-")[1]


def _log_lines(root: Path) -> list[str]:
    lines: list[str] = []
    for log in root.rglob("crash_demo.log"):
        lines += log.read_text().splitlines()
    return lines


def test_two_instances_on_two_hosts_call_each_other_through_crashes(
    hosts: Hosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b_dir, a_dir = tmp_path / "b", tmp_path / "a"
    b_dir.mkdir()
    a_dir.mkdir()
    private, public = signing_key(b_dir)
    callee_config = _callee(b_dir, hosts.b_addr, 18300, private)
    peer_key = make_key(callee_config, "desk", scopes=["invoke"])
    monkeypatch.setenv("PEER_KEY", peer_key)
    caller_config = _caller(a_dir, hosts.a_addr, 18301, f"http://{hosts.b_addr}:18300", public)
    operator = make_key(caller_config, "operator")
    in_a = ["ip", "netns", "exec", hosts.a]
    in_b = ["ip", "netns", "exec", hosts.b]
    slow = {"KOBOI_DEMO_STEP_SECONDS": "4"}

    def callee() -> ServeProcess:
        return ServeProcess(callee_config, 18300, env=slow, prefix=in_b, host=hosts.b_addr)

    def caller() -> ServeProcess:
        env = {"PEER_KEY": peer_key}
        return ServeProcess(caller_config, 18301, env=env, prefix=in_a, host=hosts.a_addr)

    b = callee().start()
    a = caller().start()
    api = httpx.Client(
        base_url=a.base_url, headers={"Authorization": f"Bearer {operator}"}, timeout=120
    )
    try:
        # 1. A chat on A that uses B: one trace id in both journals.
        trace_id = uuid.uuid4().hex
        chat = api.post(
            "/v1/chat",
            json={"message": "ask calc 6 * 7"},
            headers={"traceparent": f"00-{trace_id}-{'2' * 16}-01"},
        )
        assert chat.status_code == 200, chat.text
        assert chat.json()["output"] == "calc says: 6 * 7 = 42"
        session = chat.json()["session_id"]
        assert (
            _trace_id(
                _events(caller_config, session, "run_started")[0].data["trace"]["traceparent"]
            )
            == trace_id
        )
        sent = _events(caller_config, session, "a2a.call_sent")
        assert _trace_id(sent[0].data["traceparent"]) == trace_id
        (task,) = _jobs(callee_config, "desk")
        started = _events(callee_config, task.session_id, "run_started")
        assert _trace_id(started[0].data["trace"]["traceparent"]) == trace_id
        # It crossed the network between the hosts: B saw A's address.
        assert f"{hosts.a_addr.rsplit('.', 1)[0]}.1" in b.log()

        # 2. B is killed while its task runs, and restarted: A's job still completes.
        job = api.post("/v1/jobs", json={"input": "ask calc log line-b"}).json()

        def callee_tool_started() -> Any:
            for found in _jobs(callee_config, "desk"):
                if found.id != task.id and _events(
                    callee_config, found.session_id, "tool_call_started"
                ):
                    return found
            return None

        remote = _wait(callee_tool_started, "the callee's tool call")
        b.kill()
        b = callee().start()
        done = _wait(
            lambda: api.get(f"/v1/jobs/{job['id']}").json()["status"] in ("completed", "failed"),
            "the caller's job after the callee's restart",
            within=240,
        )
        assert done
        finished = api.get(f"/v1/jobs/{job['id']}").json()
        assert finished["status"] == "completed", finished
        assert finished["result"]["output"].startswith("calc says: logged")
        remote_after = next(j for j in _jobs(callee_config, "desk") if j.id == remote.id)
        assert remote_after.status == "completed" and remote_after.attempts >= 2
        # The non-idempotent log line was not written twice by the resumed task.
        assert _log_lines(b_dir).count("line-b") <= 1

        # 3. A is killed during its peer call, and restarted: the same task on B is
        # followed to its end (no second task), and A's job completes.
        before = {j.id for j in _jobs(callee_config, "desk")}
        job = api.post("/v1/jobs", json={"input": "ask calc log line-a"}).json()

        def new_remote() -> Any:
            fresh = [j for j in _jobs(callee_config, "desk") if j.id not in before]
            return fresh[0] if fresh else None

        remote = _wait(new_remote, "the caller's peer task on the callee")
        a.kill()
        a = caller().start()
        api.close()
        api = httpx.Client(
            base_url=a.base_url, headers={"Authorization": f"Bearer {operator}"}, timeout=120
        )
        _wait(
            lambda: api.get(f"/v1/jobs/{job['id']}").json()["status"] in ("completed", "failed"),
            "the caller's job after its own restart",
            within=240,
        )
        finished = api.get(f"/v1/jobs/{job['id']}").json()
        assert finished["status"] == "completed", finished
        assert "line-a" in finished["result"]["output"]
        after = [j for j in _jobs(callee_config, "desk") if j.id not in before]
        assert [j.id for j in after] == [remote.id]  # one task, followed, not sent again
        assert _log_lines(b_dir).count("line-a") == 1
        print(json.dumps({"trace_id": trace_id, "callee_attempts": remote_after.attempts}))
    finally:
        api.close()
        a.stop()
        b.stop()
