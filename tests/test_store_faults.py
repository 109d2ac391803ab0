"""Faults of the database under a run: PostgreSQL stopped and restarted mid-run, a store
error during a server job, a full disk and a read-only SQLite file.

What each trial checks: the run stops with one clear line naming the store (no
traceback); nothing already stored is lost (the journal read before the fault is a
prefix of the final one); once the fault is gone the session resumes and finishes with
the crash demo's invariants (``crash_helpers.assert_sound``: no non-idempotent call
twice, no finished call lost). Each has its positive control: the same path with no
fault completes.

The PostgreSQL trials run on a server of their own (``replica_helpers.private_postgres``:
``initdb`` in a temporary directory, a free loopback port), never the shared test server:
the suite runs two pytest processes side by side, and stopping the shared server would
fail whatever PostgreSQL test the other one runs at that moment. They, and the small
loop filesystems of the SQLite trials, need root; they fail instead of skipping when
``CI`` is set.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


crash = _load("crash_helpers")
rh = _load("replica_helpers")

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _wait_lines(demo: Any, proc: Any, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(demo.log_lines()) < count:
        assert proc.popen.poll() is None, proc.describe()
        assert time.monotonic() < deadline, proc.describe()
        time.sleep(0.01)


def _stopped_with_one_clear_line(proc: Any, *names: str) -> str:
    """The run exited 1 with a single ``error:`` line naming the store, and no traceback."""
    assert proc.wait() == 1, proc.describe()
    lines = crash.error_lines(proc)
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith("error: "), line
    assert "Traceback" not in proc.stderr.read_text(encoding="utf-8")
    for name in names:
        assert name in line, (name, line)
    return str(line)


def _resumed_and_sound(demo: Any, session: str, before: list[Any]) -> Any:
    """Resume the session to its end; nothing stored before the fault was lost."""
    resumer = demo.resume(session)
    assert resumer.wait() == 0, resumer.describe()
    assert resumer.result()["outcome"] == "completed", resumer.describe()
    _, events = demo.journal(session)
    assert events[: len(before)] == before, "events stored before the fault changed or vanished"
    report = crash.audit(events, demo.log_lines())
    crash.assert_sound(report)
    return report


# -- PostgreSQL stopped and started again -------------------------------------------------


@pytest.fixture(scope="module")
def private_server() -> Iterator[Any]:
    """A PostgreSQL server of this module's own, which its tests may stop and start."""
    try:
        rh.postgres_programs()
    except AssertionError as exc:
        crash.kernel_feature_missing(str(exc))
    with rh.private_postgres() as server:
        yield server


@pytest.fixture
def pg_schema(private_server: Any) -> Iterator[str]:
    """A schema on the private server; the server is left running whatever happens."""
    with rh.use_server(private_server):
        rh.require_postgres()
        with rh.postgres_left_running(), rh.pg_schema("koboi_fault") as schema:
            yield schema


@pytest.mark.postgres
@pytest.mark.timeout(180)
def test_koboi_run_stops_in_one_line_when_postgres_goes_away_and_resumes_after(
    tmp_path: Path, pg_schema: str, private_server: Any
) -> None:
    url = rh.store_url(pg_schema)
    # Positive control: the same run on the same store, no fault.
    control = crash.make_demo(tmp_path / "control", store_url=url, step_seconds=0.0)
    proc = control.start(session=uuid.uuid4().hex)
    assert proc.wait() == 0, proc.describe()
    assert proc.result()["output"] == crash.FINAL_OUTPUT

    demo = crash.make_demo(tmp_path / "fault", store_url=url, step_seconds=0.05)
    session = uuid.uuid4().hex
    proc = demo.start(session=session)
    _wait_lines(demo, proc, 8)
    _, before = demo.journal(session)  # what is stored before the fault
    stopped = rh.stop_postgres()
    try:
        line = _stopped_with_one_clear_line(proc, "PostgreSQL", private_server.address)
    finally:
        started = rh.start_postgres()
    print(f"PostgreSQL down {started - stopped:.1f} s; the run said: {line}")
    report = _resumed_and_sound(demo, session, before)
    print(f"resumed: in doubt {[report.line_of[c] for c in report.interrupted]}")


def _job_config(directory: Path) -> Any:
    return rh.write_agent(directory, lease=2.0, job_lease=2.0)


def _wait_job(cluster: Any, job_id: str, timeout: float = 60) -> dict[str, Any]:
    found = rh.wait_jobs_done(cluster, [job_id], timeout)
    job: dict[str, Any] = found.get(job_id, {})
    assert job.get("status") in ("completed", "failed", "cancelled"), job
    return job


