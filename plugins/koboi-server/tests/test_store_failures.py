"""Store failures under jobs: a passing one leaves the job resumable (the next claim resumes
its run from the journal), a replica fenced out of a job says so in one line, and a store
outage is one warning in the log, not a traceback at every poll.

(The same with a real PostgreSQL cut and stopped: tests/test_store_faults.py.)
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from koboi import Risk, tool
from koboi import journal as J
from koboi.config import validate_config
from koboi.errors import (
    FencedOut,
    IdempotencyConflict,
    JobNotFound,
    KoboiError,
    LeaseHeld,
    MissingCapability,
    SessionNotFound,
    StoreError,
)
from koboi.store import InMemoryStore, JournalEvent, NewEvent
from koboi_server.jobs import JobRunner, submit_job
from koboi_server.outages import LoopErrors, StoreOutage, is_store_failure, mark_store_failure

pytestmark = pytest.mark.anyio


def _config(script: list[Any]) -> Any:
    return validate_config(
        {
            "agent": {"name": "jobs", "lease_seconds": 2},
            "llm": {"provider": "scripted", "script": script, "on_exhausted": "error"},
            "store": {"url": "memory://"},
        }
    )


def _append_tool(lines: list[str]) -> Any:
    @tool(name="append_line", risk=Risk.SAFE, idempotent=False)
    def append_line(line: str) -> str:
        """Append a line (not idempotent: an in-doubt call is not run again)."""
        lines.append(line)
        return f"appended {line}"

    return append_line


SCRIPT: list[Any] = [
    {"tool_calls": [{"id": "c1", "name": "append_line", "arguments": {"line": "once"}}]},
    "done",
]


class FlakyStore(InMemoryStore):
    """An in-memory store whose journal write of a tool's outcome (its result, or the
    "interrupted" a resumed run records for it) fails ``times`` times."""

    def __init__(self, error: Exception, times: int = 1) -> None:
        super().__init__()
        self.error = error
        self.times = times

    async def append(
        self,
        session_id: str,
        events: Any,
        *,
        fence: int | None = None,
        audit: Any = (),
        status: Any = None,
    ) -> list[JournalEvent]:
        batch: list[NewEvent] = list(events)
        outcomes = (J.TOOL_CALL_FINISHED, J.TOOL_CALL_INTERRUPTED)
        if self.times > 0 and any(e.type in outcomes for e in batch):
            self.times -= 1
            raise self.error
        return await super().append(session_id, batch, fence=fence, audit=audit, status=status)


# -- telling a store failure from a bug ------------------------------------------------------


def test_store_failures_are_told_from_the_stores_answers_and_from_bugs() -> None:
    assert is_store_failure(StoreError("connection cut"))
    for answer in (
        FencedOut("taken over"),
        LeaseHeld("other", 0.0),
        SessionNotFound("no session"),
        JobNotFound("no job"),
        IdempotencyConflict("key reused"),
        MissingCapability("no job queue"),
    ):
        assert not is_store_failure(answer), answer
    assert not is_store_failure(KoboiError("refused"))
    assert not is_store_failure(ValueError("a bug"))
    # What came out of a store call, whatever its type (the kernel re-raises it as it is).
    raw = OSError("EIO")
    mark_store_failure(raw)
    assert is_store_failure(raw)

    # Raised while a store failure was being handled (the kernel's "first error is the news").
    def journal_the_failure() -> None:
        try:
            raise StoreError("disk full")
        except StoreError:
            raise KoboiError("the model failed") from None

    with pytest.raises(KoboiError) as chained:
        journal_the_failure()
    assert is_store_failure(chained.value)
    assert is_store_failure(ExceptionGroup("tasks", [ValueError("x"), StoreError("cut")]))


def test_an_outage_is_one_warning_and_one_recovery_line(caplog: pytest.LogCaptureFixture) -> None:
    outage = StoreOutage()
    workers = [LoopErrors(f"job worker {n}", outage) for n in (1, 2)]
    recovery = LoopErrors("recovery", outage)
    caplog.set_level(logging.DEBUG, logger="koboi.server")
    for _ in range(50):  # fifty polls of three loops while the store is away
        for loop in (*workers, recovery):
            loop.failed(StoreError("cannot connect to PostgreSQL"))
    workers[0].ok()
    assert outage.ongoing  # the others have not seen it answer yet
    workers[1].ok()
    recovery.ok()
    assert not outage.ongoing
    said = [r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG]
    assert len(said) == 2, said
    assert said[0].startswith("the store fails (job worker 1: cannot connect to PostgreSQL)")
    assert said[1].startswith("the store answers again, after ")
    assert all(r.exc_info is None for r in caplog.records)

    # A bug has its traceback, once while it repeats; another bug has its own.
    caplog.clear()
    for _ in range(5):
        recovery.failed(RuntimeError("unexpected"))
    recovery.failed(TypeError("another"))
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert [type(r.exc_info[1]).__name__ for r in tracebacks if r.exc_info] == [
        "RuntimeError",
        "TypeError",
    ]


# -- a job whose store fails once -------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [StoreError("terminating connection due to administrator command"), OSError(5, "EIO")],
    ids=["store-error", "raw-error"],
)
async def test_a_job_whose_store_fails_once_is_resumed_by_the_next_claim_not_failed(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    lines: list[str] = []
    store = FlakyStore(error)
    caplog.set_level(logging.INFO, logger="koboi.server")
    async with (
        store,
        JobRunner(_config(SCRIPT), store=store, extra_tools=[_append_tool(lines)]) as runner,
    ):
        job, _ = await submit_job(store, owner="alice", input="append once")
        # The worker loop's view: the job's own line says it, not a second "store fails".
        errors = LoopErrors("job worker 1", StoreOutage())
        # The tool ran; its result could not be journaled: the job is left, not finished.
        assert await runner.run_one(errors=errors) is None
        left = await store.get_job(job.id)
        assert left.status == "running" and left.result is None
        assert lines == ["once"]
        # Released: the next claim takes it at once and resumes the run from the journal.
        done = await runner.run_one(errors=errors)
        assert not errors.outage.ongoing
        events = await store.read(job.session_id)
    assert done is not None and done.status == "completed" and done.attempts == 2
    assert lines == ["once"]  # the in-doubt call was not run again
    types = [e.type for e in events]
    assert types.count(J.RUN_FINISHED) == 1 and J.TOOL_CALL_INTERRUPTED in types
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and job.id in warnings[0] and "released" in warnings[0]
    assert all(r.exc_info is None for r in caplog.records)


async def test_a_job_whose_store_keeps_failing_is_left_to_its_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A second failure of the same job soon after is not released again: no hot loop."""
    store = FlakyStore(StoreError("disk full"), times=2)
    caplog.set_level(logging.INFO, logger="koboi.server")
    async with (
        store,
        JobRunner(
            _config(SCRIPT), store=store, extra_tools=[_append_tool([])], lease_seconds=0.5
        ) as runner,
    ):
        await submit_job(store, owner="alice", input="append once")
        assert await runner.run_one() is None
        # Resumed at once; its next write fails too: now left to its lease.
        assert await runner.run_one() is None
        assert await runner.run_one() is None  # nothing to claim while the lease lasts
        await anyio.sleep(0.6)
        done = await runner.run_one()
    assert done is not None and done.status == "completed" and done.attempts == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "released" in warnings[0] and "lease runs out" in warnings[1]


