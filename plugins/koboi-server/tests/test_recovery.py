"""Interrupted server sessions: resumed by the server that finds them (when enabled), refused
for new messages until then, and left alone when they are not the server's."""

from __future__ import annotations

import time
from typing import Any

from koboi.store import NewEvent


def _interrupted_session(in_store: Any, owner: str, *, origin: str = "koboi-server") -> str:
    """A session as a replica killed during a model call leaves it."""

    async def make(store: Any) -> str:
        info = await store.create_session(owner=owner, metadata={"origin": origin})
        await store.set_status(info.id, "running")
        await store.append(
            info.id,
            [
                NewEvent("run_started", {"input": "What is 4 + 4?", "agent": "served"}),
                NewEvent("model_call_started", {"step": 1}),
            ],
        )
        return str(info.id)

    return str(in_store(make))


def _wait_for(predicate: Any, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_an_interrupted_session_is_resumed_and_refuses_messages_meanwhile(
    thread_server: Any, client: Any, make_key: Any, in_store: Any, events_of: Any
) -> None:
    key = make_key("alice")
    sid = _interrupted_session(in_store, "alice")
    mine = _interrupted_session(in_store, "alice", origin="koboi-cli")
    # Recovery off: the session stays interrupted and a new message is refused, clearly.
    server = thread_server(settings={"resume_interrupted": False})
    c = client(server.base_url, key)
    refused = c.post("/v1/chat", json={"message": "What is 1 + 1?", "session_id": sid})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "session_interrupted"
    assert c.get(f"/v1/sessions/{sid}").json()["status"] == "running"
    server.stop()

    # Recovery on: the server resumes it by itself and the session ends as it should have.
    server = thread_server()
    c = client(server.base_url, key)
    _wait_for(lambda: c.get(f"/v1/sessions/{sid}").json()["status"] == "completed")
    with c.stream("GET", f"/v1/sessions/{sid}/events", params={"after": 2}) as response:
        events = events_of(response)
    assert events[0].event == "run_resumed" and events[0].id == 3
    assert events[-1].event == "final" and events[-1].data["output"] == "4 + 4 = 8"
    # Not the server's session (no origin mark): never touched.
    assert c.get(f"/v1/sessions/{mine}").json()["status"] == "running"
    # And the resumed session takes new messages again.
    again = c.post("/v1/chat", json={"message": "What is 2 + 2?", "session_id": sid})
    assert again.status_code == 200 and again.json()["output"] == "2 + 2 = 4"
