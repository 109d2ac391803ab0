"""SIGKILL the crash demo at many points, resume it in a new process, and audit the result.

Each test runs real ``koboi run`` processes on a copy of ``configs/crash_demo.yaml``
(fast steps, the default 30 s lease — a resumer on this host takes over from the
killed process at once, so no test waits for a lease to expire — and its own store) and checks the log file the
non-idempotent ``append_log`` tool writes against the journal:

* the resumed run completes with the same answer as an uninterrupted run;
* no line is in the log twice (no non-idempotent call ran twice), no call was
  started twice, every call the journal records as finished wrote its line
  exactly once;
* a line is missing only for a call that was in doubt when the process died
  (started, never finished): with ``agent.on_interrupted_tool: tell_model`` it is
  not run again, and the journal has a ``tool_call_interrupted`` event for it.

Precise kill points use the demo tool's test hooks (koboi_tools_demo.hooks): the
process writes a marker file and sleeps at the point, and the test kills it there.
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_spec = importlib.util.spec_from_file_location(
    "crash_helpers", Path(__file__).with_name("crash_helpers.py")
)
assert _spec is not None and _spec.loader is not None
crash = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("crash_helpers", crash)
_spec.loader.exec_module(crash)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "sqlite":
        yield "sqlite:///.koboi/koboi.db"
        return
    try:
        with crash.postgres_schema() as url:
            yield url
    except ImportError as exc:  # pragma: no cover - psycopg comes with koboi-store-sql
        pytest.skip(f"psycopg is not installed: {exc}")


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The result of an uninterrupted run (what every resumed run must end with)."""
    demo = crash.make_demo(tmp_path_factory.mktemp("baseline"), step_seconds=0.0)
    proc = demo.start()
    assert proc.wait() == 0, proc.describe()
    result = proc.result()
    assert demo.log_lines() == [f"step-{i}" for i in range(1, crash.STEPS + 1)]
    _, events = demo.journal(result["session_id"])
    report = crash.audit(events, demo.log_lines())
    crash.assert_sound(report, expected_output=result["output"])
    assert not report.interrupted
    return result


def _resume_to_the_end(demo: Any, ref: str = "last") -> dict[str, Any]:
    proc = demo.resume(ref)
    assert proc.wait() == 0, proc.describe()
    result: dict[str, Any] = proc.result()
    assert result["outcome"] == "completed", result
    return result


def _check(demo: Any, result: dict[str, Any], baseline: dict[str, Any]) -> Any:
    assert result["output"] == baseline["output"]
    _, events = demo.journal(result["session_id"])
    report = crash.audit(events, demo.log_lines())
    crash.assert_sound(report, expected_output=baseline["output"])
    return report


@pytest.mark.timeout(120)
def test_an_uninterrupted_run_writes_every_line_once(baseline: dict[str, Any]) -> None:
    assert baseline["outcome"] == "completed"
    assert baseline["output"] == crash.FINAL_OUTPUT


@pytest.mark.timeout(180)
def test_killed_at_random_times_then_resumed(
    tmp_path: Path, store_url: str, baseline: dict[str, Any]
) -> None:
    """Kill the first run and up to two resumed runs at random times; the last resume completes."""
    # KOBOI_TEST_SEED replays a failing run's kill times.
    seed = int(os.environ.get("KOBOI_TEST_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    print(f"random seed {seed}")
    demo = crash.make_demo(tmp_path, store_url=store_url, step_seconds=0.03)
    proc = demo.start()
    # Wait for the session to exist, so there is something to resume.
    deadline = time.monotonic() + 60
    while not demo.log.exists() and time.monotonic() < deadline:
        assert proc.popen.poll() is None, proc.describe()
        time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 1.5))
    proc.kill()
    kills = 1
    while True:
        proc = demo.resume()
        if kills < 3 and rng.random() < 0.7:
            time.sleep(rng.uniform(0.4, 1.5))  # the process needs ~0.5-1 s to start
            if proc.popen.poll() is None:
                proc.kill()
                kills += 1
                info, events = demo.journal()
                if events[-1].type != "run_finished":
                    continue
                # The kill came after the run had finished (while the process was
                # exiting): nothing is left to resume; the journal has the result.
                result = {"session_id": info.id, **events[-1].data}
                break
        assert proc.wait() == 0, proc.describe()
        result = proc.result()
        break
    report = _check(demo, result, baseline)
    _, events = demo.journal(result["session_id"])
    resumed = [e for e in events if e.type == "run_resumed"]
    assert len(resumed) >= 1
    print(
        f"seed {seed}: {kills} kill(s), in doubt: {[report.line_of[c] for c in report.interrupted]}"
    )


