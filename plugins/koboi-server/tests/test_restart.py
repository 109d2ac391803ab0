"""``koboi serve`` as a real process: SIGTERM drains, SIGKILL kills; either way a pending
approval is still pending after a restart, is delivered again on reconnect, and answering it
completes the run — with every side effect exactly once."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

SERVER = """
    server:
      keepalive_seconds: 1
      key_recheck_seconds: 0.5
      poll_seconds: 0.1
      drain_seconds: 6
      recovery_interval_seconds: 0.5
      access_log: false
"""


def _journal(in_store: Any, config: Path, session_id: str) -> list[Any]:
    async def read(store: Any) -> list[Any]:
        return list(await store.read(session_id))

    return list(in_store(read, config))


def _log(config: Path) -> str:
    path = config.parent / "work" / "crash_demo.log"
    return path.read_text() if path.exists() else ""


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_pending_approval_survives_a_restart(
    stop: int,
    write_config: Callable[..., Path],
    serve_process: Any,
    make_key: Any,
    client: Any,
    sse: Any,
    events_of: Any,
    in_store: Any,
) -> None:
    config = write_config(extra=SERVER)
    key = make_key(config=config)
    server = serve_process(config)
    c = client(server.base_url, key)

    seen: list[Any] = []
    ended_with: Any = None
    with c.stream("POST", "/v1/chat/stream", json={"message": "log restart-1"}) as response:
        for item in sse(response):
            if isinstance(item, str):
                continue
            if item.id is None:
                ended_with = item
                break
            seen.append(item)
            if item.event == "pending_approval":
                status = server.stop(stop)
                if stop == signal.SIGTERM:
                    assert status == 0, server.log()
                    continue  # the stream is told before the server goes
                break
    pending = seen[-1].data
    assert seen[-1].event == "pending_approval"
    if stop == signal.SIGTERM:
        assert ended_with is not None and ended_with.event == "error"
        assert ended_with.data["code"] == "shutting_down"
        assert ended_with.data["last_event_id"] == seen[-1].id
        assert "suspended" in server.log()
    sid = pending["session_id"]
    # Left as a crash leaves it: interrupted, the approval asked and not answered.
    journal = _journal(in_store, config, sid)
    assert journal[-1].type == "approval_requested"
    assert "run_finished" not in [e.type for e in journal]
    assert _log(config) == ""

    restarted = serve_process(config)
    c = client(restarted.base_url, key)
    listed = c.get(f"/v1/sessions/{sid}/approvals", params={"status": "pending"}).json()
    assert [a["approval_id"] for a in listed["approvals"]] == [pending["approval_id"]]

    rest: list[Any] = []
    with c.stream(
        "GET", f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": str(seen[-1].id)}
    ) as response:
        for item in sse(response):
            if isinstance(item, str):
                continue
            rest.append(item)
            if item.event == "pending_approval" and item.id is None:
                # Delivered again: the same approval, answerable by the same id.
                assert item.data["redelivered"] is True
                assert item.data["approval_id"] == pending["approval_id"]
                answer = c.post(
                    f"/v1/approvals/{pending['approval_id']}", json={"decision": "approve"}
                )
                assert answer.status_code == 200, answer.text
    assert rest[0].event == "pending_approval"
    with_ids = [e for e in rest if e.id is not None]
    assert with_ids[0].id == seen[-1].id + 1  # strictly after the cursor, nothing skipped
    assert [e.event for e in with_ids][:4] == [
        "run_resumed",
        "approval_decided",
        "tool_call",
        "tool_result",
    ]
    assert rest[-1].event == "final" and rest[-1].data["output"] == "logged: appended restart-1"
    journal = _journal(in_store, config, sid)
    assert [e.id for e in seen] + [e.id for e in with_ids] == [j.seq for j in journal]
    assert _log(config) == "restart-1\n"
    assert restarted.stop(signal.SIGTERM) == 0


def test_sigterm_lets_a_running_step_finish_and_the_run_resumes_after_restart(
    yolo_config: Callable[..., Path],
    serve_process: Any,
    make_key: Any,
    client: Any,
    sse: Any,
    in_store: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "1.0")
    config = yolo_config(extra=SERVER)
    key = make_key(config=config)
    server = serve_process(config)
    c = client(server.base_url, key)
    with c.stream("POST", "/v1/chat/stream", json={"message": "log drained"}) as response:
        for item in sse(response):
            if not isinstance(item, str) and item.event == "tool_call":
                sid = item.data["session_id"]
                break
    started = time.monotonic()
    assert server.stop(signal.SIGTERM) == 0, server.log()
    took = time.monotonic() - started
    assert 0.6 < took < 5, took  # waited for the tool, not for the whole drain time (6 s)
    journal = [e.type for e in _journal(in_store, config, sid)]
    # The step in flight reached its boundary: its result is journaled, the next model
    # call was announced, and the run stopped there without recording an end.
    assert journal[-2:] == ["tool_call_finished", "model_call_started"]
    assert "run_finished" not in journal
    assert _log(config) == "drained\n"

    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "0")
    restarted = serve_process(config)
    c = client(restarted.base_url, key)
    deadline = time.monotonic() + 20
    while c.get(f"/v1/sessions/{sid}").json()["status"] != "completed":
        assert time.monotonic() < deadline, restarted.log()
        time.sleep(0.1)
    journal = [e.type for e in _journal(in_store, config, sid)]
    assert journal.count("tool_call_started") == 1 and journal[-1] == "run_finished"
    assert _log(config) == "drained\n"  # resumed without running the tool again
    assert restarted.stop(signal.SIGTERM) == 0