def _last_event(schema: str, session_id: str) -> str | None:
    rows = rh.sql(
        schema,
        "SELECT type FROM events WHERE session_id = %s ORDER BY seq DESC LIMIT 1",
        session_id,
    )
    return rows[0][0] if rows else None


def _wait_tool_running(schema: str, session_id: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _last_event(schema, session_id) != "tool_call_started":
        assert time.monotonic() < deadline, "the job's tool never started"
        time.sleep(0.02)


@pytest.mark.postgres
@pytest.mark.timeout(180)
def test_a_server_job_survives_postgres_going_away_while_its_tool_runs(
    tmp_path: Path, pg_schema: str
) -> None:
    cluster = rh.Cluster(tmp_path, pg_schema, 1, step_seconds=2.0, lease=2.0, job_lease=2.0)
    (replica,) = cluster.replicas
    with contextlib.ExitStack() as closing:
        closing.callback(cluster.close)
        cluster.start()
        c = closing.enter_context(
            httpx.Client(base_url=replica.base_url, headers=cluster.headers(), timeout=10)
        )
        # Positive control: a job with no fault completes at its first claim.
        job = c.post("/v1/jobs", json={"input": "log control-1"}).json()
        done = _wait_job(cluster, job["id"])
        assert (done["status"], done["attempts"]) == ("completed", 1), done

        job = c.post("/v1/jobs", json={"input": "log outage-1"}).json()
        _wait_tool_running(pg_schema, job["session_id"])
        # The tool runs for 2 s; the database is away when it ends, so the run cannot
        # journal its result, and longer than the job's lease.
        stopped = rh.stop_postgres()
        try:
            during = c.get(f"/v1/jobs/{job['id']}")
            assert during.status_code == 503, during.text
            assert during.json()["error"]["code"] == "store_unavailable"
            assert httpx.get(replica.base_url + "/readyz", timeout=10).status_code == 503
            time.sleep(max(0.0, stopped + 4.0 - time.time()))
        finally:
            started = rh.start_postgres()
        done = _wait_job(cluster, job["id"])
        assert replica.alive, replica.log()
        assert done["status"] == "completed", done
        assert rh.shared_log(tmp_path).count("outage-1") == 1  # the effect happened once
        events = rh.read_journal(cluster.url, job["session_id"])
        report = rh.audit_session(events, Counter(rh.shared_log(tmp_path)))
        assert report.problems == [] and report.run_finished == 1, report
        assert [report.lines[call] for call in report.interrupted] == ["outage-1"]
        print(f"job after the outage: attempts {done['attempts']}, output {done['result']}")
        # The operator's log: the outage is expected, so it says so in lines, not tracebacks.
        log = replica.log(every=True, tail=None)
        tracebacks = log.count("Traceback (most recent call last)")
        errors = [line for line in log.splitlines() if line.startswith("ERROR:")]
        assert tracebacks == 0, (
            f"the server log holds {tracebacks} tracebacks for a {started - stopped:.1f} s "
            f"store outage, logged as: {sorted(set(errors))}"
        )


@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_a_job_whose_store_connection_is_cut_once_is_resumed_not_failed(
    tmp_path: Path, pg_schema: str
) -> None:
    """The write of a job's tool result dies with its connection — what a PostgreSQL restart
    (or a proxy's, or a failover) does to every statement in flight — while the database
    itself is back at once. The error passes, so the job must stay resumable, as it does
    when its replica dies; it must not be recorded ``failed`` with its session, resumable,
    left interrupted for ever.

    To cut exactly that statement: the test holds the session's row (``FOR UPDATE``) so
    the write waits for it, then terminates the waiting backend (``pg_terminate_backend``:
    the same "terminating connection due to administrator command" a fast shutdown sends
    to every backend), then lets go of the row.
    """
    cluster = rh.Cluster(tmp_path, pg_schema, 1, step_seconds=1.0, lease=2.0, job_lease=2.0)
    (replica,) = cluster.replicas
    with contextlib.ExitStack() as closing:
        closing.callback(cluster.close)
        cluster.start()
        c = closing.enter_context(
            httpx.Client(base_url=replica.base_url, headers=cluster.headers(), timeout=10)
        )

        def cut_the_write(session_id: str, *, terminate: bool) -> list[int]:
            """Hold the session row until the replica's write waits for it; cut that write's
            connection (or, for the control, just let go of the row)."""
            cut: list[int] = []
            with rh.pg_connect() as db, rh.pg_connect() as admin:
                db.autocommit = False
                db.execute(f'SET search_path = "{pg_schema}"')
                db.execute("SELECT id FROM sessions WHERE id = %s FOR UPDATE", (session_id,))
                deadline = time.monotonic() + 20
                while not cut:
                    # The journal append locks the row to take the next seq (other
                    # writers of the row, such as the status, lock it too: not those).
                    waiting = admin.execute(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                        "AND wait_event_type = 'Lock' AND query LIKE '%%last_seq%%FOR UPDATE%%'",
                        (replica.app,),
                    ).fetchall()
                    if waiting:
                        cut = [pid for (pid,) in waiting]
                        if terminate:
                            for pid in cut:
                                # Waits (up to 10 s) until the backend is gone, so the
                                # statement cannot take the row after all.
                                admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
                        break
                    assert time.monotonic() < deadline, "the replica never waited for the row"
                    time.sleep(0.01)
                time.sleep(0.2)
                db.rollback()
            return cut

        # Positive control: the write waits for the row, then goes through.
        job = c.post("/v1/jobs", json={"input": "log waited-1"}).json()
        _wait_tool_running(pg_schema, job["session_id"])
        assert cut_the_write(job["session_id"], terminate=False)
        done = _wait_job(cluster, job["id"])
        assert (done["status"], done["attempts"]) == ("completed", 1), done

        job = c.post("/v1/jobs", json={"input": "log cut-1"}).json()
        _wait_tool_running(pg_schema, job["session_id"])
        assert cut_the_write(job["session_id"], terminate=True)
        done = _wait_job(cluster, job["id"], timeout=60)
        time.sleep(3)  # more than the job's lease: a resumable job would be claimed again
        done = rh.wait_jobs_done(cluster, [job["id"]], 30)[job["id"]]
        events = rh.read_journal(cluster.url, job["session_id"])
        print(f"job: {done['status']} after {done['attempts']} claim(s): {done['result']}")
        print(f"its journal: {[e.type for e in events]}")
        assert replica.alive, replica.log()
        assert rh.shared_log(tmp_path).count("cut-1") == 1
        assert done["status"] == "completed", (
            f"a passing store error ended the job {done['status']!r} ({done['result']}); "
            f"its session is left at {[e.type for e in events][-1]!r}, no run_finished"
        )
        assert [e.type for e in events].count("run_finished") == 1


# -- SQLite: a full disk, a read-only file ------------------------------------------------


@pytest.mark.timeout(120)
def test_sqlite_on_a_full_disk_stops_in_one_line_and_resumes_once_space_is_freed(
    tmp_path: Path,
) -> None:
    with crash.small_filesystem(tmp_path / "small", megabytes=16) as small:
        # Positive control: the whole run fits on this filesystem.
        control = crash.make_demo(
            tmp_path / "control", store_url=f"sqlite:///{small}/control.db", step_seconds=0.0
        )
        proc = control.start(session=uuid.uuid4().hex)
        assert proc.wait() == 0, proc.describe()

        db = small / "koboi.db"
        demo = crash.make_demo(tmp_path / "fault", store_url=f"sqlite:///{db}", step_seconds=0.05)
        session = uuid.uuid4().hex
        proc = demo.start(session=session)
        _wait_lines(demo, proc, 8)
        _, before = demo.journal(session)
        filler = crash.fill_filesystem(small)
        line = _stopped_with_one_clear_line(proc, str(db))
        print(f"disk full: the run said: {line}")
        assert "full" in line, line
        filler.unlink()
        report = _resumed_and_sound(demo, session, before)
        print(f"resumed: in doubt {[report.line_of[c] for c in report.interrupted]}")


@pytest.mark.timeout(120)
def test_a_read_only_sqlite_file_stops_the_run_in_one_line_and_it_resumes_once_writable(
    tmp_path: Path,
) -> None:
    with crash.small_filesystem(tmp_path / "small", megabytes=16) as small:
        db = small / "koboi.db"
        demo = crash.make_demo(tmp_path / "fault", store_url=f"sqlite:///{db}", step_seconds=0.05)
        # Positive control: the same files, writable the whole run.
        control = crash.make_demo(
            tmp_path / "control", store_url=f"sqlite:///{small}/control.db", step_seconds=0.0
        )
        proc = control.start(session=uuid.uuid4().hex)
        assert proc.wait() == 0, proc.describe()

        session = uuid.uuid4().hex
        proc = demo.start(session=session)
        _wait_lines(demo, proc, 8)
        _, before = demo.journal(session)
        # Immutable: even root, even through the descriptors the run already holds.
        files = [p for p in (db, db.with_name("koboi.db-wal")) if p.exists()]
        crash.set_immutable(files, True)
        try:
            line = _stopped_with_one_clear_line(proc, str(db))
        finally:
            crash.set_immutable(files, False)
        print(f"read-only: the run said: {line}")
        report = _resumed_and_sound(demo, session, before)
        print(f"resumed: in doubt {[report.line_of[c] for c in report.interrupted]}")
