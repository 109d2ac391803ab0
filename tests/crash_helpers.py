"""Helpers of the SIGKILL + resume tests and benchmark: run the crash demo, kill it, check it.

Shared by ``tests/test_crash_resume.py`` and ``benchmarks/crash_recovery/bench_crash.py``
(both load this file by path). Every run is a real ``koboi`` process on a copy of
``configs/crash_demo.yaml`` in its own directory, with its own store.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIG = ROOT / "configs" / "crash_demo.yaml"
STEPS = 50
FINAL_OUTPUT = "Wrote 50 lines."
LOG_NAME = "crash_demo.log"
POSTGRES_URL = os.environ.get(
    "KOBOI_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
_DEMO_ENV = (
    "KOBOI_DEMO_STEP_SECONDS",
    "KOBOI_DEMO_PAUSE_BEFORE_EFFECT",
    "KOBOI_DEMO_PAUSE_AFTER_EFFECT",
    "KOBOI_DEMO_PAUSE_IN_MODEL_CALL",
    "KOBOI_DEMO_PAUSE_MARKER",
    "KOBOI_DEMO_PAUSE_SECONDS",
    "KOBOI_STORE",
)

# Used while `koboi run --resume` is not available: the same thing through the library.
_RESUME_SCRIPT = """
import json, sys
import anyio
from koboi.agent import KoboiAgent
from koboi.errors import KoboiError
from koboi_cli.approver import AssumeYesApprover
from koboi_cli.host import get_host

async def main():
    agent = KoboiAgent.from_config(sys.argv[1], host=get_host(), approver=AssumeYesApprover())
    async with agent:
        return await agent.resume_run(sys.argv[2])

try:
    result = anyio.run(main)
except KoboiError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(1)
print(json.dumps({"session_id": result.session_id, "outcome": result.outcome,
                  "output": result.output, "steps": result.steps, "error": result.error}))
sys.exit(0 if result.outcome == "completed" else 1)
"""


@functools.cache
def cli_has_resume() -> bool:
    """True once ``koboi run`` has ``--resume`` (otherwise resume through the library)."""
    proc = subprocess.run(
        [sys.executable, "-m", "koboi_cli", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return "--resume" in proc.stdout


@dataclass
class Demo:
    """One copy of the crash demo: its directory, config, store and environment."""

    directory: Path
    config: Path
    store_url: str
    lease_seconds: float
    env: dict[str, str]
    runs: int = 0

    @property
    def log(self) -> Path:
        return self.directory / ".koboi" / "crash_demo" / LOG_NAME

    @property
    def marker(self) -> Path:
        return self.directory / "paused.marker"

    def log_lines(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").splitlines() if self.log.exists() else []

    def _output(self, kind: str) -> tuple[Path, Path]:
        self.runs += 1
        return (
            self.directory / f"{self.runs:02d}-{kind}.out",
            self.directory / f"{self.runs:02d}-{kind}.err",
        )

    def _popen(self, argv: Sequence[str], kind: str, env: Mapping[str, str] | None) -> Proc:
        out, err = self._output(kind)
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            started = time.time()
            popen = subprocess.Popen(
                list(argv),
                stdout=stdout,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                env={**self.env, **(env or {})},
                cwd=self.directory,
            )
        return Proc(popen, out, err, started)

    def start(self, *, session: str | None = None, env: Mapping[str, str] | None = None) -> Proc:
        """``koboi run CONFIG -m go --yes --json`` in a new process."""
        argv = [sys.executable, "-m", "koboi_cli", "run", str(self.config), "-m", "go"]
        argv += ["--yes", "--json"]
        if session is not None:
            argv += ["--session", session]
        return self._popen(argv, "run", env)

    def resume(self, ref: str = "last", *, env: Mapping[str, str] | None = None) -> Proc:
        """``koboi run CONFIG --resume REF --yes --json`` in a new process."""
        if cli_has_resume():
            argv = [sys.executable, "-m", "koboi_cli", "run", str(self.config)]
            argv += ["--resume", ref, "--yes", "--json"]
        else:
            argv = [sys.executable, "-c", _RESUME_SCRIPT, str(self.config), ref]
        return self._popen(argv, "resume", env)

    def wait_for_marker(self, proc: Proc, timeout: float = 60) -> str:
        """Wait until a pause hook fired in ``proc``; return the marker's text."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.marker.exists():
                text = self.marker.read_text(encoding="utf-8").strip()
                if text:
                    return text
            if proc.popen.poll() is not None:
                raise AssertionError(f"the process ended before pausing:\n{proc.describe()}")
            time.sleep(0.01)
        raise AssertionError(f"no pause marker after {timeout} s:\n{proc.describe()}")

    # -- the journal -----------------------------------------------------------

    def journal(self, ref: str = "last") -> tuple[Any, list[Any]]:
        """(SessionInfo, events) of a session, read through the store API."""
        return anyio.run(self._journal, ref)

    async def _journal(self, ref: str) -> tuple[Any, list[Any]]:
        from koboi_store_sql.plugin import create_store

        store = create_store(self.store_url, self.directory)
        async with store:
            info = await store.resolve_session(ref)
            return info, await store.read(info.id)

    def sessions(self) -> list[Any]:
        async def read() -> list[Any]:
            from koboi_store_sql.plugin import create_store

            store = create_store(self.store_url, self.directory)
            async with store:
                return await store.list_sessions()

        return anyio.run(read)


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path
    #: time.time() just before the process was started.
    started_at: float

    def kill(self) -> float:
        """SIGKILL; return the time of the kill."""
        at = time.time()
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=30)
        return at

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"the process did not end in {timeout} s:\n{self.describe()}"
            ) from None

    def result(self) -> dict[str, Any]:
        """The ``--json`` object the process printed (its last line)."""
        lines = self.stdout.read_text(encoding="utf-8").strip().splitlines()
        if not lines:
            raise AssertionError(f"no JSON result:\n{self.describe()}")
        data: dict[str, Any] = json.loads(lines[-1])
        return data

    def describe(self) -> str:
        err = self.stderr.read_text(encoding="utf-8", errors="replace")
        err_lines = [ln for ln in err.splitlines() if "without asking (--yes)" not in ln]
        out = self.stdout.read_text(encoding="utf-8", errors="replace")
        return (
            f"pid {self.popen.pid} exit {self.popen.returncode}\n"
            f"stdout: {out[-2000:]}\nstderr: {chr(10).join(err_lines)[-4000:]}"
        )


