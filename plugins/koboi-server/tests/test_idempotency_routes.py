"""One Idempotency-Key names one request — route and body — whatever route sees it next.

Against a real server: every ordered pair of the keyed POST routes (chat, chat/stream,
jobs, approval decisions, job cancels), one after the other and racing, plus keys of
jobs stored before the cross-route record existed (or whose record expired). Each
case has its positive control: the same key on the same route with the same body is
replayed.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow  # real servers

ROUTES = ("chat", "chat/stream", "jobs", "approval", "cancel")
CHATS = ("chat", "chat/stream")


def _keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


@dataclass
class Target:
    """What one keyed request acts on, and how to tell whether it acted."""

    route: str
    path: str
    body: dict[str, Any] | None
    approval_id: str | None = None
    job_id: str | None = None


@dataclass
class Bench:
    """A server, alice's client, and helpers to make things for keyed requests to act on."""

    c: httpx.Client
    base_url: str
    key: str
    made: list[str] = field(default_factory=list)

    def pending_approval(self) -> str:
        answer = self.c.post("/v1/chat", json={"message": f"log ap-{len(self.made)}"})
        assert answer.status_code == 202, answer.text
        assert answer.json()["status"] == "awaiting_approval", answer.text
        approval_id = str(answer.json()["approvals"][0]["approval_id"])
        self.made.append(approval_id)
        return approval_id

    def queued_job(self) -> str:
        job = self.c.post("/v1/jobs", json={"input": "log target"})
        assert job.status_code == 202, job.text
        return str(job.json()["id"])

    def target(self, route: str, n: int) -> Target:
        if route == "chat":
            return Target(route, "/v1/chat", {"message": f"{n} * 7"})
        if route == "chat/stream":
            return Target(route, "/v1/chat/stream", {"message": f"{n} * 11"})
        if route == "jobs":
            return Target(route, "/v1/jobs", {"input": f"log job-{n}"})
        if route == "approval":
            approval_id = self.pending_approval()
            path = f"/v1/approvals/{approval_id}"
            return Target(route, path, {"decision": "approve"}, approval_id=approval_id)
        job_id = self.queued_job()
        return Target(route, f"/v1/jobs/{job_id}/cancel", None, job_id=job_id)

    def post(self, target: Target, key: str, client: httpx.Client | None = None) -> httpx.Response:
        c = client or self.c
        if target.route == "chat/stream":
            # The whole stream (to its final event): the request is then done.
            with c.stream("POST", target.path, json=target.body, headers=_keyed(key)) as r:
                r.read()
                return r
        return c.post(target.path, json=target.body, headers=_keyed(key))

    def jobs(self) -> list[dict[str, Any]]:
        return list(self.c.get("/v1/jobs", params={"limit": 500}).json()["jobs"])

    def sessions(self) -> int:
        return len(self.c.get("/v1/sessions", params={"limit": 500}).json()["sessions"])

    def effects(self, target: Target) -> Any:
        """A snapshot that changes when ``target``'s request acts."""
        if target.route in CHATS:
            return self.sessions()
        if target.route == "jobs":
            return sorted(j["id"] for j in self.jobs())
        if target.route == "approval":
            return self.c.get(f"/v1/approvals/{target.approval_id}").json()["status"]
        return self.c.get(f"/v1/jobs/{target.job_id}").json()["status"]


def _identity(route: str, answer: dict[str, Any]) -> Any:
    """What a replay must give back: the same run, the same job, the same stored answer."""
    if route == "chat":
        return answer["session_id"], answer["last_event_id"]
    if route == "jobs":
        return answer["id"]
    return answer  # a decision or a cancel: the stored response itself


def _ok(response: httpx.Response) -> bool:
    return response.status_code in (200, 202)


def _refused_as_reused(response: httpx.Response) -> bool:
    return (
        response.status_code == 422 and response.json()["error"]["code"] == "idempotency_key_reused"
    )


@pytest.fixture
def bench(
    write_config: Callable[..., Path], thread_server: Any, client: Any, make_key: Any
) -> Bench:
    config = write_config()  # act mode: append_log asks for approval; calculator does not
    # Jobs stay queued (nothing runs them), so they can be cancelled and counted.
    server = thread_server(config, settings={"run_jobs": False})
    key = make_key(config=config)
    return Bench(client(server.base_url, key), server.base_url, key)


@pytest.mark.parametrize(("first", "second"), list(itertools.permutations(ROUTES, 2)))
def test_a_key_used_on_one_route_is_refused_on_every_other(
    bench: Bench, first: str, second: str
) -> None:
    key = f"k-{first}-{second}"
    used = bench.target(first, 1)
    answer = bench.post(used, key)
    assert _ok(answer) and "idempotent-replayed" not in answer.headers, answer.text

    other = bench.target(second, 2)
    before = bench.effects(other)
    reused = bench.post(other, key)
    assert _refused_as_reused(reused), (reused.status_code, reused.text)
    assert bench.effects(other) == before  # the refused request did nothing

    # Positive control: the same request again (same route, same body) is replayed.
    again = bench.post(used, key)
    assert again.status_code == answer.status_code, again.text
    assert again.headers["idempotent-replayed"] == "true"
    if first != "chat/stream":
        assert _identity(first, again.json()) == _identity(first, answer.json())


