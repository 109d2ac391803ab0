"""Jobs over HTTP against a real server: lifecycle, Idempotency-Key, cancel, approvals,
ownership, a SIGKILL mid-job, and a signed job.finished webhook."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from koboi_server.webhooks import WebhookVerificationError, generate_secret, verify

#: No approvals; the session lease is short so a restarted server takes a job over fast.
JOBS = """
    agent: {name: served, mode: yolo, lease_seconds: 2}
    llm:
      provider: scripted
      rules:
        - match: 'log (?P<line>[\\w-]+)'
          tool: append_log
          arguments: {line: "{line}"}
          reply: "logged: {result}"
      fallback: "Nothing to log."
    tools: {builtin: [append_log]}
    sandbox: {backend: passthrough, workdir: work}
    store: {url: "sqlite:///koboi.db"}
"""

FAST_JOBS = {"job_lease_seconds": 1.0, "job_poll_seconds": 0.1}


def _wait_for(c: httpx.Client, job_id: str, *statuses: str, seconds: float = 20) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        job = c.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in statuses:
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.05)


def _log(config: Path) -> list[str]:
    path = config.parent / "work" / "crash_demo.log"
    return path.read_text().splitlines() if path.exists() else []


def test_a_job_runs_and_its_events_resume_after_a_cursor(
    write_config: Any, thread_server: Any, client: Any, make_key: Any, events_of: Any
) -> None:
    config = write_config(JOBS)
    server = thread_server(config, settings=FAST_JOBS)
    c = client(server.base_url, make_key(config=config))

    made = c.post("/v1/jobs", json={"input": "log job-1", "metadata": {"ticket": 7}})
    assert made.status_code == 202, made.text
    job = made.json()
    assert made.headers["location"] == f"/v1/jobs/{job['id']}"
    assert "idempotent-replayed" not in made.headers
    assert job["status"] in ("queued", "running") and job["metadata"] == {"ticket": 7}

    done = _wait_for(c, job["id"], "completed", "failed", "cancelled")
    assert done["status"] == "completed", done
    assert done["result"]["outcome"] == "completed"
    assert done["result"]["output"].startswith("logged: ")
    assert _log(config) == ["job-1"]
    listed = c.get("/v1/jobs", params={"status": "completed"}).json()["jobs"]
    assert [j["id"] for j in listed] == [job["id"]]
    assert c.get("/v1/jobs", params={"status": "queued"}).json() == {"jobs": []}
    assert c.get("/v1/jobs", params={"status": "nope"}).status_code == 422

    with c.stream("GET", f"/v1/jobs/{job['id']}/events") as response:
        assert response.status_code == 200
        every = events_of(response)
    assert every[-1].event == "final"
    ids = [e.id for e in every if e.id is not None]
    assert ids == sorted(ids) and len(ids) >= 3
    cursor = ids[1]
    with c.stream(
        "GET", f"/v1/jobs/{job['id']}/events", headers={"Last-Event-ID": str(cursor)}
    ) as response:
        rest = events_of(response)
    assert [e.id for e in rest if e.id is not None] == [i for i in ids if i > cursor]

    # Bad bodies are refused with the envelope; nothing was queued by them.
    for body in ({}, {"input": ""}, {"input": "x", "extra": 1}, {"input": "   "}):
        refused = c.post("/v1/jobs", json=body)
        assert refused.status_code == 422, body
        assert refused.json()["error"]["code"] in ("invalid_request",)
    assert len(c.get("/v1/jobs").json()["jobs"]) == 1


def test_following_a_queued_job_waits_for_its_run_instead_of_ending_idle(
    write_config: Any, thread_server: Any, client: Any, make_key: Any, events_of: Any
) -> None:
    """Found by the console's browser test on a loaded machine: the job page opened its
    stream before any runner had taken the job, the session had no event, nothing ran
    here, and the stream ended at once with ``idle``; the page never saw the run."""
    import threading

    config = write_config(JOBS)
    key = make_key(config=config)
    # This server only queues and streams; the job waits until a runner appears.
    front = thread_server(config, settings={**FAST_JOBS, "run_jobs": False})
    c = client(front.base_url, key)
    # Control: a job that will never run (cancelled while queued) ends its stream at once.
    gone = c.post("/v1/jobs", json={"input": "log never"}).json()
    c.post(f"/v1/jobs/{gone['id']}/cancel")
    with c.stream("GET", f"/v1/jobs/{gone['id']}/events") as r:
        assert [e.event for e in events_of(r)] == ["idle"]

    job = c.post("/v1/jobs", json={"input": "log followed"}).json()
    seen: list[Any] = []

    def follow() -> None:
        with client(front.base_url, key).stream("GET", f"/v1/jobs/{job['id']}/events") as r:
            assert r.status_code == 200
            seen.extend(events_of(r))

    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()
    watcher.join(1.5)
    assert watcher.is_alive(), f"the stream ended while the job was queued: {seen}"

    thread_server(config, settings=FAST_JOBS)  # a runner, on the same store
    watcher.join(30)
    assert not watcher.is_alive(), "the stream did not end after the job's run"
    names = [e.event for e in seen]
    assert "idle" not in names and names[-1] == "final", names
    assert "tool_result" in names and _log(config) == ["followed"]


def test_idempotency_key_replays_refuses_another_body_and_races_to_one_job(
    write_config: Any, thread_server: Any, client: Any, make_key: Any
) -> None:
    config = write_config(JOBS)
    # Nothing runs here: the test is about what is queued.
    server = thread_server(config, settings={**FAST_JOBS, "run_jobs": False})
    alice_key = make_key(config=config)
    c = client(server.base_url, alice_key)
    bob = client(server.base_url, make_key("bob", config=config))

    first = c.post("/v1/jobs", json={"input": "log a"}, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 202 and "idempotent-replayed" not in first.headers
    again = c.post("/v1/jobs", json={"input": "log a"}, headers={"Idempotency-Key": "k-1"})
    assert again.status_code == 202 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["location"] == first.headers["location"]
    other = c.post("/v1/jobs", json={"input": "log b"}, headers={"Idempotency-Key": "k-1"})
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    # Keys are the principal's: bob's k-1 is another job.
    bobs = bob.post("/v1/jobs", json={"input": "log a"}, headers={"Idempotency-Key": "k-1"})
    assert bobs.status_code == 202 and "idempotent-replayed" not in bobs.headers
    assert bobs.json()["id"] != first.json()["id"]
    # Without a key, the same body is a new job (positive control of the replay).
    plain = c.post("/v1/jobs", json={"input": "log a"})
    assert plain.status_code == 202 and plain.json()["id"] != first.json()["id"]
    too_long = c.post("/v1/jobs", json={"input": "a"}, headers={"Idempotency-Key": "k" * 256})
    assert too_long.status_code == 422

    # 50 concurrent requests with one new key: one job, 49 replays of it.
    async def race() -> list[httpx.Response]:
        headers = {"Authorization": f"Bearer {alice_key}", "Idempotency-Key": "race"}
        answers: list[httpx.Response] = []
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(
            base_url=server.base_url, headers=headers, timeout=30, limits=limits
        ) as ac:

            async def one() -> None:
                answers.append(await ac.post("/v1/jobs", json={"input": "log race"}))

            async with anyio.create_task_group() as tg:
                for _ in range(50):
                    tg.start_soon(one)
        return answers

    answers = anyio.run(race)
    assert [a.status_code for a in answers] == [202] * 50, [a.text for a in answers][:3]
    assert len({a.json()["id"] for a in answers}) == 1
    assert sum("idempotent-replayed" not in a.headers for a in answers) == 1
    inputs = [j["id"] for j in c.get("/v1/jobs", params={"limit": 500}).json()["jobs"]]
    assert inputs.count(answers[0].json()["id"]) == 1 and len(inputs) == 3


def test_admission_limits_answer_429_but_never_to_a_retry_of_a_queued_job(
    write_config: Any, thread_server: Any, client: Any, make_key: Any
) -> None:
    config = write_config(JOBS)
    limits = {"run_jobs": False, "max_queued_jobs": 2, "max_jobs_per_principal": 2}
    server = thread_server(config, settings={**FAST_JOBS, **limits})
    c = client(server.base_url, make_key(config=config))
    for key in ("k-a", "k-b"):
        made = c.post("/v1/jobs", json={"input": f"log {key}"}, headers={"Idempotency-Key": key})
        assert made.status_code == 202, made.text
    full = c.post("/v1/jobs", json={"input": "log k-c"}, headers={"Idempotency-Key": "k-c"})
    assert full.status_code == 429 and full.json()["error"]["code"] == "too_many_jobs"
    assert int(full.headers["retry-after"]) > 0
    # The retry of a job already queued gets its answer back, full queue or not...
    retry = c.post("/v1/jobs", json={"input": "log k-a"}, headers={"Idempotency-Key": "k-a"})
    assert retry.status_code == 202 and retry.headers["idempotent-replayed"] == "true"
    # ... and a reused key with another body is still told so, not 429.
    reused = c.post("/v1/jobs", json={"input": "log other"}, headers={"Idempotency-Key": "k-a"})
    assert reused.status_code == 422
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    assert len(c.get("/v1/jobs").json()["jobs"]) == 2

    # The per-principal limit counts unfinished jobs only.
    per_principal = {"run_jobs": False, "max_queued_jobs": 100, "max_jobs_per_principal": 1}
    second = thread_server(config, settings={**FAST_JOBS, **per_principal})
    bob = client(second.base_url, make_key("bob", config=config))
    first = bob.post("/v1/jobs", json={"input": "log bob-1"})
    assert first.status_code == 202
    refused = bob.post("/v1/jobs", json={"input": "log bob-2"})
    assert refused.status_code == 429 and "unfinished" in refused.json()["error"]["message"]
    assert bob.post(f"/v1/jobs/{first.json()['id']}/cancel").json()["status"] == "cancelled"
    assert bob.post("/v1/jobs", json={"input": "log bob-2"}).status_code == 202


def test_cancel_a_queued_and_a_running_job(
    write_config: Any,
    thread_server: Any,
    client: Any,
    make_key: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = write_config(JOBS)
    key = make_key(config=config)
    queued_only = thread_server(config, settings={**FAST_JOBS, "run_jobs": False})
    c = client(queued_only.base_url, key)
    job = c.post("/v1/jobs", json={"input": "log never"}).json()
    cancelled = c.post(f"/v1/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"

    # A running job: its tool takes 1.5 s; the cancel lands while it runs.
    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "1.5")
    runner = thread_server(config, settings={**FAST_JOBS, "job_lease_seconds": 0.6})
    r = client(runner.base_url, key)
    going = r.post("/v1/jobs", json={"input": "log slow"}).json()
    _wait_for(r, going["id"], "running")
    asked = r.post(f"/v1/jobs/{going['id']}/cancel")
    assert asked.status_code == 200 and asked.json()["cancel_requested"] is True
    done = _wait_for(r, going["id"], "cancelled", "completed", "failed")
    assert done["status"] == "cancelled" and done["result"]["outcome"] == "cancelled"
    # Cancelling a finished job changes nothing; the earlier cancelled job stayed so.
    assert r.post(f"/v1/jobs/{going['id']}/cancel").json()["status"] == "cancelled"
    assert r.get(f"/v1/jobs/{job['id']}").json()["status"] == "cancelled"
    assert "never" not in _log(config)


def test_a_job_waits_in_awaiting_approval_until_it_is_approved(
    config_path: Path, thread_server: Any, client: Any, make_key: Any
) -> None:
    server = thread_server(config_path, settings=FAST_JOBS)
    c = client(server.base_url, make_key())
    job = c.post("/v1/jobs", json={"input": "log needs-ok"}).json()
    waiting = _wait_for(c, job["id"], "awaiting_approval")
    pending = c.get(f"/v1/sessions/{waiting['session_id']}/approvals").json()["approvals"]
    assert [a["status"] for a in pending] == ["pending"]
    decided = c.post(f"/v1/approvals/{pending[0]['approval_id']}", json={"decision": "approve"})
    assert decided.status_code == 200
    done = _wait_for(c, job["id"], "completed", "failed", "cancelled")
    assert done["status"] == "completed" and done["result"]["output"].startswith("logged: ")


def test_a_job_session_is_running_here_only_where_its_job_runs_and_refuses_chat(
    config_path: Path, thread_server: Any, client: Any, make_key: Any
) -> None:
    """``running_here`` is true on the replica whose job runner runs the session (false on
    another sharing the store), and chat cannot continue a job's session: 409 naming the
    job's routes, whatever the job's status, with or without an Idempotency-Key."""
    server = thread_server(config_path, settings=FAST_JOBS)
    other = thread_server(config_path, settings={**FAST_JOBS, "run_jobs": False})
    key = make_key()
    c, elsewhere = client(server.base_url, key), client(other.base_url, key)
    job = c.post("/v1/jobs", json={"input": "log job-session"}).json()
    waiting = _wait_for(c, job["id"], "awaiting_approval")
    sid = waiting["session_id"]
    assert c.get(f"/v1/sessions/{sid}").json()["running_here"] is True
    assert elsewhere.get(f"/v1/sessions/{sid}").json()["running_here"] is False

    def refused_chats() -> None:
        for route in ("/v1/chat", "/v1/chat/stream"):
            for headers in ({}, {"Idempotency-Key": f"into-the-job{route}"}):
                answer = c.post(route, json={"message": "hi", "session_id": sid}, headers=headers)
                assert answer.status_code == 409, (route, headers, answer.text)
                error = answer.json()["error"]
                assert (error["code"], error["job_id"]) == ("job_session", job["id"])
                assert f"POST /v1/jobs/{job['id']}/input" in error["message"]

    refused_chats()
    pending = c.get(f"/v1/sessions/{sid}/approvals").json()["approvals"]
    decided = c.post(f"/v1/approvals/{pending[0]['approval_id']}", json={"decision": "approve"})
    assert decided.status_code == 200
    done = _wait_for(c, job["id"], "completed", "failed", "cancelled")
    assert done["status"] == "completed"
    finished = c.get(f"/v1/sessions/{sid}").json()
    assert finished["running_here"] is False
    refused_chats()  # a finished job's session is still the job's
    # Nothing ran under the refused chats, and their keys were not kept.
    assert c.get(f"/v1/sessions/{sid}").json()["last_event_id"] == finished["last_event_id"]
    fresh = c.post(
        "/v1/chat",
        json={"message": "log a-chat"},
        headers={"Idempotency-Key": "into-the-job/v1/chat"},
    )
    assert fresh.status_code == 202 and fresh.json()["session_id"] != sid


def test_another_principal_gets_404_on_every_job_route(
    write_config: Any, thread_server: Any, client: Any, make_key: Any
) -> None:
    config = write_config(JOBS)
    server = thread_server(config, settings={**FAST_JOBS, "run_jobs": False})
    alice = client(server.base_url, make_key("alice", config=config))
    bob = client(server.base_url, make_key("bob", config=config))
    job_id = alice.post("/v1/jobs", json={"input": "log mine"}).json()["id"]
    for ident in (job_id, "job_" + "0" * 32):
        for method, path in (
            ("GET", f"/v1/jobs/{ident}"),
            ("GET", f"/v1/jobs/{ident}/events"),
            ("POST", f"/v1/jobs/{ident}/cancel"),
        ):
            answer = bob.request(method, path)
            assert answer.status_code == 404, (method, path)
            assert answer.json()["error"]["code"] == "not_found"
    assert bob.get("/v1/jobs").json() == {"jobs": []}
    # Positive control: alice reads it, and bob's cancel left it queued.
    assert alice.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"
    assert [j["id"] for j in alice.get("/v1/jobs").json()["jobs"]] == [job_id]


# -- SIGKILL mid-job --------------------------------------------------------------------------


def _spawn_serve(config: Path, port: int, env: dict[str, str]) -> subprocess.Popen[str]:
    log = (config.parent / f"serve-{time.monotonic_ns()}.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "koboi_cli", "serve", str(config), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=config.parent,
    )
    log.close()
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, "koboi serve exited at start"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "koboi serve did not start"
        time.sleep(0.05)


def _paused_after_effect(
    config: Path, key: str, line: str
) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """A ``koboi serve`` that runs the job ``log <line>`` and stops right after the tool's
    effect, before the journal records that the call finished; and that job."""
    marker = config.parent / f"paused-{line}"
    env = {**os.environ, "KOBOI_DEMO_PAUSE_AFTER_EFFECT": line}
    env["KOBOI_DEMO_PAUSE_MARKER"] = str(marker)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = _spawn_serve(config, port, env)
    try:
        job = httpx.post(
            f"http://127.0.0.1:{port}/v1/jobs",
            json={"input": f"log {line}"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        ).json()
        deadline = time.monotonic() + 20
        while not marker.exists():
            assert time.monotonic() < deadline, "the job's tool never ran"
            time.sleep(0.05)
    except BaseException:
        proc.kill()
        proc.wait(10)
        raise
    return proc, job


SERVER = """
    server:
      poll_seconds: 0.1
      access_log: false
      job_lease_seconds: 1
      job_poll_seconds: 0.1
