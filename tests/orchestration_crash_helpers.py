"""SIGKILL trials of an orchestrated run: ``configs/orchestration_demo.yaml`` (five nodes,
two parallel branches, a conditional edge; every node appends to a log through the
non-idempotent ``append_log``), killed at a random point and resumed in a new process.

Shared by ``tests/test_orchestration_crash.py`` and
``benchmarks/orchestration/bench_orchestration.py`` (both load this file by path).
Every run is a real ``koboi`` process on a copy of the config in a directory of its
own, with its own SQLite store.
"""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIG = ROOT / "configs" / "orchestration_demo.yaml"
QUESTION = "Why are there tides?"
#: The lines each node appends, in order.
LINES = {
    "intake": ["intake-1"],
    "moon": ["moon-1", "moon-2"],
    "sun": ["sun-1"],
    "review": ["review-1"],
    "publish": ["publish-1"],
}
NODES = list(LINES)

_spec = importlib.util.spec_from_file_location(
    "crash_helpers", Path(__file__).with_name("crash_helpers.py")
)
assert _spec is not None and _spec.loader is not None
crash = sys.modules.get("crash_helpers") or importlib.util.module_from_spec(_spec)
if "crash_helpers" not in sys.modules:
    sys.modules["crash_helpers"] = crash
    _spec.loader.exec_module(crash)
Proc = crash.Proc


class Demo(crash.Demo):
    """One copy of the orchestration demo: the crash demo's process handling (start,
    SIGKILL, pause markers), with this demo's config, question and log."""

    @property
    def log(self) -> Path:
        return Path(self.directory) / ".koboi" / "orchestration_demo" / "crash_demo.log"

    def start(self, session: str | None = None, env: dict[str, str] | None = None) -> Any:
        argv = [sys.executable, "-m", "koboi_cli", "run", str(self.config), "-m", QUESTION]
        return self._popen([*argv, "--yes", "--json", "--session", str(session)], "run", env)

    def resume(self, ref: str = "last", env: dict[str, str] | None = None) -> Any:
        argv = [sys.executable, "-m", "koboi_cli", "run", str(self.config), "--resume", ref]
        return self._popen([*argv, "--yes", "--json"], "resume", env)

    def journals(self, session: str) -> tuple[list[Any], dict[str, list[Any]]]:
        """The root session's events, and each node's child session's events by node."""
        return anyio.run(self._journals, session)

    async def _journals(self, session: str) -> tuple[list[Any], dict[str, list[Any]]]:
        from koboi.errors import SessionNotFound
        from koboi.subagents import child_session_id
        from koboi_store_sql.plugin import create_store

        store = create_store(self.store_url, self.directory)
        async with store:
            try:
                root = await store.read(session)
            except SessionNotFound:
                return [], {}
            children: dict[str, list[Any]] = {}
            for node in NODES:
                try:
                    # Node sessions derive from the run's start (seq 1: the session's first run).
                    key = f"1:node:{node}"
                    children[node] = await store.read(child_session_id(session, key))
                except SessionNotFound:
                    children[node] = []
            return root, children


def make_demo(directory: Path, *, step_seconds: float = 0.05) -> Demo:
    directory.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    data["store"] = {"url": "sqlite:///.koboi/koboi.db"}
    config = directory / "orchestration_demo.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOBOI_DEMO_")}
    env.pop("KOBOI_STORE", None)
    env["KOBOI_DEMO_STEP_SECONDS"] = str(step_seconds)
    env["KOBOI_DEMO_PAUSE_MARKER"] = str(directory / "paused.marker")
    env["KOBOI_STRICT_PLUGINS"] = "1"
    return Demo(directory, config, "sqlite:///.koboi/koboi.db", 30.0, env)


# -- one trial -----------------------------------------------------------------------


