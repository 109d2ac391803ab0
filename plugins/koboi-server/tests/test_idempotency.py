"""Idempotency-Key on the chat routes: one run per key, its answer again on retry, 409 while it
runs, 422 for another body; against a real server, with the tool's effect counted on disk."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest


def _log(config: Path) -> list[str]:
    path = config.parent / "work" / "crash_demo.log"
    if not path.exists():
        return []
    return path.read_text().splitlines()


def _keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def test_a_retry_gets_the_first_answer_and_nothing_runs_twice(
    yolo_config: Any, thread_server: Any, client: Any, make_key: Any
) -> None:
    config = yolo_config()  # no approvals: each 'log X' runs append_log at once
    server = thread_server(config)
    alice_key = make_key(config=config)
    c = client(server.base_url, alice_key)

    first = c.post("/v1/chat", json={"message": "log one"}, headers=_keyed("k-1"))
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "finished" and "idempotent-replayed" not in first.headers
    again = c.post("/v1/chat", json={"message": "log one"}, headers=_keyed("k-1"))
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    replayed, original = again.json(), first.json()
    for field in ("session_id", "outcome", "output", "steps", "last_event_id", "usage"):
        assert replayed[field] == original[field], field
    assert _log(config) == ["one"]  # the tool ran once

    other = c.post("/v1/chat", json={"message": "log two"}, headers=_keyed("k-1"))
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    # The same key on the streaming route is another request (another body): refused too.
    streamed = c.post("/v1/chat/stream", json={"message": "log one"}, headers=_keyed("k-1"))
    assert streamed.status_code == 422
    # Keys are the principal's own: bob's k-1 is a run of his.
    bob = client(server.base_url, make_key("bob", config=config))
    bobs = bob.post("/v1/chat", json={"message": "log one"}, headers=_keyed("k-1"))
    assert bobs.status_code == 200 and "idempotent-replayed" not in bobs.headers
    assert bobs.json()["session_id"] != original["session_id"]
    # Positive control: without a key the same body runs again.
    assert c.post("/v1/chat", json={"message": "log one"}).status_code == 200
    assert _log(config) == ["one", "one", "one"]
    assert c.post("/v1/chat", json={"message": "x"}, headers=_keyed("k" * 256)).status_code == 422


def test_a_request_in_progress_is_409_and_concurrent_ones_make_one_run(
    yolo_config: Any,
    thread_server: Any,
    client: Any,
    make_key: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "1.0")  # the tool runs for a second
    config = yolo_config()  # no approvals: each 'log X' runs append_log at once
    server = thread_server(config)
    key = make_key(config=config)
    answers: list[httpx.Response] = []

    def post() -> None:
        with httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as c:
            answers.append(c.post("/v1/chat", json={"message": "log race"}, headers=_keyed("r")))

    threads = [threading.Thread(target=post) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    codes = sorted(a.status_code for a in answers)
    assert codes == [200] + [409] * 9, [a.text for a in answers]
    busy = [a.json()["error"] for a in answers if a.status_code == 409]
    winner = next(a.json() for a in answers if a.status_code == 200)
    assert {e["code"] for e in busy} == {"idempotency_key_in_progress"}
    assert {e["session_id"] for e in busy} == {winner["session_id"]}
    assert all(int(a.headers["retry-after"]) >= 1 for a in answers if a.status_code == 409)
    assert _log(config) == ["race"]

    # Once it has finished, the retry gets its answer.
    c = client(server.base_url, key)
    done = c.post("/v1/chat", json={"message": "log race"}, headers=_keyed("r"))
    assert done.status_code == 200 and done.headers["idempotent-replayed"] == "true"
    assert done.json()["last_event_id"] == winner["last_event_id"]
    assert _log(config) == ["race"]


def test_a_keyed_request_that_could_not_start_leaves_the_key_free(
    yolo_config: Any,
    thread_server: Any,
    client: Any,
    make_key: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "1.0")
    config = yolo_config()  # no approvals: each 'log X' runs append_log at once
    server = thread_server(config)
    key = make_key(config=config)
    c = client(server.base_url, key)
    sid = c.post("/v1/chat", json={"message": "hello"}).json()["session_id"]
    # A slow run in that session; while it goes on, a keyed request to continue the
    # session is refused (the session is busy): its key must not stay claimed.
    slow = threading.Thread(
        target=lambda: client(server.base_url, key).post(
            "/v1/chat", json={"message": "log first", "session_id": sid}
        )
    )
    slow.start()
    deadline = time.monotonic() + 20
    while c.get(f"/v1/sessions/{sid}").json()["status"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    body = {"message": "log second", "session_id": sid}
    busy = c.post("/v1/chat", json=body, headers=_keyed("cont"))
    assert busy.status_code == 409, busy.text
    assert busy.json()["error"]["code"] == "session_busy", busy.text
    slow.join(20)
    retry = c.post("/v1/chat", json=body, headers=_keyed("cont"))
    assert retry.status_code == 200 and "idempotent-replayed" not in retry.headers, retry.text
    assert retry.json()["output"].startswith("logged: ")
    assert _log(config) == ["first", "second"]


def test_a_streamed_request_is_replayed_as_the_same_events(
    yolo_config: Any, thread_server: Any, client: Any, make_key: Any, events_of: Any
) -> None:
    config = yolo_config()  # no approvals: each 'log X' runs append_log at once
    server = thread_server(config)
    c = client(server.base_url, make_key(config=config))
    with c.stream(
        "POST", "/v1/chat/stream", json={"message": "log s"}, headers=_keyed("s-1")
    ) as response:
        assert response.status_code == 200
        first = events_of(response)
    with c.stream(
        "POST", "/v1/chat/stream", json={"message": "log s"}, headers=_keyed("s-1")
    ) as response:
        assert response.status_code == 200
        assert response.headers["idempotent-replayed"] == "true"
        again = events_of(response)
    assert first[-1].event == "final"
    assert [(e.id, e.event) for e in again if e.id is not None] == [
        (e.id, e.event) for e in first if e.id is not None
    ]
    assert _log(config) == ["s"]


def test_a_decision_and_a_cancel_with_a_key_are_answered_once(
    write_config: Any,
    thread_server: Any,
    client: Any,
    make_key: Any,
    stream_until: Any,
) -> None:
    config = write_config()  # act mode: append_log asks for an approval
    server = thread_server(config, settings={"run_jobs": False})
    c = client(server.base_url, make_key(config=config))
    seen = stream_until(c, "POST", "/v1/chat/stream", "pending_approval", json={"message": "log a"})
    approval = seen[-1].data["approval_id"]
    route = f"/v1/approvals/{approval}"

    first = c.post(route, json={"decision": "approve"}, headers=_keyed("d-1"))
    assert first.status_code == 200 and first.json()["status"] == "approved"
    again = c.post(route, json={"decision": "approve"}, headers=_keyed("d-1"))
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    # Positive control: without the key, a second decision is refused as decided.
    assert c.post(route, json={"decision": "approve"}).status_code == 409
    other = c.post(route, json={"decision": "deny"}, headers=_keyed("d-1"))
    assert other.status_code == 422

    job = c.post("/v1/jobs", json={"input": "log never"}).json()
    cancel = f"/v1/jobs/{job['id']}/cancel"
    cancelled = c.post(cancel, headers=_keyed("c-1"))
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    replay = c.post(cancel, headers=_keyed("c-1"))
    assert replay.headers["idempotent-replayed"] == "true" and replay.json() == cancelled.json()
    # A failed request leaves its key free: the unknown job is 404 each time, not replayed.
    for _ in range(2):
        missing = c.post("/v1/jobs/job_missing/cancel", headers=_keyed("c-2"))
        assert missing.status_code == 404 and "idempotent-replayed" not in missing.headers