def make_demo(
    directory: Path,
    *,
    store_url: str = "sqlite:///.koboi/koboi.db",
    step_seconds: float = 0.03,
    lease_seconds: float = 30.0,
) -> Demo:
    """Copy the demo config into ``directory`` with a fast step, ``lease_seconds`` and ``store_url``."""
    directory.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    data["agent"]["lease_seconds"] = lease_seconds
    data["store"] = {"url": store_url}
    config = directory / "crash_demo.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in _DEMO_ENV}
    env["KOBOI_DEMO_STEP_SECONDS"] = str(step_seconds)
    env["KOBOI_DEMO_PAUSE_MARKER"] = str(directory / "paused.marker")
    env["KOBOI_STRICT_PLUGINS"] = "1"
    return Demo(directory, config, store_url, lease_seconds, env)


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A private schema on the test server (dropped after); yields the store URL using it."""
    import psycopg

    schema = f"koboi_crash_{uuid.uuid4().hex[:10]}"
    conninfo = POSTGRES_URL.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield f"{POSTGRES_URL}?options={quote(f'-csearch_path={schema}')}"
        finally:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


# -- what the journal and the log say ------------------------------------------


@dataclass
class Audit:
    """What a finished demo session's journal and log file show."""

    lines: list[str]
    #: call id -> the line it was asked to append.
    line_of: dict[str, str]
    started: Counter[str]
    finished: list[str]
    interrupted: list[str]
    refused: list[str]
    #: Lines present more than once (a non-idempotent call ran twice).
    duplicates: dict[str, int]
    #: Calls the journal records as finished whose line is not exactly once in the log.
    lost_completed: list[str]
    #: Calls started more than once.
    restarted: list[str]
    #: model_call_finished count per step.
    model_steps: Counter[int]
    outcome: str | None
    output: str | None
    problems: list[str] = field(default_factory=list)

    @property
    def missing_lines(self) -> set[str]:
        return {f"step-{i}" for i in range(1, STEPS + 1)} - set(self.lines)


def audit(events: Sequence[Any], lines: list[str]) -> Audit:
    """Cross-check a session's journal against the log file it produced."""
    line_of: dict[str, str] = {}
    started: Counter[str] = Counter()
    finished: list[str] = []
    interrupted: list[str] = []
    refused: list[str] = []
    model_steps: Counter[int] = Counter()
    outcome = output = None
    problems: list[str] = []
    for expected, event in enumerate(events, start=1):
        if event.seq != expected:
            problems.append(f"seq {event.seq} where {expected} was expected")
            break
    for event in events:
        data = event.data
        if event.type == "model_call_finished":
            model_steps[int(data["step"])] += 1
            for call in data["response"].get("message", {}).get("tool_calls", []):
                line_of[call["id"]] = call.get("arguments", {}).get("line", "")
        elif event.type == "tool_call_started":
            started[data["call_id"]] += 1
        elif event.type == "tool_call_finished":
            finished.append(data["call_id"])
            if data.get("is_error"):
                problems.append(f"call {data['call_id']} failed: {data.get('content')}")
        elif event.type == "tool_call_interrupted":
            interrupted.append(data["call_id"])
        elif event.type == "tool_call_refused":
            refused.append(data["call_id"])
        elif event.type == "run_finished":
            outcome, output = data.get("outcome"), data.get("output")
    counts = Counter(lines)
    duplicates = {line: n for line, n in counts.items() if n > 1}
    lost = [c for c in finished if counts[line_of.get(c, "?")] != 1]
    restarted = [c for c, n in started.items() if n > 1]
    strangers = sorted(set(lines) - set(line_of.values()))
    if strangers:
        problems.append(f"lines nobody asked for: {strangers}")
    return Audit(
        lines=lines,
        line_of=line_of,
        started=started,
        finished=finished,
        interrupted=interrupted,
        refused=refused,
        duplicates=duplicates,
        lost_completed=lost,
        restarted=restarted,
        model_steps=model_steps,
        outcome=outcome,
        output=output,
        problems=problems,
    )


