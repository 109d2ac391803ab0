"""The generic pause over HTTP (a chat or a job whose run suspends, continued by its reply),
W3C trace context from the request headers, and the live events of the open event stream
(plugin progress, journaled plugin events, child runs) over real SSE."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx
import pytest

from koboi import Risk, ToolContext, tool
from koboi.tracing import TraceContext
from koboi_server.webhooks import generate_secret, verify

AGENT = """
    agent: {name: served, mode: act, lease_seconds: 2}
    llm:
      provider: scripted
      rules:
        - match: 'book (?P<room>\\w+)'
          tool: book
          arguments: {room: "{room}"}
          reply: "booked: {result}"
        - match: 'research (?P<topic>\\w+)'
          tool: research
          arguments: {topic: "{topic}"}
          reply: "found: {result}"
        - match: 'crunch (?P<topic>\\w+)'
          tool: crunch
          arguments: {topic: "{topic}"}
          reply: "crunched: {result}"
      fallback: "nothing here"
    tools: {builtin: []}
    sandbox: {backend: passthrough, workdir: work}
    store: {url: "sqlite:///koboi.db"}
"""

FAST_JOBS = {"job_lease_seconds": 1.0, "job_poll_seconds": 0.1}


@tool(name="book", risk=Risk.SAFE, thread=False)
def book(ctx: ToolContext, room: str) -> str:
    """Book a room; asks who for."""
    if ctx.reply is None:
        ctx.suspend("who is the booking for?", kind="input", data={"room": room})
    return f"booked {room} for {ctx.reply}"


@tool(name="research", risk=Risk.SAFE)
async def research(ctx: ToolContext, topic: str) -> str:
    """Ask a sub-agent (it has no tools)."""
    result = await ctx.run_subagent(f"look into {topic}", tools=[])
    return result.output


research.live_events = True

#: Set by a test to let ``crunch`` go on (it waits for it: the run stays in progress).
CRUNCH_GATE = threading.Event()


@tool(name="crunch", risk=Risk.SAFE)
async def crunch(ctx: ToolContext, topic: str) -> str:
    """Report progress (streamed) and a finding (journaled)."""
    await anyio.to_thread.run_sync(CRUNCH_GATE.wait, 20)
    ctx.emit("demo.progress", {"done": 1})
    ctx.record("demo.found", {"topic": topic})
    ctx.emit("demo.progress", {"done": 2})
    return f"crunched {topic}"


crunch.live_events = True

TOOLS = [book, research, crunch]


@pytest.fixture
def pause_config(write_config: Any) -> Path:
    path: Path = write_config(AGENT, name="pause.yaml")
    return path


def _journal(in_store: Any, config: Path, session_id: str) -> list[Any]:
    async def read(store: Any) -> list[Any]:
        return list(await store.read(session_id))

    return list(in_store(read, config))


def _wait_for(c: httpx.Client, job_id: str, *statuses: str, seconds: float = 20) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        job = c.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in statuses:
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.05)


def _trace_id(data: Any) -> str:
    return str(data["traceparent"]).split("-")[1]


# -- the generic pause: chat -------------------------------------------------------------


def test_a_suspended_chat_answers_its_suspension_and_the_next_message_is_the_reply(
    pause_config: Path, thread_server: Any, client: Any, make_key: Any, in_store: Any
) -> None:
    server = thread_server(pause_config, extra_tools=TOOLS)
    c = client(server.base_url, make_key(config=pause_config))
    first = c.post("/v1/chat", json={"message": "book 12"})
    assert first.status_code == 200, first.text
    body = first.json()
    assert (body["status"], body["outcome"]) == ("finished", "suspended")
    suspension = body["suspension"]
    assert suspension["reason"] == "who is the booking for?" and suspension["kind"] == "input"
    assert suspension["data"] == {"room": "12"} and suspension["name"] == "book"
    sid = body["session_id"]
    assert c.get(f"/v1/sessions/{sid}").json()["status"] == "suspended"
    listed = c.get("/v1/sessions", params={"status": "suspended"}).json()["sessions"]
    assert [s["id"] for s in listed] == [sid]

    second = c.post("/v1/chat", json={"message": "Ada", "session_id": sid})
    assert second.status_code == 200, second.text
    done = second.json()
    assert (done["outcome"], done["output"]) == ("completed", "booked: booked 12 for Ada")
    assert done["suspension"] is None and done["refused_by"] is None
    events = _journal(in_store, pause_config, sid)
    resumed = [e for e in events if e.type == "run_resumed"]
    assert [e.data["reply"] for e in resumed] == ["Ada"]
    assert done["last_event_id"] == events[-1].seq
    assert c.get(f"/v1/sessions/{sid}").json()["status"] == "completed"


def test_a_suspended_stream_ends_with_the_suspension_and_is_continued_by_a_message(
    pause_config: Path,
    thread_server: Any,
    client: Any,
    make_key: Any,
    in_store: Any,
    events_of: Any,
) -> None:
    server = thread_server(pause_config, extra_tools=TOOLS)
    c = client(server.base_url, make_key(config=pause_config))
    with c.stream("POST", "/v1/chat/stream", json={"message": "book 4"}) as response:
        first = events_of(response)
    final = first[-1]
    assert final.event == "final" and final.data["outcome"] == "suspended"
    assert final.data["suspension"]["data"] == {"room": "4"}
    (suspended,) = [e for e in first if e.event == "tool_suspended"]
    assert suspended.data["name"] == "book" and suspended.data["reason"].startswith("who")
    sid = final.data["session_id"]

    key = {"Idempotency-Key": "continue-4"}
    body = {"message": "Bo", "session_id": sid}
    with c.stream("POST", "/v1/chat/stream", json=body, headers=key) as response:
        assert response.status_code == 200
        second = events_of(response)
    names = [e.event for e in second if e.id is not None]
    assert names[0] == "run_resumed" and second[0].data["reply"] == "Bo"
    assert second[-1].event == "final" and second[-1].data["outcome"] == "completed"
    assert second[-1].data["output"] == "booked: booked 4 for Bo"
    journal = _journal(in_store, pause_config, sid)
    ids = [e.id for e in first + second if e.id is not None]
    assert ids == [j.seq for j in journal]  # one SSE event per journal event, no hole

    # The key of a continuation replays it (its run begins with run_resumed).
    with c.stream("POST", "/v1/chat/stream", json=body, headers=key) as response:
        assert response.headers["idempotent-replayed"] == "true"
        again = events_of(response)
    assert [e.id for e in again if e.id is not None] == [e.id for e in second if e.id]
    replayed = c.post("/v1/chat", json=body, headers={"Idempotency-Key": "continue-4"})
    assert replayed.status_code == 422  # another route: another request
    assert [e.type for e in _journal(in_store, pause_config, sid)].count("run_resumed") == 1


def _reused(answer: httpx.Response) -> bool:
    return answer.status_code == 422 and answer.json()["error"]["code"] == "idempotency_key_reused"


def test_a_job_inputs_idempotency_key_names_one_request(
    pause_config: Path, thread_server: Any, client: Any, make_key: Any
) -> None:
    """``POST /v1/jobs/{id}/input`` keeps the promise of every keyed route: one key, one
    request (route, job and reply). Reused on another route, another job or with another
    reply it is 422 and does nothing; a key of another route is refused here too."""
    server = thread_server(pause_config, extra_tools=TOOLS, settings=FAST_JOBS)
    c = client(server.base_url, make_key(config=pause_config))
    ids = [c.post("/v1/jobs", json={"input": f"book {room}"}).json()["id"] for room in "56"]
    for job_id in ids:
        assert _wait_for(c, job_id, "waiting_input", "failed")["status"] == "waiting_input"
    first, second = ids

    # A key first used on a chat is refused on the input route; the job still waits.
    chatted = c.post("/v1/chat", json={"message": "hello"}, headers={"Idempotency-Key": "k-c"})
    assert chatted.status_code == 200, chatted.text
    refused = c.post(
        f"/v1/jobs/{first}/input", json={"reply": "Ada"}, headers={"Idempotency-Key": "k-c"}
    )
    assert _reused(refused), refused.text
    assert c.get(f"/v1/jobs/{first}").json()["status"] == "waiting_input"

    # Positive control: a fresh key answers the job, and replays the answer.
    key = {"Idempotency-Key": "k-in"}
    answered = c.post(f"/v1/jobs/{first}/input", json={"reply": "Ada"}, headers=key)
    assert answered.status_code == 200 and answered.json()["status"] == "queued", answered.text
    again = c.post(f"/v1/jobs/{first}/input", json={"reply": "Ada"}, headers=key)
    assert again.headers["idempotent-replayed"] == "true" and again.json() == answered.json()

    # The same key with another reply, on another job, on the jobs route: 422, no effect.
    assert _reused(c.post(f"/v1/jobs/{first}/input", json={"reply": "Bob"}, headers=key))
    assert _reused(c.post(f"/v1/jobs/{second}/input", json={"reply": "Ada"}, headers=key))
    assert c.get(f"/v1/jobs/{second}").json()["status"] == "waiting_input"
    jobs_before = c.get("/v1/jobs").json()["jobs"]
    assert _reused(c.post("/v1/jobs", json={"input": "book 7"}, headers=key))
    assert c.get("/v1/jobs").json()["jobs"] == jobs_before

    done = _wait_for(c, first, "completed", "failed")
    assert done["result"]["output"] == "booked: booked 5 for Ada", done
    # The other job was never answered by the refused requests, and still can be.
    other = c.post(f"/v1/jobs/{second}/input", json={"reply": "Cy"})
    assert other.status_code == 200, other.text
    assert (
        _wait_for(c, second, "completed", "failed")["result"]["output"] == "booked: booked 6 for Cy"
    )


# -- the generic pause: jobs --------------------------------------------------------------


def test_a_job_waits_for_input_and_its_reply_continues_it_in_its_trace(
    write_config: Any,
    thread_server: Any,
    client: Any,
    make_key: Any,
    in_store: Any,
    receiver: Any,
) -> None:
    secret = generate_secret()
    config = write_config(
        AGENT,
        name="pause.yaml",
        extra=f"""
        server:
          webhooks:
            allow: ["127.0.0.1"]
            poll_interval: 0.1
            endpoints:
              - url: "{receiver.url}/hooks"
                secrets: ["{secret}"]
        """,
    )
    server = thread_server(config, extra_tools=TOOLS, settings=FAST_JOBS)
    c = client(server.base_url, make_key(config=config))
    trace = TraceContext.new()
    made = c.post(
        "/v1/jobs",
        json={"input": "book 9"},
        headers={"traceparent": trace.traceparent, "tracestate": "vendor=1"},
    )
    assert made.status_code == 202, made.text
    job_id = made.json()["id"]

    waiting = _wait_for(c, job_id, "waiting_input", "completed", "failed")
    assert waiting["status"] == "waiting_input", waiting
    assert waiting["suspension"]["reason"] == "who is the booking for?"
    assert waiting["suspension"]["data"] == {"room": "9"} and waiting["result"] is None
    assert [j["id"] for j in c.get("/v1/jobs", params={"status": "waiting_input"}).json()["jobs"]]
    time.sleep(0.6)  # several polls of the job workers: nobody claims it
    assert c.get(f"/v1/jobs/{job_id}").json()["attempts"] == 1

    key = {"Idempotency-Key": "answer-9"}
    answered = c.post(f"/v1/jobs/{job_id}/input", json={"reply": "Ada"}, headers=key)
    assert answered.status_code == 200, answered.text
    assert answered.json()["status"] == "queued" and answered.json()["suspension"] is None
    retried = c.post(f"/v1/jobs/{job_id}/input", json={"reply": "Ada"}, headers=key)
    assert retried.status_code == 200 and retried.headers["idempotent-replayed"] == "true"
    assert retried.json() == answered.json()
    other = c.post(f"/v1/jobs/{job_id}/input", json={"reply": "Bob"})
    assert other.status_code == 409, other.text
    assert other.json()["error"]["code"] in ("job_not_waiting", "input_already_given")
    missing = c.post(f"/v1/jobs/{job_id}/input", json={})
    assert missing.status_code == 422

    done = _wait_for(c, job_id, "completed", "failed")
    assert done["status"] == "completed", done
    assert done["result"]["output"] == "booked: booked 9 for Ada" and done["attempts"] == 2
    events = _journal(in_store, config, done["session_id"])
    started = next(e for e in events if e.type == "run_started")
    assert _trace_id(started.data["trace"]) == trace.trace_id
    assert started.data["trace"]["tracestate"] == "vendor=1"
    resumed = next(e for e in events if e.type == "run_resumed")
    assert resumed.data["reply"] == "Ada"
    assert _trace_id(resumed.data["trace"]) == trace.trace_id  # the job's trace goes on

    # The endpoint learnt that the job waited, then that it finished.
    deadline = time.monotonic() + 15
    while len(receiver.received) < 2:
        assert time.monotonic() < deadline, receiver.received
        time.sleep(0.05)
    kinds = [verify(secret, h, b)["type"] for h, b in receiver.received]
    assert kinds == ["job.waiting_input", "job.finished"]
    waited = json.loads(receiver.received[0][1])["data"]
    assert waited["job_id"] == job_id and waited["suspension"]["data"] == {"room": "9"}


def test_a_job_waiting_for_input_is_cancelled_at_once(
    pause_config: Path, thread_server: Any, client: Any, make_key: Any
) -> None:
    server = thread_server(pause_config, extra_tools=TOOLS, settings=FAST_JOBS)
    c = client(server.base_url, make_key(config=pause_config))
    job_id = c.post("/v1/jobs", json={"input": "book 3"}).json()["id"]
    assert _wait_for(c, job_id, "waiting_input", "failed")["status"] == "waiting_input"
    cancelled = c.post(f"/v1/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["result"]["outcome"] == "cancelled"
    refused = c.post(f"/v1/jobs/{job_id}/input", json={"reply": "late"})
    assert refused.status_code == 409
    assert refused.json()["error"] == {
        "code": "job_not_waiting",
        "message": refused.json()["error"]["message"],
        "job_status": "cancelled",
    }
    unknown = c.post("/v1/jobs/job_nope/input", json={"reply": "x"})
    assert unknown.status_code == 404


# -- trace context ------------------------------------------------------------------------


def test_a_traceparent_header_becomes_the_runs_trace_and_a_bad_one_a_new_trace(
    pause_config: Path,
    thread_server: Any,
    client: Any,
    make_key: Any,
    in_store: Any,
    events_of: Any,
) -> None:
    server = thread_server(pause_config, extra_tools=TOOLS)
    c = client(server.base_url, make_key(config=pause_config))
    given = TraceContext.new()
    headers = {"traceparent": given.traceparent, "tracestate": "congo=t61rcWkgMzE"}
    chat = c.post("/v1/chat", json={"message": "hello"}, headers=headers)
    assert chat.status_code == 200, chat.text
    with c.stream("POST", "/v1/chat/stream", json={"message": "hi"}, headers=headers) as r:
        streamed = events_of(r)
    assert _trace_id(streamed[0].data["trace"]) == given.trace_id  # shown in run_started
    for sid in (chat.json()["session_id"], streamed[0].data["session_id"]):
        started = _journal(in_store, pause_config, sid)[0]
        assert started.type == "run_started"
        trace = started.data["trace"]
        assert _trace_id(trace) == given.trace_id and trace["tracestate"] == "congo=t61rcWkgMzE"

    # Invalid headers are no error: the run starts a trace of its own.
    for bad in ("garbage", "00-" + "0" * 32 + "-" + "1" * 16 + "-01", "ff-" + "a" * 32 + "-b-01"):
        answer = c.post("/v1/chat", json={"message": "hello"}, headers={"traceparent": bad})
        assert answer.status_code == 200, (bad, answer.text)
        started = _journal(in_store, pause_config, answer.json()["session_id"])[0]
        parsed = TraceContext.parse(started.data["trace"]["traceparent"])
        assert parsed is not None and parsed.trace_id != given.trace_id


# -- the open event stream ----------------------------------------------------------------


def test_plugin_progress_journaled_plugin_events_and_child_runs_reach_the_stream(
    pause_config: Path,
    thread_server: Any,
    client: Any,
    make_key: Any,
    in_store: Any,
    events_of: Any,
) -> None:
    CRUNCH_GATE.set()
    server = thread_server(pause_config, extra_tools=TOOLS)
    c = client(server.base_url, make_key(config=pause_config))
    with c.stream("POST", "/v1/chat/stream", json={"message": "crunch numbers"}) as response:
        events = events_of(response)
    sid = events[0].data["session_id"]
    journal = _journal(in_store, pause_config, sid)
    assert [e.id for e in events if e.id is not None] == [j.seq for j in journal]
    call = next(e for e in events if e.event == "tool_call")
    progress = [e for e in events if e.event == "plugin_event" and e.id is None]
    assert [(p.data["type"], p.data["data"]) for p in progress] == [
        ("demo.progress", {"done": 1}),
        ("demo.progress", {"done": 2}),
    ]
    assert {p.data["call_id"] for p in progress} == {call.data["call_id"]}
    (found,) = [e for e in events if e.event == "plugin_event" and e.id is not None]
    assert found.data["type"] == "demo.found" and found.data["data"] == {"topic": "numbers"}
    assert found.data["event_id"] == found.id
    order = [e.event for e in events]
    result_at = order.index("tool_result")
    assert all(order.index("tool_call") < events.index(p) < result_at for p in progress)
    assert all(p.data["after_event_id"] >= call.id for p in progress)

    with c.stream("POST", "/v1/chat/stream", json={"message": "research cats"}) as response:
        events = events_of(response)
    call = next(e for e in events if e.event == "tool_call")
    children = [e for e in events if e.event == "child_event"]
    assert children and all(e.id is None for e in children)
    assert {e.data["parent_call_id"] for e in children} == {call.data["call_id"]}
    kinds = [e.data["event"]["kind"] for e in children]
    assert kinds[-1] == "final" and "step" in kinds
    assert children[-1].data["event"]["output"] == "nothing here"
    child_sid = children[-1].data["child_session_id"]
    assert child_sid and child_sid != events[0].data["session_id"]
    assert events[-1].event == "final" and events[-1].data["output"] == "found: nothing here"
    # The child's events come while the parent's call runs: before its result.
    assert events.index(children[-1]) < [e.event for e in events].index("tool_result")


def test_a_running_jobs_live_events_reach_its_event_stream(
    pause_config: Path, thread_server: Any, client: Any, make_key: Any, sse: Any
) -> None:
    CRUNCH_GATE.clear()
    server = thread_server(pause_config, extra_tools=TOOLS, settings=FAST_JOBS)
    c = client(server.base_url, make_key(config=pause_config))
    try:
        job_id = c.post("/v1/jobs", json={"input": "crunch jobs"}).json()["id"]
        running = _wait_for(c, job_id, "running", "failed")
        deadline = time.monotonic() + 10
        while not c.get(f"/v1/sessions/{running['session_id']}").json()["last_event_id"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        seen: list[Any] = []
        with c.stream("GET", f"/v1/jobs/{job_id}/events") as response:
            assert response.status_code == 200
            for item in sse(response):
                if isinstance(item, str):
                    continue  # a comment (keepalive)
                seen.append(item)
                if item.event == "tool_call":
                    CRUNCH_GATE.set()  # the stream follows the job: now let it report
                if item.event in ("final", "idle", "error"):
                    break
    finally:
        CRUNCH_GATE.set()
    progress = [e for e in seen if e.event == "plugin_event" and e.id is None]
    assert [p.data["data"]["done"] for p in progress] == [1, 2], [e.event for e in seen]
    assert seen[-1].event == "final" and seen[-1].data["output"] == "crunched: crunched jobs"