#: Points a hook stops the process at, before its SIGKILL: (variable, value).
HOOK_POINTS: list[tuple[str, str]] = [
    *(("KOBOI_DEMO_PAUSE_BEFORE_EFFECT", line) for lines in LINES.values() for line in lines),
    *(("KOBOI_DEMO_PAUSE_AFTER_EFFECT", line) for lines in LINES.values() for line in lines),
    ("KOBOI_DEMO_PAUSE_IN_MODEL_CALL", "1"),
    ("KOBOI_DEMO_PAUSE_IN_MODEL_CALL", "2"),
    ("KOBOI_DEMO_PAUSE_IN_MODEL_CALL", "3"),
]


@dataclass
class TrialResult:
    """What one run, killed again and again and resumed to its end, showed."""

    kills: list[str] = field(default_factory=list)
    output: str | None = None
    outcome: str | None = None
    finished_before: list[str] = field(default_factory=list)
    in_doubt: list[str] = field(default_factory=list)
    resume_seconds: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: The seed of the run's random choices (to replay it).
    seed: int = 0
    #: Kills ``may_kill`` granted that did not happen (the run ended first).
    unused_kills: int = 0


def _hook(
    rng: random.Random, written: list[str], passed: set[str], first: bool
) -> tuple[dict[str, str], str]:
    """A random point to stop at that the run has not passed yet: a model call (in the
    first process only: a resumed one may have no call left at that step), or the effect
    of a line not written yet and not left in doubt (``passed``: it will not run again)."""
    points = [
        (variable, value)
        for variable, value in HOOK_POINTS
        if ("MODEL_CALL" in variable and first)
        or ("MODEL_CALL" not in variable and value not in written and value not in passed)
    ]
    if not points:
        return {}, "nothing left"
    variable, value = rng.choice(points)
    return {variable: value}, f"{variable.removeprefix('KOBOI_DEMO_PAUSE_').lower()} {value}"


def _stop(demo: Demo, proc: Any, rng: random.Random, env: dict[str, str], step: float) -> bool:
    """Wait for the pause point (or a random time), then SIGKILL; False when the process
    ended first (it finished the run)."""
    if env:
        try:
            demo.wait_for_marker(proc)
        except AssertionError:
            return False
        demo.marker.unlink()
    else:
        deadline = time.monotonic() + 60
        while not demo.log.exists() and time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                return False
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 8 * step))
    proc.kill()
    # Killed, or it had just ended by itself (then the caller reads how).
    return bool(proc.popen.returncode == -signal.SIGKILL)


def trial(
    directory: Path,
    rng: random.Random,
    *,
    kills: int = 4,
    step_seconds: float = 0.05,
    may_kill: Callable[[], bool] = lambda: True,
) -> TrialResult:
    """Start the demo and SIGKILL it at a random point (a random time, or a random test
    hook); resume it in a new process and kill that one too, up to ``kills`` times (and
    while ``may_kill()`` allows: a budget shared by concurrent trials); then resume it to
    its end and audit the whole story."""
    demo = make_demo(directory, step_seconds=step_seconds)
    session = uuid.uuid4().hex
    result = TrialResult()
    before: dict[str, int] = {}
    finished = None  # the process that ran the run to its end, when one did
    passed: set[str] = set()
    granted = 1  # the first kill: granted by the caller
    for attempt in range(kills):
        if attempt > 0:
            if not may_kill():
                break
            granted += 1
        if attempt == 0 and rng.random() < 0.5:
            env, point = {}, "random time"
        else:
            env, point = _hook(rng, demo.log_lines(), passed, attempt == 0)
            if not env:
                break
            if "BEFORE_EFFECT" in next(iter(env)):
                passed.add(next(iter(env.values())))  # killed before it: left in doubt
        proc = demo.start(session, env) if attempt == 0 else demo.resume(session, env)
        if not _stop(demo, proc, rng, env, step_seconds):
            finished = proc  # it finished first: nothing left to kill
            break
        result.kills.append(point)
        root, children = demo.journals(session)
        for node in {str(e.data["node"]) for e in root if e.type == "orchestration.node_finished"}:
            if node not in before:
                before[node] = len(children[node])
                result.finished_before.append(node)
    result.unused_kills = granted - len(result.kills)
    root, _ = demo.journals(session)
    if finished is None and root and root[-1].type == "run_finished":
        # The last kill landed after the run's end was committed (the process was on its
        # way out): there is rightly nothing to resume; the journal holds the result.
        result.output, result.outcome = root[-1].data.get("output"), root[-1].data.get("outcome")
    elif finished is None:
        began = time.monotonic()
        finished = demo.resume(session)
        code = finished.wait()
        result.resume_seconds.append(time.monotonic() - began)
        if code != 0:
            result.problems.append(f"the last resume failed:\n{finished.describe()}")
            return result
    elif finished.popen.returncode != 0:
        result.problems.append(f"a run failed:\n{finished.describe()}")
        return result
    if finished is not None:
        data = finished.result()
        result.output, result.outcome = data.get("output"), data.get("outcome")
    root, children = demo.journals(session)
    result.problems += audit(root, children, before, demo.log_lines())
    result.in_doubt = [
        f"{e.data['name']}:{node}"
        for node, events in children.items()
        for e in events
        if e.type == "tool_call_interrupted"
    ]
    return result