def assert_sound(a: Audit, *, expected_output: str = FINAL_OUTPUT) -> None:
    """The invariants every killed-and-resumed demo session must satisfy."""
    assert not a.problems, a.problems
    assert a.outcome == "completed", a.outcome
    assert a.output == expected_output
    # No non-idempotent call ran twice: the FILE has every line at most once...
    assert not a.duplicates, f"lines appended more than once: {a.duplicates}"
    # ...and no call was even started twice.
    assert not a.restarted, f"calls started more than once: {a.restarted}"
    # Every step was asked exactly once (a model call cut short is asked again, but
    # only one answer is ever recorded).
    assert sorted(a.model_steps) == list(range(1, STEPS + 2)), sorted(a.model_steps)
    assert set(a.model_steps.values()) == {1}, a.model_steps
    assert len(a.line_of) == STEPS
    # Each call has exactly one outcome: finished or interrupted (never both, never none).
    outcomes = Counter(a.finished + a.interrupted + a.refused)
    assert set(outcomes) == set(a.line_of), set(a.line_of) ^ set(outcomes)
    assert set(outcomes.values()) == {1}, outcomes
    assert not a.refused, a.refused
    # A call the journal records as finished wrote its line exactly once.
    assert not a.lost_completed, (
        f"finished calls whose line is not in the log once: {a.lost_completed}"
    )
    # A line can only be missing for a call that was in doubt (interrupted), never for
    # a finished one or one that never ran.
    interrupted_lines = {a.line_of[c] for c in a.interrupted}
    assert a.missing_lines <= interrupted_lines, (a.missing_lines, interrupted_lines)


# -- filesystem faults ---------------------------------------------------------------------


def kernel_feature_missing(what: str) -> None:
    """Fail when ``CI`` is set (these machines have the feature: a skip would hide a bug),
    skip otherwise."""
    import pytest

    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI is set, so this is a failure, not a skip)")
    pytest.skip(what)


@contextmanager
def small_filesystem(mountpoint: Path, megabytes: int = 8) -> Iterator[Path]:
    """A fresh ext4 filesystem of ``megabytes`` (a loop-mounted image, no reserved blocks)
    mounted at ``mountpoint``; unmounted after. Needs root (mount, loop devices)."""
    import shutil

    if os.geteuid() != 0 or not shutil.which("mkfs.ext4"):
        kernel_feature_missing("a loop-mounted filesystem needs root and mkfs.ext4")
    image = mountpoint.with_name(mountpoint.name + ".img")
    with open(image, "wb") as handle:
        handle.truncate(megabytes * 1024 * 1024)
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True, capture_output=True
    )
    mountpoint.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-o", "loop", str(image), str(mountpoint)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        image.unlink()
        kernel_feature_missing(f"cannot loop-mount a filesystem: {mounted.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["chattr", "-R", "-i", str(mountpoint)], capture_output=True)
        done = subprocess.run(["umount", str(mountpoint)], capture_output=True)
        if done.returncode != 0:  # something still holds a file open: detach lazily
            subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)
        image.unlink(missing_ok=True)


def fill_filesystem(directory: Path) -> Path:
    """Write ``directory/filler`` until the filesystem is full (not one byte more fits)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 65536, 4096, 512, 1):
            chunk = b"\0" * size
            while True:
                try:
                    if os.write(fd, chunk) < size:
                        break
                except OSError:
                    break
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
    return filler


def set_immutable(paths: Sequence[Path], on: bool) -> None:
    """``chattr +i`` / ``-i``: even root cannot write the files (open descriptors included)."""
    flag = "+i" if on else "-i"
    subprocess.run(["chattr", flag, *map(str, paths)], check=True, capture_output=True)


def error_lines(proc: Proc) -> list[str]:
    """What a failed ``koboi run`` told the user on stderr (the --yes notices left out)."""
    text = proc.stderr.read_text(encoding="utf-8", errors="replace")
    return [
        line
        for line in text.splitlines()
        if line.strip() and "without asking (--yes)" not in line and not line.startswith("note:")
    ]
