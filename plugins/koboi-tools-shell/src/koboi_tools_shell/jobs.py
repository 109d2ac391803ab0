"""Background jobs: commands that outlive the tool call that started them.

Where the jobs run
------------------
The agent loop awaits a tool call and moves on; no task group of the agent's
outlives the call, and a raw ``asyncio.create_task`` would tie a job to
whichever event loop happened to run the call (a test's, a server request's)
and escape structured concurrency. So the registry owns its own event loop:
a daemon thread, started on the first background job, runs
:class:`anyio.from_thread.BlockingPortal` in a task group. Each job is one
task there that holds a long-lived process from ``ctx.open_process`` — the
same confinement as a foreground command (process group, or the PID
namespace under ``restricted``) — under the job's own timeout. ``shell_kill``
cancels that task, and leaving the process's ``async with`` kills its whole
tree (under ``restricted`` the namespace dies with it), even in a cancelled
task. When the Python process exits, an ``atexit`` hook stops the loop, which
cancels every job the same way.

What a job prints
-----------------
The process's stderr goes to its stdout, a pipe koboi reads as data arrives,
keeping only the last ``max_output_bytes`` (:class:`TailBuffer`): nothing is
written to disk, and a chatty job costs a bounded amount of memory. Its stdin
is closed at once (it reads end-of-file, as from ``/dev/null``). When the
command exits, whatever it left running is killed with it, and what is still
in the pipe is read for a moment more.

Jobs belong to the session that started them and live in this process only:
they do not survive a restart (the journal still records each call and its
result).
"""

from __future__ import annotations

import atexit
import contextlib
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal

from koboi.errors import ToolError
from koboi.sandbox import SandboxProcess
from koboi.tools import ToolContext
from koboi_tools_shell.text import decode_output

#: Finished jobs kept for ``shell_status`` (all sessions together); the oldest go first.
MAX_FINISHED_JOBS = 64
#: How long ``shell_kill`` waits for the job's processes to be gone.
KILL_WAIT_SECONDS = 10.0
#: After the command exits (and what it left is killed), how long to read what is
#: still in the pipe: a process that escaped the group may hold it open.
_DRAIN_GRACE = 2.0
#: The shell every job runs in.
_SHELL = "/bin/sh"


class TailBuffer:
    """The last ``limit`` bytes of an output, and how many bytes came in all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._data = bytearray()
        self._total = 0
        self._lock = threading.Lock()  # fed in the jobs' thread, read in the agent's

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            self._total += len(chunk)
            self._data += chunk
            excess = len(self._data) - self.limit
            if excess > 0:
                del self._data[:excess]

    def snapshot(self) -> tuple[bytes, int]:
        with self._lock:
            return bytes(self._data), self._total


@dataclass(frozen=True)
class JobStatus:
    """What ``shell_status`` tells about one job at one moment."""

    job_id: str
    state: str  # running | exited | timed_out | killed | failed
    exit_code: int | None
    runtime_seconds: float
    timeout_seconds: float
    output: str
    output_bytes: int
    dropped_bytes: int
    note: str = ""

    @property
    def running(self) -> bool:
        return self.state == "running"


class Job:
    """One background command. Changed only in the jobs' thread, read from anywhere."""

    def __init__(
        self, job_id: str, session_id: str, command: str, timeout: float, max_output: int
    ) -> None:
        self.id = job_id
        self.session_id = session_id
        self.command = command
        self.timeout = timeout
        self.output = TailBuffer(max_output)
        self.started = time.monotonic()
        self.ended: float | None = None
        self.state = "running"
        self.exit_code: int | None = None
        self.note = ""
        self.finished = threading.Event()
        self.kill_requested = False
        self.kill_reason = ""
        self.scope: anyio.CancelScope | None = None

    @property
    def done(self) -> bool:
        return self.finished.is_set()

    def finish(self, exit_code: int | None, timed_out: bool, error: BaseException | None) -> None:
        if timed_out:
            self.state = "timed_out"
            self.note = f"killed after its timeout of {self.timeout:g} s"
        elif error is not None:
            self.state = "failed"
            self.note = f"could not run: {_describe(error)}"
        elif exit_code is None:  # cancelled: shell_kill, or the registry shutting down
            self.state = "killed"
            self.note = self.kill_reason or "the agent process is shutting down"
        else:
            self.state, self.exit_code = "exited", exit_code
        self.ended = time.monotonic()
        self.finished.set()

    def status(self) -> JobStatus:
        data, total = self.output.snapshot()
        end = self.ended if self.ended is not None else time.monotonic()
        return JobStatus(
            job_id=self.id,
            state=self.state if self.done else "running",
            exit_code=self.exit_code,
            runtime_seconds=round(end - self.started, 2),
            timeout_seconds=self.timeout,
            output=decode_output(data, cut_at_start=total > len(data)),
            output_bytes=total,
            dropped_bytes=total - len(data),
            note=self.note,
        )