"""


@pytest.mark.e2e
def test_a_job_of_a_killed_server_completes_after_a_restart_without_repeating_its_effect(
    write_config: Any, serve_process: Any, client: Any, make_key: Any, in_store: Any
) -> None:
    config = write_config(JOBS, extra=SERVER)
    key = make_key(config=config)
    first, job = _paused_after_effect(config, key, "kill-1")
    try:
        # The line is written; the journal does not know the call finished.
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(10)
    assert _log(config) == ["kill-1"]

    restarted = serve_process(config)
    c2 = client(restarted.base_url, key)
    done = _wait_for(c2, job["id"], "completed", "failed", "cancelled", seconds=30)
    assert done["status"] == "completed" and done["attempts"] == 2, done
    assert _log(config) == ["kill-1"]  # the non-idempotent call was not run again

    async def read(store: Any) -> list[Any]:
        return list(await store.read(done["session_id"]))

    events = in_store(read, config)
    assert [e.type for e in events].count("tool_call_interrupted") == 1


@pytest.mark.e2e
@pytest.mark.postgres
def test_two_replicas_on_postgresql_the_survivor_finishes_the_killed_ones_job(
    write_config: Any,
    serve_process: Any,
    client: Any,
    make_key: Any,
    in_store: Any,
    pg_store_url: str,
) -> None:
    jobs_on_pg = JOBS.replace(
        'store: {url: "sqlite:///koboi.db"}', f'store: {{url: "{pg_store_url}"}}'
    )
    config = write_config(jobs_on_pg, extra=SERVER, name="pg.yaml")
    key = make_key(config=config)
    # Replica A takes the job (it is alone when the job is queued) and stops right after
    # the tool's effect, before the journal records that the call finished.
    replica_a, job = _paused_after_effect(config, key, "replica-1")
    try:
        replica_b = serve_process(config)  # the second replica, on the same database
        b = client(replica_b.base_url, key)
        assert b.get(f"/v1/jobs/{job['id']}").json()["status"] == "running"

        async def holder(store: Any) -> str:
            return str((await store.get_job(job["id"])).holder)

        assert f":{replica_a.pid}:" in in_store(holder, config)
        replica_a.send_signal(signal.SIGKILL)
        replica_a.wait(10)
        killed_at = time.monotonic()
    finally:
        if replica_a.poll() is None:
            replica_a.kill()
            replica_a.wait(10)
    done = _wait_for(b, job["id"], "completed", "failed", "cancelled", seconds=30)
    takeover = time.monotonic() - killed_at
    assert done["status"] == "completed" and done["attempts"] == 2, done
    assert _log(config) == ["replica-1"]  # the non-idempotent call was not run again
    # Within the job lease (1 s) and the session lease (2 s), plus polling: not a wait
    # on anything else.
    assert takeover < 15, takeover

    async def read(store: Any) -> list[Any]:
        return list(await store.read(done["session_id"]))

    events = in_store(read, config)
    assert [e.type for e in events].count("tool_call_interrupted") == 1
    assert [e.type for e in events].count("run_finished") == 1


# -- webhooks --------------------------------------------------------------------------------


def _wait_received(r: Any, count: int) -> None:
    deadline = time.monotonic() + 15
    while len(r.received) < count:
        assert time.monotonic() < deadline, r.received
        time.sleep(0.05)


def test_job_finished_webhooks_are_signed_and_verify(
    write_config: Any,
    thread_server: Any,
    client: Any,
    make_key: Any,
    receiver: Any,
) -> None:
    configured_secret, job_secret = generate_secret(), generate_secret()
    webhooks = f"""
    server:
      webhooks:
        allow: ["127.0.0.1"]
        poll_interval: 0.1
        endpoints:
          - url: "{receiver.url}/all"
            secrets: ["{configured_secret}"]
            events: ["job.*"]
    """
    config = write_config(JOBS, extra=webhooks)
    server = thread_server(config, settings=FAST_JOBS)
    c = client(server.base_url, make_key(config=config))

    def hook(url: str) -> dict[str, Any]:
        return {"url": url, "secret": job_secret}

    # Refused at registration: a loopback URL that is not on the allow-list, a bad secret.
    refused = c.post("/v1/jobs", json={"input": "log w", "webhook": hook("http://127.0.0.2:9/x")})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "webhook_refused"
    bad_secret = c.post(
        "/v1/jobs",
        json={"input": "log w", "webhook": {"url": receiver.url + "/job", "secret": "nope"}},
    )
    assert bad_secret.status_code == 422
    assert c.get("/v1/jobs").json() == {"jobs": []}

    made = c.post("/v1/jobs", json={"input": "log hooked", "webhook": hook(receiver.url + "/job")})
    assert made.status_code == 202, made.text
    job = made.json()
    assert job["webhook_url"] == receiver.url + "/job" and "secret" not in made.text
    _wait_for(c, job["id"], "completed")
    _wait_received(receiver, 2)
    time.sleep(0.3)
    assert len(receiver.received) == 2  # one delivery per receiver, no more
    by_secret = {}
    for headers, body in receiver.received:
        for secret in (configured_secret, job_secret):
            try:
                by_secret[secret] = verify(secret, headers, body)
            except WebhookVerificationError:
                continue
    assert set(by_secret) == {configured_secret, job_secret}
    for event in by_secret.values():
        assert event["type"] == "job.finished"
        assert event["data"]["job_id"] == job["id"]
        assert event["data"]["status"] == "completed"
    # Tampered: the body changed after signing does not verify.
    headers, body = receiver.received[0]
    with pytest.raises(WebhookVerificationError):
        verify([configured_secret, job_secret], headers, body.replace(b"completed", b"failed__"))
    assert json.loads(body)["data"]["session_id"] == job["session_id"]


@pytest.mark.e2e
def test_sigterm_suspends_a_running_job_and_the_restarted_server_finishes_it(
    write_config: Any,
    serve_process: Any,
    client: Any,
    make_key: Any,
    in_store: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A job lease far longer than the test may take: the restarted server can only
    # resume the job in time because the stopping one gave its lease up.
    long_lease = SERVER.replace("job_lease_seconds: 1", "job_lease_seconds: 60")
    config = write_config(JOBS, extra=long_lease + "      drain_seconds: 0.5\n")
    key = make_key(config=config)
    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "1.5")  # the tool is mid-call at SIGTERM
    server = serve_process(config)
    c = client(server.base_url, key)
    job = c.post("/v1/jobs", json={"input": "log term-1"}).json()
    _wait_for(c, job["id"], "running")
    time.sleep(0.3)
    assert server.stop(signal.SIGTERM) == 0, server.log()

    async def read_job(store: Any) -> Any:
        return await store.get_job(job["id"])

    async def read_events(store: Any) -> list[Any]:
        return list(await store.read(job["session_id"]))

    left = in_store(read_job, config)
    # Suspended, not cancelled: still running (its lease runs out), its journal resumable.
    assert (left.status, left.cancel_requested) == ("running", False)
    assert not any(e.type == "run_finished" for e in in_store(read_events, config))
    # ... and its lease given up, rather than left to run out in a minute.
    assert left.lease_expires_at is not None and left.lease_expires_at <= time.time()

    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "0")
    restarted = serve_process(config)
    done = _wait_for(client(restarted.base_url, key), job["id"], "completed", "failed", seconds=20)
    assert done["status"] == "completed" and done["attempts"] == 2, done
    assert _log(config) == ["term-1"]  # the call in flight ran once, and not again
    finished = [e for e in in_store(read_events, config) if e.type == "run_finished"]
    assert [e.data["outcome"] for e in finished] == ["completed"]


SHELL = """
    agent: {{name: served, mode: yolo, lease_seconds: 2}}
    llm:
      provider: scripted
      rules:
        - match: 'run (?P<cmd>.+)'
          tool: run_shell
          arguments: {{command: "{{cmd}}"}}
          reply: "ran: {{result}}"
      fallback: "Nothing to run."
    tools: {{builtin: [run_shell]}}
    sandbox: {{backend: {backend}, workdir: work}}
    store: {{url: "sqlite:///koboi.db"}}