def audit(
    root: list[Any], children: dict[str, list[Any]], before: dict[str, int], lines: list[str]
) -> list[str]:
    """Every invariant of a killed-and-resumed orchestrated run; the problems found."""
    problems: list[str] = []
    started = Counter(str(e.data["node"]) for e in root if e.type == "orchestration.node_started")
    finished = Counter(str(e.data["node"]) for e in root if e.type == "orchestration.node_finished")
    if any(n > 1 for n in started.values()):
        problems.append(f"a node was started twice: {dict(started)}")
    if finished != Counter(NODES):
        problems.append(f"each node must finish once: {dict(finished)}")
    for node in before:
        if len(children[node]) != before[node]:
            problems.append(
                f"node {node} had finished before the kill and ran again "
                f"({before[node]} -> {len(children[node])} events)"
            )
    in_doubt: set[str] = set()
    for node, events in children.items():
        runs = [e.type for e in events].count("run_started")
        if runs != 1:
            problems.append(f"node {node}'s child session has {runs} run_started")
        calls = Counter(str(e.data["call_id"]) for e in events if e.type == "tool_call_started")
        twice = [c for c, n in calls.items() if n > 1]
        if twice:
            problems.append(f"node {node}: tool calls started twice: {twice}")
        doubtful = {str(e.data["call_id"]) for e in events if e.type == "tool_call_interrupted"}
        for event in events:
            if event.type == "tool_call_started" and event.data["call_id"] in doubtful:
                in_doubt.add(str(event.data["arguments"]["line"]))
    counts = Counter(lines)
    duplicates = {line: n for line, n in counts.items() if n > 1}
    if duplicates:
        problems.append(
            f"lines appended more than once (a non-idempotent call ran twice): {duplicates}"
        )
    expected = {line for node_lines in LINES.values() for line in node_lines}
    missing = expected - set(lines)
    if not missing <= in_doubt:
        problems.append(f"lines missing that were not in doubt: {sorted(missing - in_doubt)}")
    strangers = set(lines) - expected
    if strangers:
        problems.append(f"lines nobody asked for: {sorted(strangers)}")
    return problems


def baseline(directory: Path, *, step_seconds: float = 0.0) -> dict[str, Any]:
    """An uninterrupted run: its ``--json`` result (what every resumed run must end with)."""
    demo = make_demo(directory, step_seconds=step_seconds)
    proc = demo.start(uuid.uuid4().hex)
    code = proc.wait()
    if code != 0:
        raise AssertionError(proc.describe())
    result: dict[str, Any] = proc.result()
    expected = [line for node_lines in LINES.values() for line in node_lines]
    if sorted(demo.log_lines()) != sorted(expected):
        raise AssertionError(f"the uninterrupted run wrote {demo.log_lines()}")
    return result
