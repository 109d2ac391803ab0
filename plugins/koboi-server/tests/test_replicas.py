"""Two replicas sharing PostgreSQL: a run on one is followed, approved and finished through the
other — events with no gap or duplicate, the approval decided once, the key revoked on both."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.postgres


def test_a_run_on_one_replica_is_approved_and_followed_on_the_other(
    write_config: Callable[..., Path],
    pg_store_url: str,
    thread_server: Any,
    client: Any,
    make_key: Any,
    revoke_key: Any,
    stream_until: Any,
    events_of: Any,
) -> None:
    base = write_config().read_text()
    config = write_config(
        base.replace('store: {url: "sqlite:///koboi.db"}', f'store: {{url: "{pg_store_url}"}}'),
        name="pg.yaml",
    )
    first, second = thread_server(config), thread_server(config)
    key = make_key("alice", config=config)
    a, b = client(first.base_url, key), client(second.base_url, key)

    seen = stream_until(
        a, "POST", "/v1/chat/stream", "pending_approval", json={"message": "log pg-1"}
    )
    pending = seen[-1].data
    sid = pending["session_id"]
    assert sid in first.state.registry.runs and sid not in second.state.registry.runs

    listed = b.get(f"/v1/sessions/{sid}/approvals").json()["approvals"]
    assert [x["approval_id"] for x in listed] == [pending["approval_id"]]
    assert (
        b.post(f"/v1/approvals/{pending['approval_id']}", json={"decision": "approve"}).json()[
            "status"
        ]
        == "approved"
    )
    again = a.post(f"/v1/approvals/{pending['approval_id']}", json={"decision": "deny"})
    assert again.status_code == 409  # decided once, whichever replica is asked

    with b.stream(
        "GET", f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": str(seen[-1].id)}
    ) as response:
        rest = events_of(response)
    ids = [e.id for e in seen] + [e.id for e in rest if e.id is not None]
    assert ids == list(range(1, ids[-1] + 1))
    assert rest[-1].event == "final" and rest[-1].data["output"] == "logged: appended pg-1"
    # Replica b does not run the session: it streams no text, the step carries it whole.
    assert not [e for e in rest if e.event == "text_delta"]
    assert any(e.event == "step" and e.data["text"] == "logged: appended pg-1" for e in rest)
    assert (config.parent / "work" / "crash_demo.log").read_text() == "pg-1\n"

    assert [s["id"] for s in b.get("/v1/sessions").json()["sessions"]] == [sid]
    revoke_key(key, config=config)
    assert a.get("/v1/sessions").status_code == 401
    assert b.get("/v1/sessions").status_code == 401
