"""Ownership: another principal gets 404 on every route and method of the OpenAPI spec for
objects that are not theirs, lists never show them, and the owner (positive control) gets
through on the same requests."""

from __future__ import annotations

import re
from typing import Any

import httpx

# Every route, into the routers FastAPI keeps as one entry.
from koboi_server.extensions import _leaves as leaves

#: How to call each /v1 operation of the spec: (JSON body or None, ids to put in the path).
#: A new route fails the test below until it is added here, so none escapes the check.
BODIES: dict[tuple[str, str], Any] = {
    ("post", "/v1/chat"): lambda ids: {"message": "log x", "session_id": ids["session_id"]},
    ("post", "/v1/chat/stream"): lambda ids: {"message": "log x", "session_id": ids["session_id"]},
    ("get", "/v1/sessions"): None,
    ("get", "/v1/sessions/{session_id}"): None,
    ("get", "/v1/sessions/{session_id}/events"): None,
    ("get", "/v1/sessions/{session_id}/approvals"): None,
    ("get", "/v1/approvals/{approval_id}"): None,
    ("post", "/v1/approvals/{approval_id}"): lambda ids: {"decision": "approve"},
    ("post", "/v1/jobs"): lambda ids: {"input": "What is 1 + 1?"},
    ("get", "/v1/jobs"): None,
    ("get", "/v1/jobs/{job_id}"): None,
    ("get", "/v1/jobs/{job_id}/events"): None,
    ("post", "/v1/jobs/{job_id}/input"): lambda ids: {"reply": "yes"},
    ("post", "/v1/jobs/{job_id}/cancel"): None,
}

#: Statuses other than 200 of routes without an id, for anyone with a key.
CREATED = {("post", "/v1/jobs"): 202}


def _call(c: httpx.Client, method: str, path: str, ids: dict[str, str]) -> httpx.Response:
    url = re.sub(r"\{(\w+)\}", lambda m: ids[m.group(1)], path)
    body = BODIES[(method, path)]
    payload = body(ids) if callable(body) else None
    # Streams are only opened: the status line is what this test is about.
    with c.stream(method.upper(), url, json=payload, params={"after": "1"}) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.read()
        return response


def test_another_principal_gets_404_on_every_route(
    thread_server: Any, client: Any, make_key: Any, in_store: Any
) -> None:
    server = thread_server()
    alice = client(server.base_url, make_key("alice"))
    bob = client(server.base_url, make_key("bob"))

    waiting = alice.post("/v1/chat", json={"message": "log a1"})
    assert waiting.status_code == 202, waiting.text
    session_id = waiting.json()["session_id"]
    approval_id = waiting.json()["approvals"][0]["approval_id"]
    job = alice.post("/v1/jobs", json={"input": "log j1"})
    assert job.status_code == 202, job.text
    ids = {"session_id": session_id, "approval_id": approval_id, "job_id": job.json()["id"]}
    assert re.fullmatch(r"[0-9a-f]{32}", session_id)
    assert re.fullmatch(r"ap_[0-9a-f]{32}", approval_id)

    spec = alice.get("/openapi.json").json()
    # The server's own routes: an installed plugin's (koboi_server_register_extensions) are
    # that plugin's to test, with the same owned_session rule.
    own = {
        (method.lower(), route.path)
        for route in leaves(server.app.routes)
        if getattr(getattr(route, "endpoint", None), "__module__", "").startswith("koboi_server")
        for method in getattr(route, "methods", None) or ()
    }
    operations = [
        (method, path)
        for path, item in spec["paths"].items()
        if path.startswith("/v1")
        for method in item
        if (method, path) in own
    ]
    assert set(operations) == set(BODIES)  # every route of the server is checked below
    missing = sorted(set(operations) - set(BODIES))
    assert not missing, f"add these operations to BODIES: {missing}"

    for method, path in operations:
        response = _call(bob, method, path, ids)
        if "{" in path or (method == "post" and path.startswith("/v1/chat")):
            assert response.status_code == 404, (method, path, response.status_code)
            assert response.json()["error"]["code"] == "not_found"
            # The same answer as for an id that does not exist at all: no existence oracle.
            unknown = {
                "session_id": "0" * 32,
                "approval_id": "ap_" + "0" * 32,
                "job_id": "job_" + "0" * 32,
            }
            other = _call(bob, method, path, unknown)
            assert other.status_code == 404
            assert other.json()["error"]["code"] == "not_found"
        else:
            wanted = CREATED.get((method, path), 200)
            assert response.status_code == wanted, (method, path, response.text)

    assert {s["id"] for s in bob.get("/v1/sessions").json()["sessions"]} <= {
        j["session_id"] for j in bob.get("/v1/jobs").json()["jobs"]
    }
    assert [j["id"] for j in alice.get("/v1/jobs").json()["jobs"]] == [ids["job_id"]]
    assert session_id in [s["id"] for s in alice.get("/v1/sessions").json()["sessions"]]
    # Bob's POST decided nothing: the approval still waits for alice.
    assert alice.get(f"/v1/approvals/{approval_id}").json()["status"] == "pending"

    # Positive control: the owner gets through on the same requests.
    expected = {
        ("post", "/v1/chat"): 409,  # the session is running (it waits for the approval)
        ("post", "/v1/chat/stream"): 409,
        ("post", "/v1/approvals/{approval_id}"): 200,
        ("post", "/v1/jobs"): 202,
        ("post", "/v1/jobs/{job_id}/input"): 409,  # the job does not wait for input
    }
    for method, path in operations:
        if (method, path) == ("post", "/v1/approvals/{approval_id}"):
            continue  # decided last, below
        response = _call(alice, method, path, ids)
        assert response.status_code == expected.get((method, path), 200), (method, path)
    decided = _call(alice, "post", "/v1/approvals/{approval_id}", ids)
    assert decided.status_code == 200 and decided.json()["status"] == "approved"


def test_sessions_of_other_principals_cannot_be_continued_or_listed(
    thread_server: Any, client: Any, make_key: Any
) -> None:
    server = thread_server()
    alice = client(server.base_url, make_key("alice"))
    bob = client(server.base_url, make_key("bob"))
    first = alice.post("/v1/chat", json={"message": "What is 2 + 2?"}).json()
    assert first["status"] == "finished"
    sid = first["session_id"]
    # Alice continues her session; bob cannot, whatever he tries.
    again = alice.post("/v1/chat", json={"message": "What is 3 + 3?", "session_id": sid})
    assert again.status_code == 200 and again.json()["session_id"] == sid
    for candidate in (sid, sid[:8], sid.upper(), "last"):
        answer = bob.post("/v1/chat", json={"message": "What is 1 + 1?", "session_id": candidate})
        assert answer.status_code == 404, candidate
    # Nobody can choose the id of a new session either.
    made_up = alice.post("/v1/chat", json={"message": "hi", "session_id": "my-own-id"})
    assert made_up.status_code == 404
    assert [s["id"] for s in bob.get("/v1/sessions").json()["sessions"]] == []
    # Bob's own sessions are his alone.
    bobs = bob.post("/v1/chat", json={"message": "What is 5 + 5?"}).json()["session_id"]
    assert [s["id"] for s in bob.get("/v1/sessions").json()["sessions"]] == [bobs]
    assert {s["id"] for s in alice.get("/v1/sessions").json()["sessions"]} == {sid}