"""


def test_jobs_follow_the_unattended_destruction_rule_and_cancel_kills_the_running_process(
    write_config: Any, thread_server: Any, client: Any, make_key: Any, tmp_path: Path
) -> None:
    # A destructive tool without an isolating sandbox: no jobs (chat is not affected).
    open_config = write_config(SHELL.format(backend="passthrough"), name="open.yaml")
    key = make_key(config=open_config)
    unsafe = thread_server(open_config, settings=FAST_JOBS)
    c = client(unsafe.base_url, key)
    refused = c.post("/v1/jobs", json={"input": "run true"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "jobs_refused"
    assert "destructive" in refused.json()["error"]["message"]
    assert c.get("/healthz").status_code == 200
    assert c.get("/v1/jobs").json() == {"jobs": []}

    # Positive control: the same tool in an isolating sandbox runs as a job; cancelling
    # it kills the process it started.
    config = write_config(SHELL.format(backend="restricted"), name="isolated.yaml")
    server = thread_server(config, settings={**FAST_JOBS, "job_lease_seconds": 0.6})
    c = client(server.base_url, make_key(config=config))
    # A sleep no other process runs: found by its command line.
    seconds = f"{29 + os.getpid() % 1000 / 1000:.3f}"
    job = c.post("/v1/jobs", json={"input": f"run exec sleep {seconds}"})
    assert job.status_code == 202, job.text
    job_id = job.json()["id"]
    deadline = time.monotonic() + 20
    while not (pids := _sleepers(seconds)):
        assert time.monotonic() < deadline, c.get(f"/v1/jobs/{job_id}").json()
        time.sleep(0.05)
    (pid,) = pids
    os.kill(pid, 0)  # the sleeper runs
    assert c.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    done = _wait_for(c, job_id, "cancelled", "completed", "failed")
    assert done["status"] == "cancelled", done
    deadline = time.monotonic() + 5
    while _alive(pid):
        assert time.monotonic() < deadline, f"process {pid} still runs after the cancel"
        time.sleep(0.05)


def _sleepers(seconds: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[:2] == [b"sleep", seconds.encode()]:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    # A zombie has exited: only its exit status is left to collect.
    return not (status.exists() and status.read_text().split(") ", 1)[-1].startswith("Z"))


def test_the_server_purges_expired_store_rows(
    write_config: Any, thread_server: Any, in_store: Any
) -> None:
    config = write_config(JOBS)

    async def seed(store: Any) -> None:
        now = time.time()
        await store.counter_add("webhook-claim:msg_old:0", 1, expires_at=now - 1)
        await store.counter_add("webhook-claim:msg_live:0", 1, expires_at=now + 600)
        await store.record_put("webhook", "msg_old", {"status": "delivered"}, expires_at=now - 1)

    in_store(seed, config)
    database = config.parent / "koboi.db"

    def rows() -> tuple[list[str], int]:
        import sqlite3
        from contextlib import closing

        with closing(sqlite3.connect(database)) as db, db:
            counters = [row[0] for row in db.execute("SELECT key FROM counters ORDER BY key")]
            (records,) = db.execute("SELECT count(*) FROM records WHERE key = 'msg_old'").fetchone()
        return counters, records

    # Expired rows are ignored but still stored until a purge.
    assert rows() == (["webhook-claim:msg_live:0", "webhook-claim:msg_old:0"], 1)
    thread_server(config, settings={"purge_interval_seconds": 0.2, "run_jobs": False})
    deadline = time.monotonic() + 10
    while rows() != (["webhook-claim:msg_live:0"], 0):
        assert time.monotonic() < deadline, rows()
        time.sleep(0.05)


def test_a_job_and_a_chat_take_the_text_as_message_or_input(
    write_config: Any, thread_server: Any, client: Any, make_key: Any
) -> None:
    """koboi-agent's {"message": ...} queues a job as written; chat takes "input" too;
    both names at once, or neither, is a 422 that says so."""
    config = write_config(JOBS)
    server = thread_server(config, settings=FAST_JOBS)
    c = client(server.base_url, make_key(config=config))

    made = c.post("/v1/jobs", json={"message": "log from-message"})
    assert made.status_code == 202, made.text
    done = _wait_for(c, made.json()["id"], "completed", "failed", "cancelled")
    assert done["status"] == "completed", done
    assert _log(config) == ["from-message"]

    chat = c.post("/v1/chat", json={"input": "log from-input"})
    assert chat.status_code == 200, chat.text
    assert chat.json()["outcome"] == "completed"
    assert _log(config) == ["from-message", "from-input"]

    for body in ({"message": "log a", "input": "log b"}, {"metadata": {}}):
        refused = c.post("/v1/jobs", json=body)
        assert refused.status_code == 422, refused.text
        assert "input" in refused.text and "message" in refused.text
    assert _log(config) == ["from-message", "from-input"]
