"""Chat over JSON and SSE: results, event ids from the journal, text deltas, disconnect and
reconnect with Last-Event-ID (no gap, no duplicate), busy sessions and admission limits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx


def _journal(in_store: Any, session_id: str, config: Path | None = None) -> list[Any]:
    async def read(store: Any) -> list[Any]:
        return list(await store.read(session_id))

    return list(in_store(read) if config is None else in_store(read, config))


def test_json_chat_runs_to_the_end_and_continues_a_session(
    thread_server: Any, client: Any, make_key: Any, in_store: Any
) -> None:
    server = thread_server()
    c = client(server.base_url, make_key())
    first = c.post("/v1/chat", json={"message": "What is 6 * 7?"})
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["status"] == "finished" and body["outcome"] == "completed"
    assert body["output"] == "6 * 7 = 42" and body["steps"] == 2
    events = _journal(in_store, body["session_id"])
    assert body["last_event_id"] == events[-1].seq
    assert events[0].type == "run_started"

    second = c.post("/v1/chat", json={"message": "And 2 + 2?", "session_id": body["session_id"]})
    assert second.json()["output"] == "2 + 2 = 4"
    assert second.json()["last_event_id"] > body["last_event_id"]
    info = c.get(f"/v1/sessions/{body['session_id']}").json()
    assert info["status"] == "completed" and info["last_event_id"] == second.json()["last_event_id"]


def test_stream_ids_are_the_journal_seqs_and_deltas_rebuild_the_text(
    thread_server: Any, client: Any, make_key: Any, in_store: Any, events_of: Any
) -> None:
    server = thread_server()
    c = client(server.base_url, make_key())
    with c.stream("POST", "/v1/chat/stream", json={"message": "What is 6 * 7?"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = events_of(response)
    session_id = events[0].data["session_id"]
    journal = _journal(in_store, session_id)
    with_ids = [e for e in events if e.id is not None]
    assert [e.id for e in with_ids] == [j.seq for j in journal]  # one per journal event
    assert [e.event for e in with_ids] == [
        "run_started",
        "step_started",
        "step",
        "tool_call",
        "tool_result",
        "step_started",
        "step",
        "final",
    ]
    assert events[-1].event == "final" and events[-1].data["output"] == "6 * 7 = 42"
    deltas = [e for e in events if e.event == "text_delta"]
    assert deltas and all(d.id is None for d in deltas)
    started = next(e for e in with_ids if e.event == "step_started" and e.data["step"] == 2)
    assert {d.data["after_event_id"] for d in deltas} == {started.id}
    assert [d.data["offset"] for d in deltas] == [
        sum(len(x.data["text"]) for x in deltas[:i]) for i in range(len(deltas))
    ]
    step = next(e for e in with_ids if e.event == "step" and e.data["step"] == 2)
    assert "".join(d.data["text"] for d in deltas) == step.data["text"] == "6 * 7 = 42"
    # Deltas come after their step_started and before the step that ends it.
    order = [e.event for e in events]
    assert order.index("text_delta") > order.index("step_started", order.index("tool_result"))
    assert max(i for i, e in enumerate(order) if e == "text_delta") < len(order) - 2


def test_disconnect_mid_run_then_resume_with_last_event_id(
    yolo_config: Callable[..., Path],
    thread_server: Any,
    client: Any,
    make_key: Any,
    in_store: Any,
    stream_until: Any,
    events_of: Any,
    monkeypatch: Any,
) -> None:
    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "0.6")
    config = yolo_config()
    server = thread_server(config)
    c = client(server.base_url, make_key(config=config))
    # The client goes away while the tool runs.
    seen = stream_until(c, "POST", "/v1/chat/stream", "tool_call", json={"message": "log once"})
    session_id = seen[0].data["session_id"]
    last = seen[-1].id
    # The run goes on without anybody listening.
    deadline = time.monotonic() + 10
    while c.get(f"/v1/sessions/{session_id}").json()["status"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with c.stream(
        "GET", f"/v1/sessions/{session_id}/events", headers={"Last-Event-ID": str(last)}
    ) as response:
        rest = events_of(response)
    ids = [e.id for e in seen if e.id is not None] + [e.id for e in rest if e.id is not None]
    journal = _journal(in_store, session_id, config)
    assert ids == [j.seq for j in journal]  # no gap, no duplicate
    assert rest[0].id == last + 1 and rest[-1].event == "final"
    assert rest[-1].data["output"] == "logged: appended once"
    log = (config.parent / "work" / "crash_demo.log").read_text()
    assert log == "once\n"  # the tool ran once, though the client left during it


def test_reconnect_while_the_run_is_still_going_follows_it_to_the_end(
    yolo_config: Callable[..., Path],
    thread_server: Any,
    client: Any,
    make_key: Any,
    in_store: Any,
    stream_until: Any,
    events_of: Any,
    monkeypatch: Any,
) -> None:
    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "0.8")
    config = yolo_config()
    server = thread_server(config)
    c = client(server.base_url, make_key(config=config))
    seen = stream_until(c, "POST", "/v1/chat/stream", "tool_call", json={"message": "log twice"})
    session_id = seen[0].data["session_id"]
    # Still running: the reconnected stream picks up strictly after the last id and follows.
    assert c.get(f"/v1/sessions/{session_id}").json()["running_here"] is True
    with c.stream(
        "GET", f"/v1/sessions/{session_id}/events", params={"after": seen[-1].id}
    ) as response:
        rest = [e for e in events_of(response) if e.id is not None]
    journal = _journal(in_store, session_id, config)
    assert [e.id for e in seen + rest] == [j.seq for j in journal]
    assert rest[-1].event == "final"


def test_events_of_a_finished_session_replay_and_end(
    thread_server: Any, client: Any, make_key: Any, events_of: Any
) -> None:
    server = thread_server()
    c = client(server.base_url, make_key())
    result = c.post("/v1/chat", json={"message": "What is 1 + 2?"}).json()
    sid, last = result["session_id"], result["last_event_id"]
    with c.stream("GET", f"/v1/sessions/{sid}/events") as response:
        replay = events_of(response)
    assert [e.id for e in replay] == list(range(1, last + 1))
    assert replay[-1].event == "final"
    with c.stream("GET", f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": "3"}) as r:
        tail = events_of(r)
    assert [e.id for e in tail] == list(range(4, last + 1))
    # At the end: one terminal "idle" event, without an id.
    with c.stream("GET", f"/v1/sessions/{sid}/events", params={"after": last}) as response:
        idle = events_of(response)
    assert [(e.event, e.id) for e in idle] == [("idle", None)]
    assert idle[0].data["last_event_id"] == last
    beyond = c.get(f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": str(last + 1)})
    assert beyond.status_code == 422 and beyond.json()["error"]["code"] == "invalid_request"
    both = c.get(f"/v1/sessions/{sid}/events", params={"after": 1}, headers={"Last-Event-ID": "2"})
    assert both.status_code == 422


def test_a_waiting_stream_sends_keepalive_comments(
    thread_server: Any, client: Any, make_key: Any, sse: Any
) -> None:
    server = thread_server(settings={"keepalive_seconds": 0.3})
    c = client(server.base_url, make_key())
    comments: list[str] = []
    with c.stream("POST", "/v1/chat/stream", json={"message": "log wait"}) as response:
        started = None
        for item in sse(response):
            if isinstance(item, str):
                comments.append(item)
                if len(comments) == 3:
                    break
            elif item.event == "pending_approval":
                started = time.monotonic()
        assert started is not None
        assert time.monotonic() - started < 3
    assert comments == [": keepalive"] * 3


def test_a_busy_session_is_409_and_limits_are_429(
    thread_server: Any, client: Any, make_key: Any
) -> None:
    server = thread_server(settings={"max_runs_per_principal": 1})
    alice = client(server.base_url, make_key("alice"))
    bob = client(server.base_url, make_key("bob"))
    waiting = alice.post("/v1/chat", json={"message": "log busy"}).json()
    assert waiting["status"] == "awaiting_approval"
    sid = waiting["session_id"]
    busy = alice.post("/v1/chat", json={"message": "What is 1 + 1?", "session_id": sid})
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "session_busy"
    limited = alice.post("/v1/chat", json={"message": "What is 1 + 1?"})
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "too_many_runs"
    assert int(limited.headers["retry-after"]) >= 1
    # Positive controls: another principal is not limited; after the run ends, alice is not.
    assert bob.post("/v1/chat", json={"message": "What is 1 + 1?"}).status_code == 200
    approval = waiting["approvals"][0]["approval_id"]
    assert alice.post(f"/v1/approvals/{approval}", json={"decision": "deny"}).status_code == 200
    deadline = time.monotonic() + 10
    while alice.get(f"/v1/sessions/{sid}").json()["running_here"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert alice.post("/v1/chat", json={"message": "What is 1 + 1?"}).status_code == 200


def test_the_next_message_right_after_a_final_event_runs_instead_of_busy(
    config_path: Path, thread_server: Any, client: Any, make_key: Any, events_of: Any
) -> None:
    """A client may send its next message as soon as it has the final event (the busy
    error says so); the run that sent it may still be closing its stream and giving the
    session's lease back. Here that takes 0.5 s, so the follow-up lands inside it."""
    from koboi.config import build_store, load_config, resolve_store_url
    from koboi.plugins import default_host

    catalog = default_host().catalog()
    loaded = load_config(config_path, catalog)
    store = build_store(resolve_store_url(loaded, catalog), loaded.base_dir, catalog)
    release = store.release_lease
    releasing: list[float] = []

    async def slow_release(lease: Any) -> None:
        releasing.append(time.monotonic())
        await anyio.sleep(0.5)
        await release(lease)

    store.release_lease = slow_release  # type: ignore[method-assign]
    server = thread_server(store=store)
    c = client(server.base_url, make_key())
    with c.stream("POST", "/v1/chat/stream", json={"message": "What is 6 * 7?"}) as response:
        first = events_of(response)
    assert first[-1].event == "final" and first[-1].data["outcome"] == "completed"
    sid = first[-1].data["session_id"]
    sent = time.monotonic()
    second = c.post("/v1/chat", json={"message": "And 2 + 2?", "session_id": sid})
    assert second.status_code == 200, second.text
    assert second.json()["output"] == "2 + 2 = 4"
    # The follow-up really came while the first run was giving the session back.
    assert releasing and releasing[0] + 0.5 > sent, (releasing, sent)