async def test_a_real_failure_still_fails_the_job() -> None:
    # Positive control of the distinction: the model's script runs out (a provider error).
    store = InMemoryStore()
    async with store, JobRunner(_config([]), store=store) as runner:
        await submit_job(store, owner="alice", input="anything")
        done = await runner.run_one()
    assert done is not None and done.status == "failed" and done.attempts == 1


# -- fenced out ----------------------------------------------------------------------------------


async def test_a_runner_fenced_out_of_a_job_says_who_took_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = anyio.Event()

    @tool(name="wait_long", risk=Risk.SAFE)
    async def wait_long() -> str:
        """Take a long time."""
        started.set()
        await anyio.sleep(30)
        return "finished"

    script = [{"tool_calls": [{"id": "c1", "name": "wait_long", "arguments": {}}]}, "done"]
    store = InMemoryStore()
    caplog.set_level(logging.INFO, logger="koboi.server")
    async with (
        store,
        JobRunner(
            _config(script), store=store, extra_tools=[wait_long], lease_seconds=0.6
        ) as runner,
    ):
        job, _ = await submit_job(store, owner="alice", input="go")
        result: list[Any] = []

        async def run() -> None:
            result.append(await runner.run_one())

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await started.wait()
            # Another replica takes the job over (as after this one's lease ran out).
            await store.release_job(await store.get_job(job.id))
            taken = await store.claim_job("replica-2:4242:abcd", 30)
            assert taken is not None and taken.id == job.id
        after = await store.get_job(job.id)
    assert result == [None]  # it stopped and wrote nothing more
    assert after.holder == "replica-2:4242:abcd" and after.status == "running"
    lines = [r.getMessage() for r in caplog.records if job.id in r.getMessage()]
    assert len(lines) == 1, lines
    assert "taken over by replica-2:4242:abcd" in lines[0]


async def test_a_background_loop_that_escapes_is_logged_once_and_restarted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What escapes a loop would end the app's lifespan (the store closed under requests
    uvicorn still serves); supervised() logs it and starts the loop again."""
    from koboi_server.outages import supervised

    runs: list[int] = []

    async def loop() -> None:
        runs.append(len(runs) + 1)
        if len(runs) < 3:
            raise RuntimeError("the loop has a bug")

    with caplog.at_level(logging.DEBUG, logger="koboi.server"), anyio.fail_after(5):
        await supervised("purge", StoreOutage(), loop, first_delay=0.01)
    assert runs == [1, 2, 3]  # restarted twice, then it returned and was not run again
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "purge failed" in errors[0].getMessage()
