"""Background jobs: run once, cancelled on request, and finished by another runner after a
SIGKILL — with no effect performed twice, on SQLite and on PostgreSQL."""

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

from koboi import Risk, tool
from koboi.config import validate_config
from koboi.errors import IdempotencyConflict, KoboiError
from koboi_server.jobs import JobRunner, submit_job

pytestmark = pytest.mark.anyio


def _config(store_url: str, script: list[Any], **agent: Any) -> Any:
    return validate_config(
        {
            "agent": {"name": "jobs", "lease_seconds": 2, **agent},
            "llm": {"provider": "scripted", "script": script, "on_exhausted": "error"},
            "store": {"url": store_url},
        }
    )


def _append_tool(path: Path) -> Any:
    @tool(name="append_line", risk=Risk.SAFE)
    def append_line(line: str) -> str:
        """Append a line to the job's log (not idempotent)."""
        with open(path, "a", encoding="utf-8") as log:
            log.write(line + "\n")
        return f"appended {line}"

    return append_line


def _calls(*lines: str) -> list[Any]:
    return [
        {"tool_calls": [{"id": f"c{i}", "name": "append_line", "arguments": {"line": line}}]}
        for i, line in enumerate(lines)
    ]


async def test_a_job_runs_once_and_records_its_result(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    config = _config(f"sqlite:///{tmp_path / 'k.db'}", [*_calls("a", "b"), "all done"])
    finished: list[Any] = []

    async def on_finished(job: Any) -> None:
        finished.append(job)

    async with JobRunner(
        config, extra_tools=[_append_tool(log)], on_finished=on_finished
    ) as runner:
        store = runner.agent.store
        job, created = await submit_job(
            store, owner="alice", input="write two lines", idempotency_key="k", request_hash="h"
        )
        again, created_again = await submit_job(
            store, owner="alice", input="write two lines", idempotency_key="k", request_hash="h"
        )
        assert created and not created_again and again.id == job.id
        with pytest.raises(IdempotencyConflict):
            await submit_job(
                store, owner="alice", input="other", idempotency_key="k", request_hash="h2"
            )
        done = await runner.run_one()
        assert done is not None and done.id == job.id
        assert (done.status, done.result) == (
            "completed",
            {"outcome": "completed", "output": "all done", "error": None, "steps": 3},
        )
        assert await runner.run_one() is None  # nothing left
        session = await store.get_session(job.session_id)
        assert session.owner == "alice" and session.metadata["job"] == job.id
    assert log.read_text() == "a\nb\n"
    assert [j.id for j in finished] == [job.id]


async def test_the_outbox_is_written_with_the_final_status(tmp_path: Path) -> None:
    config = _config(f"sqlite:///{tmp_path / 'k.db'}", ["done", "done again"])
    seen: list[Any] = []

    async def outbox(job: Any) -> list[Any]:
        seen.append(job)
        # What is passed is the job as it is about to be stored: final status, result.
        return [("outbox", job.id, {"status": job.status, "output": job.result["output"]})]

    async with JobRunner(config, outbox=outbox) as runner:
        store = runner.agent.store
        job, _ = await submit_job(store, owner="alice", input="go")
        done = await runner.run_one()
        assert done is not None and done.status == "completed"
        assert [(j.id, j.status) for j in seen] == [(job.id, "completed")]
        assert await store.record_get("outbox", job.id) == {
            "status": "completed",
            "output": "done",
        }

    async def broken(job: Any) -> list[Any]:
        raise RuntimeError("receiver list unreadable")

    async with JobRunner(config, outbox=broken) as runner:
        job, _ = await submit_job(runner.agent.store, owner="alice", input="go again")
        done = await runner.run_one()
        # A failing outbox costs its records, never the job's final status.
        assert done is not None and (done.id, done.status) == (job.id, "completed")


async def test_an_empty_input_is_refused(tmp_path: Path) -> None:
    config = _config("memory://", ["x"])
    async with JobRunner(config) as runner:
        with pytest.raises(KoboiError, match="non-empty input"):
            await submit_job(runner.agent.store, owner=None, input="  ")


async def test_cancelling_a_running_job_stops_it(tmp_path: Path) -> None:
    started = anyio.Event()

    @tool(name="wait_long", risk=Risk.SAFE)
    async def wait_long() -> str:
        """Take a long time."""
        started.set()
        await anyio.sleep(30)
        return "finished"

    script = [{"tool_calls": [{"id": "c1", "name": "wait_long", "arguments": {}}]}, "done"]
    config = _config(f"sqlite:///{tmp_path / 'k.db'}", script)
    async with JobRunner(config, extra_tools=[wait_long], lease_seconds=0.6) as runner:
        store = runner.agent.store
        job, _ = await submit_job(store, owner="alice", input="go")
        results: list[Any] = []

        async def run() -> None:
            results.append(await runner.run_one())

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await started.wait()
                assert (await store.get_job(job.id)).status == "running"
                await store.cancel_job(job.id)
        (done,) = results
        assert done is not None and done.status == "cancelled"
        events = await store.read(job.session_id)
    assert events[-1].type == "run_finished" and events[-1].data["outcome"] == "cancelled"
    assert not any(e.type == "tool_call_finished" for e in events)


CHILD = textwrap.dedent(
    """
    import os, sys, time, anyio
    from koboi import Risk, tool
    from koboi.config import validate_config
    from koboi_server.jobs import JobRunner

    log = sys.argv[2]

    @tool(name="append_line", risk=Risk.SAFE)
    def append_line(line: str) -> str:
        "Append a line (not idempotent)."
        with open(log, "a", encoding="utf-8") as f:
            f.write(line + "\\n")
            f.flush()
            os.fsync(f.fileno())
        if line == "two":
            print("effect done", flush=True)
            time.sleep(3600)  # killed here: the effect happened, the journal does not know
        return "appended " + line

    script = [
        {"tool_calls": [{"id": f"c{i}", "name": "append_line", "arguments": {"line": w}}]}
        for i, w in enumerate(["one", "two", "three"])
    ] + ["all three"]

    async def main():
        config = validate_config({
            "agent": {"name": "jobs", "lease_seconds": 2},
            "llm": {"provider": "scripted", "script": script, "on_exhausted": "error"},
            "store": {"url": sys.argv[1]},
        })
        async with JobRunner(config, extra_tools=[append_line], holder="replica-a", lease_seconds=1.5) as runner:
            print("claimed", (await runner.run_one()), flush=True)

    anyio.run(main)
    """
)


def _kill_mid_job(tmp_path: Path, url: str, log: Path) -> None:
    script = tmp_path / "replica_a.py"
    script.write_text(CHILD)
    with subprocess.Popen(
        [sys.executable, str(script), url, str(log)], stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line.startswith("effect done"), line
            child.send_signal(signal.SIGKILL)
            child.wait(10)
        finally:
            if child.poll() is None:
                child.kill()


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_a_job_of_a_killed_replica_is_finished_by_another_without_repeating_effects(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'k.db'}"
    else:
        url = request.getfixturevalue("pg_store_url")  # a schema of its own, dropped after
    log = tmp_path / "job.log"
    script = [*_calls("one", "two", "three"), "all three"]
    config = _config(url, script)
    async with JobRunner(config, extra_tools=[_append_tool(log)], holder="replica-b") as replica_b:
        store = replica_b.agent.store
        job, _ = await submit_job(store, owner="alice", input="write three lines")
        await anyio.to_thread.run_sync(_kill_mid_job, tmp_path, url, log)
        claimed_by_a = await store.get_job(job.id)
        assert (claimed_by_a.status, claimed_by_a.holder) == ("running", "replica-a")
        # Replica B finds the job held until replica A's lease runs out, then takes it over.
        assert await replica_b.run_one() is None
        done = None
        with anyio.fail_after(20):
            for _ in range(100):
                done = await replica_b.run_one()
                if done is not None:
                    break
                await anyio.sleep(0.2)
        events = await store.read(job.session_id)
    assert done is not None and done.id == job.id
    assert done.status == "completed" and done.attempts == 2
    assert done.result is not None and done.result["output"] == "all three"
    # "two" happened once: the interrupted, non-idempotent call was not run again.
    assert log.read_text().splitlines() == ["one", "two", "three"]
    assert [e.data["call_id"] for e in events if e.type == "tool_call_interrupted"] == ["c1"]
