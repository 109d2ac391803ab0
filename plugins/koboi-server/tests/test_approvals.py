"""Approvals over HTTP: a round trip on one stream, deny, single use under concurrency,
expiry, the bound decision, and an application approver that takes the HTTP route's place."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from koboi.approval import AllowAllApprover


def _log(config_dir: Path) -> str:
    path = config_dir / "work" / "crash_demo.log"
    return path.read_text() if path.exists() else ""


def test_an_approval_round_trip_over_http(
    thread_server: Any, client: Any, make_key: Any, sse: Any, config_path: Path
) -> None:
    server = thread_server()
    c = client(server.base_url, make_key())
    events: list[Any] = []
    with c.stream("POST", "/v1/chat/stream", json={"message": "log approved-1"}) as response:
        for item in sse(response):
            if isinstance(item, str):
                continue
            events.append(item)
            if item.event == "pending_approval":
                pending = item.data
                assert pending["tool"] == "append_log"
                assert pending["arguments"] == {"line": "approved-1"}
                assert pending["expires_at"] > time.time()
                assert _log(config_path.parent) == ""  # nothing ran before the decision
                listed = c.get(f"/v1/sessions/{pending['session_id']}/approvals").json()
                assert [a["status"] for a in listed["approvals"]] == ["pending"]
                decided = c.post(
                    f"/v1/approvals/{pending['approval_id']}",
                    json={"decision": "approve", "reason": "looks fine"},
                )
                assert decided.status_code == 200, decided.text
                assert decided.json()["status"] == "approved"
    names = [e.event for e in events]
    assert names[names.index("pending_approval") :] == [
        "pending_approval",
        "approval_decided",
        "tool_call",
        "tool_result",
        "step_started",
        "text_delta",
        "text_delta",
        "text_delta",
        "step",
        "final",
    ]
    decided_event = events[names.index("approval_decided")].data
    assert decided_event["approved"] is True
    assert decided_event["reason"] == "looks fine"
    assert decided_event["decided_by"].startswith("http:alice:")
    assert events[-1].data["output"] == "logged: appended approved-1"
    assert _log(config_path.parent) == "approved-1\n"
    final = c.get(f"/v1/approvals/{pending['approval_id']}").json()
    assert final["status"] == "approved"
    assert final["decided_event_id"] == events[names.index("approval_decided")].id


def test_deny_refuses_the_call_and_the_run_goes_on(
    thread_server: Any, client: Any, make_key: Any, config_path: Path
) -> None:
    server = thread_server()
    c = client(server.base_url, make_key())
    waiting = c.post("/v1/chat", json={"message": "log denied-1"}).json()
    assert waiting["status"] == "awaiting_approval"
    (approval,) = waiting["approvals"]
    answer = c.post(
        f"/v1/approvals/{approval['approval_id']}", json={"decision": "deny", "reason": "no"}
    )
    assert answer.status_code == 200 and answer.json()["status"] == "denied"
    sid = waiting["session_id"]
    with c.stream("GET", f"/v1/sessions/{sid}/events", params={"after": 0}) as response:
        body = response.read().decode()
    assert '"refused_by":"approval"' in body
    assert "event: final" in body
    assert _log(config_path.parent) == ""


def test_a_decision_counts_once_even_when_raced(
    thread_server: Any, client: Any, make_key: Any
) -> None:
    server = thread_server()
    key = make_key()
    c = client(server.base_url, key)
    waiting = c.post("/v1/chat", json={"message": "log raced"}).json()
    approval_id = waiting["approvals"][0]["approval_id"]
    statuses: list[int] = []

    def decide(choice: str) -> None:
        with httpx.Client(base_url=server.base_url, timeout=30) as own:
            answer = own.post(
                f"/v1/approvals/{approval_id}",
                json={"decision": choice},
                headers={"Authorization": f"Bearer {key}"},
            )
            statuses.append(answer.status_code)

    threads = [
        threading.Thread(target=decide, args=("approve" if i % 2 else "deny",)) for i in range(10)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(statuses) == [200] + [409] * 9
    again = c.post(f"/v1/approvals/{approval_id}", json={"decision": "approve"})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "approval_not_pending"


def test_no_decision_before_the_deadline_is_a_no(
    write_config: Callable[..., Path],
    thread_server: Any,
    client: Any,
    make_key: Any,
    events_of: Any,
) -> None:
    config = write_config(extra="", name="agent.yaml")
    config.write_text(
        config.read_text().replace("approval_timeout_seconds: 120", "approval_timeout_seconds: 1")
    )
    server = thread_server(config)
    c = client(server.base_url, make_key(config=config))
    with c.stream("POST", "/v1/chat/stream", json={"message": "log late"}) as response:
        events = events_of(response)
    pending = next(e for e in events if e.event == "pending_approval").data
    decided = next(e for e in events if e.event == "approval_decided").data
    assert decided["approved"] is False and decided["decided_by"] == "deadline"
    assert events[-1].event == "final"
    view = c.get(f"/v1/approvals/{pending['approval_id']}").json()
    assert view["status"] == "expired"
    late = c.post(f"/v1/approvals/{pending['approval_id']}", json={"decision": "approve"})
    assert late.status_code == 409 and late.json()["error"]["approval_status"] == "expired"
    assert _log(config.parent) == ""


def test_scope_always_reaches_the_run(thread_server: Any, client: Any, make_key: Any) -> None:
    server = thread_server()
    c = client(server.base_url, make_key())
    waiting = c.post("/v1/chat", json={"message": "log always-1"}).json()
    approval_id = waiting["approvals"][0]["approval_id"]
    c.post(f"/v1/approvals/{approval_id}", json={"decision": "approve", "scope": "always"})
    sid = waiting["session_id"]
    with c.stream("GET", f"/v1/sessions/{sid}/events") as response:
        body = response.read().decode()
    assert '"scope":"always"' in body
    # With koboi-governance, "always" is a trust rule: the same call does not ask again.
    again = c.post("/v1/chat", json={"message": "log always-1", "session_id": sid}).json()
    assert again["status"] == "finished", again


def test_an_always_approval_over_http_trusts_only_its_own_principal(
    thread_server: Any, client: Any, make_key: Any, config_path: Path
) -> None:
    """Trust crosses no tenant: alice's "always" is alice's trust rule (with koboi-governance),
    so bob's identical call still asks, and runs only when bob approves it."""
    server = thread_server()
    alice = client(server.base_url, make_key("alice"))
    bob = client(server.base_url, make_key("bob"))
    waiting = alice.post("/v1/chat", json={"message": "log tenant"}).json()
    assert waiting["status"] == "awaiting_approval", waiting
    decided = alice.post(
        f"/v1/approvals/{waiting['approvals'][0]['approval_id']}",
        json={"decision": "approve", "scope": "always"},
    )
    assert decided.status_code == 200, decided.text
    # Positive control: alice's identical call, in a new session of hers, does not ask.
    trusted = alice.post("/v1/chat", json={"message": "log tenant"}).json()
    assert trusted["status"] == "finished", trusted
    assert _log(config_path.parent) == "tenant\ntenant\n"

    asked = bob.post("/v1/chat", json={"message": "log tenant"})
    assert asked.status_code == 202, asked.text
    assert asked.json()["status"] == "awaiting_approval", asked.text
    assert _log(config_path.parent) == "tenant\ntenant\n"  # bob's call did not run
    # Alice cannot decide bob's approval (it is not hers to see), bob can.
    approval_id = asked.json()["approvals"][0]["approval_id"]
    assert (
        alice.post(f"/v1/approvals/{approval_id}", json={"decision": "approve"}).status_code == 404
    )
    assert bob.post(f"/v1/approvals/{approval_id}", json={"decision": "deny"}).status_code == 200
    assert _log(config_path.parent) == "tenant\ntenant\n"


def test_an_application_approver_replaces_http_approvals(
    thread_server: Any, client: Any, make_key: Any, config_path: Path
) -> None:
    server = thread_server(approver=AllowAllApprover())
    c = client(server.base_url, make_key())
    done = c.post("/v1/chat", json={"message": "log auto"}).json()
    assert done["status"] == "finished" and done["output"] == "logged: appended auto"
    listed = c.get(f"/v1/sessions/{done['session_id']}/approvals").json()["approvals"]
    assert [a["status"] for a in listed] == ["approved"]
    answer = c.post(f"/v1/approvals/{listed[0]['approval_id']}", json={"decision": "deny"})
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "approvals_not_http"
    assert _log(config_path.parent) == "auto\n"