@pytest.mark.timeout(120)
def test_killed_between_tool_started_and_its_effect(
    tmp_path: Path, store_url: str, baseline: dict[str, Any]
) -> None:
    """Started, never wrote: not run again (tell_model), its line is missing, it is reported."""
    demo = crash.make_demo(tmp_path, store_url=store_url)
    proc = demo.start(env={"KOBOI_DEMO_PAUSE_BEFORE_EFFECT": "step-17"})
    assert demo.wait_for_marker(proc) == "before step-17"
    proc.kill()
    _, events = demo.journal()
    assert events[-1].type == "tool_call_started", events[-1]
    assert events[-1].data["arguments"] == {"line": "step-17"}
    assert demo.log_lines() == [f"step-{i}" for i in range(1, 17)]

    report = _check(demo, _resume_to_the_end(demo), baseline)
    assert [report.line_of[c] for c in report.interrupted] == ["step-17"]
    assert report.missing_lines == {"step-17"}
    assert len(report.lines) == crash.STEPS - 1


@pytest.mark.timeout(120)
def test_killed_between_the_effect_and_tool_finished(
    tmp_path: Path, store_url: str, baseline: dict[str, Any]
) -> None:
    """Wrote, never reported: not run again, so its line is in the log exactly once."""
    demo = crash.make_demo(tmp_path, store_url=store_url)
    proc = demo.start(env={"KOBOI_DEMO_PAUSE_AFTER_EFFECT": "step-23"})
    assert demo.wait_for_marker(proc) == "after step-23"
    proc.kill()
    _, events = demo.journal()
    assert events[-1].type == "tool_call_started", events[-1]
    assert demo.log_lines() == [f"step-{i}" for i in range(1, 24)]

    report = _check(demo, _resume_to_the_end(demo), baseline)
    assert [report.line_of[c] for c in report.interrupted] == ["step-23"]
    assert report.missing_lines == set()
    assert report.lines == [f"step-{i}" for i in range(1, crash.STEPS + 1)]


@pytest.mark.timeout(120)
def test_killed_during_a_model_call(
    tmp_path: Path, store_url: str, baseline: dict[str, Any]
) -> None:
    """The model call is asked again; nothing is in doubt, every line is there once."""
    demo = crash.make_demo(tmp_path, store_url=store_url)
    proc = demo.start(env={"KOBOI_DEMO_PAUSE_IN_MODEL_CALL": "31"})
    assert demo.wait_for_marker(proc) == "model 31"
    proc.kill()
    _, events = demo.journal()
    assert (events[-1].type, events[-1].data) == ("model_call_started", {"step": 31})
    assert demo.log_lines() == [f"step-{i}" for i in range(1, 31)]

    result = _resume_to_the_end(demo)
    report = _check(demo, result, baseline)
    assert report.interrupted == []
    assert report.lines == [f"step-{i}" for i in range(1, crash.STEPS + 1)]
    _, events = demo.journal(result["session_id"])
    asked = Counter(e.data["step"] for e in events if e.type == "model_call_started")
    assert asked[31] == 2 and set(asked.values()) == {1, 2}


@pytest.mark.timeout(120)
def test_two_resumers_at_once_exactly_one_runs(
    tmp_path: Path, store_url: str, baseline: dict[str, Any]
) -> None:
    """Two processes resume one interrupted session at once: one completes, the other
    exits 1 ("is being run by") and writes nothing."""
    demo = crash.make_demo(tmp_path, store_url=store_url)
    proc = demo.start(env={"KOBOI_DEMO_PAUSE_AFTER_EFFECT": "step-5"})
    demo.wait_for_marker(proc)
    proc.kill()
    info, before = demo.journal()

    # Slow steps: the winner holds the session for seconds, while the loser starts.
    slow = {"KOBOI_DEMO_STEP_SECONDS": "0.1"}
    first, second = demo.resume(env=slow), demo.resume(env=slow)
    codes = {first.wait(): first, second.wait(): second}
    assert sorted(codes) == [0, 1], f"{first.describe()}\n{second.describe()}"
    winner, loser = codes[0], codes[1]
    assert "is being run by" in loser.stderr.read_text(encoding="utf-8"), loser.describe()
    assert "Traceback" not in loser.stderr.read_text(encoding="utf-8")

    result = winner.result()
    report = _check(demo, result, baseline)
    assert [report.line_of[c] for c in report.interrupted] == ["step-5"]
    _, events = demo.journal(info.id)
    assert events[: len(before)] == before
    # Everything after the crash was written by the winner alone.
    resumed = [e for e in events if e.type == "run_resumed"]
    assert len(resumed) == 1
    assert resumed[0].seq == len(before) + 1
    assert f":{winner.popen.pid}:" in resumed[0].data["holder"], resumed[0].data
    assert f":{loser.popen.pid}:" not in str([e.data for e in events])
    assert [e.type for e in events].count("run_finished") == 1
