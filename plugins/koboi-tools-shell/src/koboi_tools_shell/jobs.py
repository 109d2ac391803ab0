"""Background jobs: commands that outlive the tool call that started them.

Where the jobs run
------------------
The agent loop awaits a tool call and moves on; no task group of the agent's
outlives the call, and a raw ``asyncio.create_task`` would tie a job to
whichever event loop happened to run the call (a test's, a server request's)
and escape structured concurrency. So the registry owns its own event loop:
a daemon thread, started on the first background job, runs
:class:`anyio.from_thread.BlockingPortal` in a task group. Each job is one
task there that awaits ``ctx.run_process`` — the same confinement as a
foreground command (process group, or the PID namespace under
``restricted``), with the job's own timeout. ``shell_kill`` cancels that task,
and cancelling ``run_process`` kills the process group (under ``restricted``
the namespace dies with it). When the Python process exits, an ``atexit``
hook stops the loop, which cancels every job the same way.

What a job prints
-----------------
``run_process`` returns output only when the command ends, but
``shell_status`` shows output *so far*. A small wrapper redirects the job's
stdout and stderr into a FIFO that koboi created in the session's working
directory (the only place a confined process may write under
``isolation: hard``), opened by koboi before the job starts, and removed by the
wrapper as soon as it has opened it. koboi reads it as data arrives and keeps
only the last ``max_output_bytes``: nothing is written to disk, and a
chatty job costs a bounded amount of memory.

Jobs belong to the session that started them and live in this process only:
they do not survive a restart (the journal still records each call and its
result).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal

from koboi.errors import ToolError
from koboi.sandbox import ProcessResult
from koboi.tools import ToolContext
from koboi_tools_shell.text import decode_output, strip_controls

#: Finished jobs kept for ``shell_status`` (all sessions together); the oldest go first.
MAX_FINISHED_JOBS = 64
#: How long ``shell_kill`` waits for the job's processes to be gone.
KILL_WAIT_SECONDS = 10.0
#: Past the job's own timeout, when its task is cancelled whatever ``run_process`` does.
_DEADLINE_GRACE = 15.0
#: Output the wrapper itself may print (before its redirection; confinement errors).
_WRAPPER_OUTPUT = 4_096
#: Most bytes read from the FIFO in one go, so a flood cannot starve the loop.
_READ_CHUNK = 65_536
_READS_PER_WAKEUP = 16

# $1: the FIFO, $2: the command. The FIFO's name leaves the directory as soon as
# it is open: the command never sees it.
_WRAPPER = 'exec >"$1" 2>&1 </dev/null\nrm -f -- "$1"\nexec /bin/sh -c "$2"'


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
        self.launched: float | None = None  # the registry loop's clock, when _run began

    @property
    def done(self) -> bool:
        return self.finished.is_set()

    def finish(
        self, result: ProcessResult | None, error: BaseException | None, cancelled: bool
    ) -> None:
        if result is None and self.kill_requested:
            self.state, self.note = "killed", self.kill_reason
        elif result is None and cancelled:
            self.state = "timed_out"
            self.note = f"killed after its timeout of {self.timeout:g} s"
        elif result is not None:
            self.exit_code = result.returncode
            self.state = "timed_out" if result.timed_out else "exited"
            if result.timed_out:
                self.note = f"killed after its timeout of {self.timeout:g} s"
            # Only the wrapper writes here (the command's output goes to the FIFO):
            # a redirection or confinement failure is worth showing.
            extra = strip_controls((result.stdout + result.stderr).strip())
            if extra:
                self.note = "; ".join(filter(None, [self.note, extra]))
        else:
            self.state = "failed"
            self.note = f"could not run: {_describe(error)}"
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


class OutputPipe:
    """The FIFO a job writes its output into, and koboi's read end of it."""

    def __init__(self, path: Path, fd: int, identity: tuple[int, int], temp: Path | None) -> None:
        self.path = path
        self.fd = fd
        self._identity = identity
        self._temp = temp

    @classmethod
    def create(cls, workdir: Path | None, name: str) -> OutputPipe:
        """A FIFO ``name`` in ``workdir`` (a private temporary directory without one)."""
        temp = Path(tempfile.mkdtemp(prefix="koboi-shell-")) if workdir is None else None
        directory = temp or workdir
        assert directory is not None
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fd = -1
        try:
            os.mkfifo(name, 0o600, dir_fd=dir_fd)
            # Read-write: koboi is a writer too, so reads never see end-of-file
            # before the job has opened its end; non-blocking, for the event loop.
            fd = os.open(
                name,
                os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                dir_fd=dir_fd,
            )
            info = os.fstat(fd)
            if not stat.S_ISFIFO(info.st_mode) or info.st_uid != os.geteuid():
                raise ToolError("the job's output pipe was replaced before it was opened")
            # The sandbox may run commands as another user (nobody, when koboi is
            # root): that user owns the session's directory, and gets the right to
            # write into the pipe, and nothing else.
            owner = os.fstat(dir_fd)
            mode = 0o200
            if owner.st_uid != os.geteuid():
                try:
                    os.fchown(fd, owner.st_uid, owner.st_gid)
                except PermissionError:
                    mode = 0o222
            os.fchmod(fd, mode)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dir_fd)
            if temp is not None:
                shutil.rmtree(temp, ignore_errors=True)
            raise
        finally:
            os.close(dir_fd)
        return cls(directory / name, fd, (info.st_dev, info.st_ino), temp)

    def read_available(self, sink: TailBuffer) -> None:
        """Move what is in the pipe now into ``sink`` (a bounded amount)."""
        for _ in range(_READS_PER_WAKEUP):
            try:
                chunk = os.read(self.fd, _READ_CHUNK)
            except BlockingIOError:
                return
            if not chunk:
                return
            sink.feed(chunk)

    async def pump(self, sink: TailBuffer) -> None:
        """Read the job's output as it comes, until cancelled."""
        while True:
            await anyio.wait_readable(self.fd)
            self.read_available(sink)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        # The wrapper removed the name already, unless it never got that far; remove
        # it only while it is still our FIFO (the command may reuse the name).
        with contextlib.suppress(OSError):
            info = os.stat(self.path, follow_symlinks=False)
            if (info.st_dev, info.st_ino) == self._identity:
                os.unlink(self.path)
        if self._temp is not None:
            shutil.rmtree(self._temp, ignore_errors=True)


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
        pipe: OutputPipe | None = None
        try:
            # A few system calls: not worth a thread, and a cancelled thread call
            # could leave the FIFO behind.
            pipe = OutputPipe.create(ctx.workdir, f".koboi-shell-{job.id}.fifo")
            argv = ["/bin/sh", "-c", _WRAPPER, "koboi-shell-job", str(pipe.path), command]
            portal = await anyio.to_thread.run_sync(self._ensure_portal)
            portal.start_task_soon(self._run, job, ctx, argv, cwd, env, pipe)
        except BaseException as exc:
            with self._lock:
                self._jobs.pop(job.id, None)
            if pipe is not None:
                pipe.close()
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

    async def _run(
        self,
        job: Job,
        ctx: ToolContext,
        argv: list[str],
        cwd: Path | None,
        env: Mapping[str, str] | None,
        pipe: OutputPipe,
    ) -> None:
        """The job's task, in the registry's event loop."""
        result: ProcessResult | None = None
        error: BaseException | None = None
        scope = anyio.CancelScope(deadline=anyio.current_time() + job.timeout + _DEADLINE_GRACE)
        try:
            with scope:
                job.scope = scope
                job.launched = anyio.current_time()
                if job.kill_requested:  # killed before it began: nothing was started
                    scope.cancel()
                async with anyio.create_task_group() as group:
                    group.start_soon(pipe.pump, job.output)
                    try:
                        # Cancelling this (shell_kill, shutdown) kills the process group.
                        result = await ctx.run_process(
                            argv, cwd=cwd, env=env, timeout=job.timeout, max_output=_WRAPPER_OUTPUT
                        )
                    except Exception as exc:
                        error = exc
                    pipe.read_available(job.output)
                    group.cancel_scope.cancel()
        finally:
            pipe.close()
            job.finish(result, error, cancelled=scope.cancelled_caught or scope.cancel_called)

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