def _race(bench: Bench, targets: list[Target], key: str) -> list[httpx.Response]:
    """Send each target's request with ``key`` at once (one thread and connection each)."""
    answers: list[httpx.Response | None] = [None] * len(targets)
    barrier = threading.Barrier(len(targets))

    def send(i: int) -> None:
        headers = {"Authorization": f"Bearer {bench.key}"}
        with httpx.Client(base_url=bench.base_url, headers=headers, timeout=30) as c:
            c.get("/healthz")  # connected before the barrier: the requests leave together
            barrier.wait(10)
            answers[i] = bench.post(targets[i], key, c)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(targets))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    got = [a for a in answers if a is not None]
    assert len(got) == len(targets)
    return got


@pytest.mark.parametrize(("one", "two"), list(itertools.combinations(ROUTES, 2)))
def test_two_routes_racing_with_one_key_have_exactly_one_winner(
    bench: Bench, one: str, two: str
) -> None:
    for round_ in range(3):
        key = f"race-{one}-{two}-{round_}"
        targets = [bench.target(one, 10 + round_), bench.target(two, 20 + round_)]
        before = [bench.effects(t) for t in targets]
        sessions = bench.sessions()
        got = _race(bench, targets, key)
        winners = [i for i, a in enumerate(got) if _ok(a)]
        assert len(winners) == 1, [(a.status_code, a.text) for a in got]
        loser = got[1 - winners[0]]
        assert loser.status_code in (409, 422), loser.text
        assert loser.json()["error"]["code"] in (
            "idempotency_key_reused",
            "idempotency_key_in_progress",
        )
        # The loser acted on nothing; the winner's request is replayed (positive control).
        lost, won = targets[1 - winners[0]], targets[winners[0]]
        if lost.route not in CHATS:
            assert bench.effects(lost) == before[1 - winners[0]], lost
        # One session more if a chat won, none otherwise: the losing chat started nothing.
        assert bench.sessions() == sessions + (won.route in CHATS)
        deadline = time.monotonic() + 20
        while True:
            again = bench.post(won, key)
            if again.status_code != 409:  # a chat still finishing its run: wait for it
                break
            assert time.monotonic() < deadline, again.text
            time.sleep(0.1)
        assert _ok(again) and again.headers["idempotent-replayed"] == "true", again.text
        refused = bench.post(lost, key)
        assert _refused_as_reused(refused), refused.text


def test_a_job_key_stored_without_its_cross_route_record_still_owns_the_key(
    write_config: Callable[..., Path],
    thread_server: Any,
    client: Any,
    make_key: Any,
    in_store: Any,
) -> None:
    """Jobs submitted before the cross-route record existed (an upgrade), or whose record
    has expired: their retries replay, and the other routes refuse their keys."""
    from koboi_server.jobs import submit_job
    from koboi_server.jobs_api import request_hash
    from koboi_server.models import JobCreate

    config = write_config()
    # A short retention: the records of keys expire, the jobs (and their keys) stay.
    server = thread_server(
        config, settings={"run_jobs": False, "idempotency_retention_seconds": 1.0}
    )
    c = client(server.base_url, make_key(config=config))  # principal alice
    body = {"input": "log old"}

    async def old_job(store: Any) -> str:
        job, created = await submit_job(
            store,
            owner="alice",
            input="log old",
            idempotency_key="old-key",
            request_hash=request_hash(JobCreate(**body)),
        )
        assert created
        return job.id

    old_id = in_store(old_job, config)
    fresh = c.post("/v1/jobs", json={"input": "log fresh"}, headers=_keyed("fresh-key"))
    assert fresh.status_code == 202
    time.sleep(1.5)  # the fresh job's record has expired

    bench = Bench(c, server.base_url, "")
    approval = bench.target("approval", 0)
    cancel = bench.target("cancel", 0)
    for key, job_id, job_body in (
        ("old-key", old_id, body),
        ("fresh-key", fresh.json()["id"], {"input": "log fresh"}),
    ):
        # Positive control: the job's own retry is replayed (an old key stays valid).
        again = c.post("/v1/jobs", json=job_body, headers=_keyed(key))
        assert again.status_code == 202 and again.headers["idempotent-replayed"] == "true"
        assert again.json()["id"] == job_id
        # Another body on the job route, and every other route, are refused.
        other = c.post("/v1/jobs", json={"input": "log else"}, headers=_keyed(key))
        assert _refused_as_reused(other), other.text
        for target in (
            bench.target("chat", 3),
            bench.target("chat/stream", 3),
            approval,
            cancel,
        ):
            before = bench.effects(target)
            refused = bench.post(target, key)
            assert _refused_as_reused(refused), (target.route, refused.text)
            assert bench.effects(target) == before