class JobRegistry:
    """The background jobs of this process, by id; see the module docstring."""

    def __init__(self, *, max_finished: int = MAX_FINISHED_JOBS) -> None:
        self.max_finished = max_finished
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._portal: BlockingPortal | None = None
        self._thread: threading.Thread | None = None
        self._portal_lock = threading.Lock()
        self._atexit_registered = False

    # -- starting ------------------------------------------------------------------

    async def start(
        self,
        ctx: ToolContext,
        command: str,
        *,
        cwd: Path | None,
        env: Mapping[str, str] | None,
        timeout: float,
        max_jobs: int,
        max_output: int,
    ) -> Job:
        """Start ``command`` as a job of ``ctx``'s session and return at once."""
        job = self._reserve(ctx.session_id, command, timeout, max_jobs, max_output)
        try:
            # Refused here, not in the job: a command the sandbox will not run (its
            # program, its cwd) is the call's error, as in the foreground.
            process = ctx.open_process([_SHELL, "-c", command], cwd=cwd, env=env, stderr="stdout")
            portal = await anyio.to_thread.run_sync(self._ensure_portal)
            portal.start_task_soon(self._run, job, process)
        except BaseException as exc:  # the job never started: forget it, then re-raise
            with self._lock:
                self._jobs.pop(job.id, None)
            if isinstance(exc, OSError):
                raise ToolError(f"could not start the background job: {_describe(exc)}") from None
            raise
        return job

    def _reserve(
        self, session_id: str, command: str, timeout: float, max_jobs: int, max_output: int
    ) -> Job:
        with self._lock:
            running = sum(
                1 for j in self._jobs.values() if j.session_id == session_id and not j.done
            )
            if running >= max_jobs:
                raise ToolError(
                    f"this session already has {running} background job(s) running and the "
                    f"limit is {max_jobs}; wait for one to end or stop one with shell_kill"
                )
            job = Job(f"job-{secrets.token_hex(6)}", session_id, command, timeout, max_output)
            self._jobs[job.id] = job
            finished = [j for j in self._jobs.values() if j.done]
            for old in finished[: max(0, len(finished) - self.max_finished)]:
                del self._jobs[old.id]
            return job

    async def _run(self, job: Job, process: SandboxProcess) -> None:
        """The job's task, in the registry's event loop."""
        exit_code: int | None = None
        timed_out = False
        error: BaseException | None = None
        scope = anyio.CancelScope()
        try:
            with scope:
                job.scope = scope
                if not job.kill_requested:  # killed before it began: nothing is started
                    try:
                        # Leaving this block — the command's end, its timeout, shell_kill,
                        # shutdown — kills the process's whole tree and reaps it.
                        async with process:
                            exit_code, timed_out = await _follow(process, job)
                    except (
                        Exception
                    ) as exc:  # the job's failure is its result, shown by shell_status
                        error = exc
        finally:
            job.finish(exit_code, timed_out, error)

    # -- looking up and killing -------------------------------------------------------

    def get(self, session_id: str, job_id: str) -> Job | None:
        """The job ``job_id`` if ``session_id`` started it; None for any other."""
        with self._lock:
            job = self._jobs.get(job_id)
        return job if job is not None and job.session_id == session_id else None

    async def kill(self, job: Job, *, reason: str = "stopped by shell_kill") -> bool:
        """Kill ``job``'s processes and wait until they are gone; False if it had ended."""
        if job.done:
            return False
        job.kill_reason = reason
        job.kill_requested = True
        portal = self._portal
        if portal is not None:
            with contextlib.suppress(RuntimeError):  # the loop is stopping: it kills too
                portal.start_task_soon(_cancel, job)
        # The job ends in the registry's thread: wait for its threading.Event in a
        # worker thread, given up if this call is cancelled.
        await anyio.to_thread.run_sync(job.finished.wait, KILL_WAIT_SECONDS, abandon_on_cancel=True)
        return True

    # -- the registry's own event loop --------------------------------------------------

    def _ensure_portal(self) -> BlockingPortal:
        with self._portal_lock:
            if self._portal is not None:
                return self._portal
            ready = threading.Event()
            started: dict[str, Any] = {}

            async def serve() -> None:
                async with BlockingPortal() as portal:
                    started["portal"] = portal
                    ready.set()
                    await portal.sleep_until_stopped()

            def main() -> None:
                try:
                    anyio.run(serve)
                except BaseException as exc:  # reported to the caller below
                    started["error"] = exc
                finally:
                    ready.set()

            thread = threading.Thread(target=main, name="koboi-shell-jobs", daemon=True)
            thread.start()
            if not ready.wait(30) or "portal" not in started:
                raise ToolError(
                    f"could not start the background job runner: {started.get('error')!r}"
                )
            self._portal, self._thread = started["portal"], thread
            if not self._atexit_registered:
                atexit.register(self.shutdown)
                self._atexit_registered = True
            return self._portal

    def shutdown(self, timeout: float = 15.0) -> None:
        """Kill every running job and stop the registry's thread (it restarts when needed)."""
        with self._portal_lock:
            portal, thread = self._portal, self._thread
            self._portal = self._thread = None
        if portal is None or thread is None:
            return
        running = [job for job in self.jobs() if not job.done]
        for job in running:
            job.kill_reason = "the agent process is shutting down"
            with contextlib.suppress(RuntimeError):
                portal.start_task_soon(_cancel, job)
        deadline = time.monotonic() + timeout
        for job in running:
            job.finished.wait(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(RuntimeError):
            portal.call(portal.stop, True)  # whatever is left is cancelled, and killed
        thread.join(max(0.0, deadline - time.monotonic()))

    def jobs(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())


async def _follow(process: SandboxProcess, job: Job) -> tuple[int | None, bool]:
    """Read the job's output as it comes until it exits or its timeout; (exit code, timed out)."""
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await process.stdin.aclose()
    drained = anyio.Event()

    async def pump() -> None:
        try:
            async for chunk in process.stdout:
                job.output.feed(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            drained.set()

    exit_code: int | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(pump)
        with anyio.move_on_after(job.timeout) as limit:
            exit_code = await process.wait()
        # The command is done (or out of time): what it left running in its group (its
        # namespace) goes too, so nothing keeps the pipe open; then read what is left.
        process.kill()
        with anyio.move_on_after(_DRAIN_GRACE):
            await drained.wait()
        group.cancel_scope.cancel()
    return (None, True) if limit.cancelled_caught else (exit_code, False)


async def _cancel(job: Job) -> None:
    """In the registry's loop: cancel the job's task (its process group dies with it)."""
    # The kernel shields process set-up from cancellation, so a job killed the
    # instant it started still has its group killed and its exit collected.
    job.kill_requested = True
    if job.scope is not None:
        job.scope.cancel()


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = str(exc).strip()
    return text or type(exc).__name__


#: The jobs of this agent process. Tools use it unless given another registry.
JOBS = JobRegistry()
