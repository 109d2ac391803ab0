"""SIGKILL an orchestrated run at random points, resume it in a new process, audit it.

``configs/orchestration_demo.yaml``: five nodes, two of them parallel branches, a
conditional edge; every node appends lines to a log through the non-idempotent
``append_log``. Each trial is one run on a store of its own, in real ``koboi run``
processes: the run is killed at a random point (a random time, or a random test
hook), resumed with ``--resume`` in a new process that is killed too, and so on
(KILLS times), then resumed to its end; the test checks
(tests/orchestration_crash_helpers.py):

* the resumed run completes with the output of an uninterrupted run;
* no node that had finished before the kill runs again (its child session gets no
  new event), no node's child run is started twice;
* no non-idempotent call runs twice: no line is in the log twice, no call is
  started twice; a line is missing only for a call that was in doubt when the
  process died (not run again: the journal has its ``tool_call_interrupted``).

The trials run a few at a time (each mostly waits on process start-up);
``KOBOI_TEST_SEED`` replays a failing set.
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

_spec = importlib.util.spec_from_file_location(
    "orchestration_crash_helpers", Path(__file__).with_name("orchestration_crash_helpers.py")
)
assert _spec is not None and _spec.loader is not None
helpers = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("orchestration_crash_helpers", helpers)
_spec.loader.exec_module(helpers)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: At least this many SIGKILLs, each of a real process at a random point: runs of
#: up to KILLS kills each are started (AT_ONCE at a time) until they add up to it.
KILLS_WANTED = 20
KILLS = 6
AT_ONCE = 3


@pytest.mark.timeout(300)
def test_killed_at_random_points_then_resumed(tmp_path: Path) -> None:
    seed = int(os.environ.get("KOBOI_TEST_SEED") or random.randrange(1 << 30))
    print(f"random seed {seed}")
    expected = helpers.baseline(tmp_path / "baseline")
    assert expected["outcome"] == "completed"
    seeds = random.Random(seed)
    results: list[Any] = []
    lock = threading.Lock()
    budget = [KILLS_WANTED]

    def may_kill() -> bool:
        """Take one kill of the budget (each kill attempt of every run asks first)."""
        with lock:
            if budget[0] <= 0:
                return False
            budget[0] -= 1
            return True

    def worker(index: int) -> None:
        while may_kill():  # a run's first kill
            with lock:
                trial_seed = seeds.randrange(1 << 30)
                directory = tmp_path / f"run-{index}-{trial_seed}"
            result = helpers.trial(
                directory, random.Random(trial_seed), kills=KILLS, may_kill=may_kill
            )
            result.seed = trial_seed
            with lock:
                results.append(result)
                # A planned kill that did not happen (the run ended first) is given back.
                budget[0] += result.unused_kills

    with ThreadPoolExecutor(AT_ONCE) as pool:
        list(pool.map(worker, range(AT_ONCE)))
    kills = [k for r in results for k in r.kills]
    print(f"{len(kills)} kills in {len(results)} runs: {kills}")
    assert len(kills) >= KILLS_WANTED, kills
    for result in results:
        where = f"run (kills {result.kills}, seed {result.seed})"
        assert not result.problems, f"{where}: {result.problems}"
        assert result.outcome == "completed", where
        assert result.output == expected["output"], where
    # The trials did cover the interesting cases: finished nodes, calls in doubt.
    assert any(r.finished_before for r in results)
    assert any(r.in_doubt for r in results) or not any(k.startswith("after_effect") for k in kills)
