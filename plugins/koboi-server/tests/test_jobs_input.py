"""Jobs that wait for input: a run that suspends leaves its job ``waiting_input`` (never
claimed), one reply per suspension queues it again, the next runner continues the run with
that reply — also after the process that was continuing it was killed — and every run of
the job stays in the trace it was submitted in."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from koboi import Risk, ToolContext, tool
from koboi import journal as J
from koboi.config import validate_config
from koboi.store import Job, RecordWrite
from koboi.tracing import TraceContext
from koboi_server.jobs import (
    INPUT_KIND,
    InputAlreadyGiven,
    JobNotWaiting,
    JobRunner,
    cancel_waiting,
    ensure_job_session,
    input_key,
    provide_input,
    submit_job,
)

pytestmark = pytest.mark.anyio

#: The model asks for the booking, then answers once the tool has run.
SCRIPT: list[Any] = [
    {"tool_calls": [{"id": "c1", "name": "book", "arguments": {"room": "7"}}]},
    "all set",
]


def _config(url: str) -> Any:
    return validate_config(
        {
            "agent": {"name": "jobs", "lease_seconds": 2},
            "llm": {"provider": "scripted", "script": SCRIPT, "on_exhausted": "error"},
            "store": {"url": url},
        }
    )


def _book_tool(seen: list[Any]) -> Any:
    @tool(name="book", risk=Risk.SAFE, thread=False)
    def book(ctx: ToolContext, room: str) -> str:
        """Book a room; asks who for."""
        seen.append(ctx.reply)
        if ctx.reply is None:
            ctx.suspend("who is the booking for?", kind="input", data={"room": room})
        return f"booked {room} for {ctx.reply}"

    return book


class Outbox:
    """Records what the runner asks to send with each status change."""

    def __init__(self) -> None:
        self.statuses: list[str] = []

    async def __call__(self, job: Job) -> list[RecordWrite]:
        self.statuses.append(job.status)
        return []


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_a_suspended_job_waits_unclaimed_and_continues_with_the_reply(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    seen: list[Any] = []
    outbox = Outbox()
    submitted = TraceContext.new()
    answered = TraceContext.new()
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'j.db'}"
    else:
        url = request.getfixturevalue("pg_store_url")  # a schema of its own, dropped after
    config = _config(url)
    async with JobRunner(config, extra_tools=[_book_tool(seen)], outbox=outbox) as runner:
        store = runner.agent.store
        job, _ = await submit_job(store, owner="alice", input="book room 7", trace=submitted)
        waiting = await runner.run_one()
        assert waiting is not None and waiting.status == "waiting_input"
        assert waiting.result is not None
        suspension = waiting.result["suspension"]
        assert suspension["reason"] == "who is the booking for?"
        assert suspension["data"] == {"room": "7"} and suspension["call_id"] == "c1"
        # Waiting for input holds no worker: nothing claims it, however often asked.
        for _ in range(3):
            assert await runner.run_one() is None
        assert (await runner.queue.get_job(job.id)).attempts == 1

        queued = await provide_input(store, job.id, "Ada", trace=answered, given_by="alice")
        assert queued.status == "queued"
        with pytest.raises(JobNotWaiting):
            await provide_input(store, job.id, "Bob")  # it does not wait any more
        done = await runner.run_one()
        events = await store.read(job.session_id)

    assert done is not None and done.status == "completed" and done.attempts == 2
    assert done.result is not None and done.result["output"] == "all set"
    assert seen == [None, "Ada"]  # the suspended call ran again, with the reply
    finished = [e for e in events if e.type == J.TOOL_CALL_FINISHED]
    assert [J.TOOL_CALL_FINISHED.of(e)["content"] for e in finished] == ["booked 7 for Ada"]
    started = J.RUN_STARTED.of(next(e for e in events if e.type == J.RUN_STARTED))
    resumed = J.RUN_RESUMED.of(next(e for e in events if e.type == J.RUN_RESUMED))
    assert resumed.get("reply") == "Ada"
    # The first run is in the submitter's trace, the continuation in the answer's.
    assert started["trace"]["traceparent"].split("-")[1] == submitted.trace_id
    assert resumed["trace"]["traceparent"].split("-")[1] == answered.trace_id
    assert outbox.statuses == ["waiting_input", "completed"]


async def test_one_reply_per_suspension_and_the_same_one_completes_a_crash(
    tmp_path: Path,
) -> None:
    config = _config(f"sqlite:///{tmp_path / 'j.db'}")
    async with JobRunner(config, extra_tools=[_book_tool([])]) as runner:
        store = runner.agent.store
        job, _ = await submit_job(store, owner="alice", input="book room 7")
        waiting = await runner.run_one()
        assert waiting is not None and waiting.status == "waiting_input"
        # A process of an earlier version (which stored the reply, then queued the job in
        # another write) stored the reply and died before queueing the job.
        await runner.records.record_create(INPUT_KIND, input_key(waiting), {"reply": "Ada"})
        assert (await runner.queue.get_job(job.id)).status == "waiting_input"
        with pytest.raises(InputAlreadyGiven):
            await provide_input(store, job.id, "Bob")
        assert (await runner.queue.get_job(job.id)).status == "waiting_input"
        # The same reply again finishes what the first began.
        assert (await provide_input(store, job.id, "Ada")).status == "queued"
        done = await runner.run_one()
    assert done is not None and done.status == "completed"


async def test_racing_replies_keep_exactly_one(tmp_path: Path) -> None:
    config = _config(f"sqlite:///{tmp_path / 'j.db'}")
    outcomes: dict[str, str] = {}
    async with JobRunner(config, extra_tools=[_book_tool([])]) as runner:
        store = runner.agent.store
        job, _ = await submit_job(store, owner="alice", input="book room 7")
        assert (await runner.run_one()) is not None

        async def answer(reply: str) -> None:
            try:
                outcomes[reply] = (await provide_input(store, job.id, reply)).status
            except (InputAlreadyGiven, JobNotWaiting) as exc:
                outcomes[reply] = type(exc).__name__

        async with anyio.create_task_group() as tg:
            for reply in ("Ada", "Bob", "Cy"):
                tg.start_soon(answer, reply)
        winners = [r for r, outcome in outcomes.items() if outcome == "queued"]
        done = await runner.run_one()
    assert len(winners) == 1, outcomes
    assert done is not None and done.status == "completed"
    events = await _events(config, done.session_id)
    resumed = J.RUN_RESUMED.of(next(e for e in events if e.type == J.RUN_RESUMED))
    assert resumed.get("reply") == winners[0]


async def _events(config: Any, session_id: str) -> list[Any]:
    from koboi.config import build_store
    from koboi.plugins import default_host

    store = build_store(config.store.url, config.base_dir, default_host().catalog())
    async with store:
        return list(await store.read(session_id))


async def test_a_run_that_suspended_before_its_status_was_written_waits_again(
    tmp_path: Path,
) -> None:
    """The process died between the run's suspension and the job's status: the next claimer
    finds the run suspended, runs nothing, and puts the job back to waiting for input."""
    seen: list[Any] = []
    config = _config(f"sqlite:///{tmp_path / 'j.db'}")
    async with JobRunner(config, extra_tools=[_book_tool(seen)]) as runner:
        store = runner.agent.store
        job, _ = await submit_job(store, owner="alice", input="book room 7")
        await ensure_job_session(store, job, config)
        first = await runner.agent.run("book room 7", session_id=job.session_id)
        assert first.outcome == "suspended"
        before = await store.read(job.session_id)
        waiting = await runner.run_one()
        after = await store.read(job.session_id)
    assert waiting is not None and waiting.status == "waiting_input"
    assert waiting.result is not None and waiting.result["suspended_event_id"] == before[-1].seq
    assert len(after) == len(before) and seen == [None]  # nothing ran again


async def test_cancelling_a_job_that_waits_finishes_it_with_its_outbox(tmp_path: Path) -> None:
    outbox = Outbox()
    config = _config(f"sqlite:///{tmp_path / 'j.db'}")
    async with JobRunner(config, extra_tools=[_book_tool([])], outbox=outbox) as runner:
        store = runner.agent.store
        job, _ = await submit_job(store, owner="alice", input="book room 7")
        assert (await runner.run_one()) is not None
        requested = await runner.queue.cancel_job(job.id)
        assert requested.status == "waiting_input" and requested.cancel_requested
        with pytest.raises(JobNotWaiting):
            await provide_input(store, job.id, "Ada")  # a cancelled job takes no input
        cancelled = await cancel_waiting(store, requested, outbox=outbox)
    assert cancelled.status == "cancelled"
    assert cancelled.result is not None and cancelled.result["outcome"] == "cancelled"
    assert outbox.statuses == ["waiting_input", "cancelled"]


CHILD = textwrap.dedent(
    """
    import sys, time, anyio
    from koboi import Risk, ToolContext, tool
    from koboi.config import validate_config
    from koboi_server.jobs import JobRunner

    @tool(name="book", risk=Risk.SAFE, idempotent=True)
    def book(ctx: ToolContext, room: str) -> str:
        "Book a room; asks who for."
        if ctx.reply is None:
            ctx.suspend("who is the booking for?", kind="input", data={"room": room})
        print("continuing with", ctx.reply, flush=True)
        time.sleep(3600)  # killed here, while the continued call runs
        return "unreachable"

    async def main():
        config = validate_config({
            "agent": {"name": "jobs", "lease_seconds": 2},
            "llm": {"provider": "scripted", "script": SCRIPT, "on_exhausted": "error"},
            "store": {"url": sys.argv[1]},
        })
        async with JobRunner(config, extra_tools=[book], holder="replica-a",
                             lease_seconds=1.5) as runner:
            print("claimed", await runner.run_one(), flush=True)

    anyio.run(main)
    """
).replace("SCRIPT,", repr(SCRIPT) + ",", 1)


def _kill_while_continuing(tmp_path: Path, url: str) -> None:
    script = tmp_path / "replica_a.py"
    script.write_text(CHILD)
    with subprocess.Popen(
        [sys.executable, str(script), url], stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line.strip() == "continuing with Ada", line
            child.send_signal(signal.SIGKILL)
            child.wait(10)
        finally:
            if child.poll() is None:
                child.kill()


async def test_a_continuation_whose_process_is_killed_is_finished_by_another_runner(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    seen: list[Any] = []
    trace = TraceContext.new()
    config = _config(url)
    async with JobRunner(config, extra_tools=[_book_tool(seen)], holder="replica-b") as runner:
        store = runner.agent.store
        job, _ = await submit_job(store, owner="alice", input="book room 7", trace=trace)
        assert (await runner.run_one()) is not None  # suspended here: waiting_input
        await provide_input(store, job.id, "Ada")
        # Replica A claims the queued job and is killed while it continues the run.
        await anyio.to_thread.run_sync(_kill_while_continuing, tmp_path, url)
        held = await runner.queue.get_job(job.id)
        assert (held.status, held.holder) == ("running", "replica-a")
        done = None
        with anyio.fail_after(20):
            while done is None:
                done = await runner.run_one()
                await anyio.sleep(0.2)
        events = await store.read(job.session_id)
    assert done.status == "completed" and done.attempts == 3
    assert done.result is not None and done.result["output"] == "all set"
    # Replica B ran the idempotent call again, still with the reply of the input.
    assert seen == [None, "Ada"]
    resumes = [J.RUN_RESUMED.of(e) for e in events if e.type == J.RUN_RESUMED]
    assert [r.get("reply") for r in resumes] == ["Ada", None]
    # The takeover stayed in the job's trace.
    started = J.RUN_STARTED.of(next(e for e in events if e.type == J.RUN_STARTED))
    traces = [started["trace"], *(r["trace"] for r in resumes if "trace" in r)]
    assert {t["traceparent"].split("-")[1] for t in traces} == {trace.trace_id}