def test_concurrent_chats_each_get_their_own_session(thread_server: Any, make_key: Any) -> None:
    server = thread_server()
    key = make_key()
    outputs: list[dict[str, Any]] = []

    def one(n: int) -> None:
        with httpx.Client(base_url=server.base_url, timeout=30) as c:
            answer = c.post(
                "/v1/chat",
                json={"message": f"What is {n} + {n}?"},
                headers={"Authorization": f"Bearer {key}"},
            )
            outputs.append(answer.json())

    threads = [threading.Thread(target=one, args=(n,)) for n in range(1, 13)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(o["output"] for o in outputs) == sorted(
        f"{n} + {n} = {2 * n}" for n in range(1, 13)
    )
    assert len({o["session_id"] for o in outputs}) == 12


def test_chats_refused_with_429_create_no_session_with_or_without_a_key(
    thread_server: Any, client: Any, make_key: Any
) -> None:
    """The place of a run is reserved before its session is created: of concurrent chats
    over the principal's limit, the refused ones leave nothing behind (no session, no
    claim of their Idempotency-Key)."""
    server = thread_server(settings={"max_runs_per_principal": 1})
    key = make_key("alice")
    alice = client(server.base_url, key)
    gate = threading.Barrier(6)
    answers: list[tuple[int, dict[str, Any]]] = []
    status_of: dict[int, int] = {}

    def chat(n: int) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        if n % 2 == 0:
            headers["Idempotency-Key"] = f"limited-{n}"
        with httpx.Client(base_url=server.base_url, timeout=30) as c:
            gate.wait()
            # "log" asks for an approval: the admitted run holds its place meanwhile.
            answer = c.post("/v1/chat", json={"message": f"log limited-{n}"}, headers=headers)
            answers.append((answer.status_code, answer.json()))
            status_of[n] = answer.status_code

    threads = [threading.Thread(target=chat, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    statuses = sorted(status for status, _ in answers)
    assert statuses == [202, 429, 429, 429, 429, 429], answers
    assert all(body["error"]["code"] == "too_many_runs" for s, body in answers if s == 429)
    waiting = next(body for status, body in answers if status == 202)
    listed = alice.get("/v1/sessions").json()["sessions"]
    assert [s["id"] for s in listed] == [waiting["session_id"]]
    # Once the admitted run ends, its place is free again — and a refused key was not
    # kept: its retry runs.
    approval = waiting["approvals"][0]["approval_id"]
    assert alice.post(f"/v1/approvals/{approval}", json={"decision": "deny"}).status_code == 200
    deadline = time.monotonic() + 10
    while alice.get(f"/v1/sessions/{waiting['session_id']}").json()["running_here"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    refused = next(n for n in range(0, 6, 2) if status_of[n] == 429)  # keyed, refused
    retry = alice.post(
        "/v1/chat",
        json={"message": f"log limited-{refused}"},
        headers={"Idempotency-Key": f"limited-{refused}"},
    )
    assert retry.status_code == 202 and retry.json()["status"] == "awaiting_approval", retry.text
    assert "idempotent-replayed" not in retry.headers
