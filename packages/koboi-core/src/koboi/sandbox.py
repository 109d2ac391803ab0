"""The ``Sandbox`` contract and the in-kernel passthrough sandbox.

The sandbox is the last stage of every tool call: the kernel hands it the
validated, approved call and it runs the tool (and any process the tool
starts) under whatever isolation it enforces.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process
from pydantic import BaseModel, ConfigDict, Field

from koboi.errors import SandboxError

if TYPE_CHECKING:
    from koboi.tools import Tool, ToolContext, ToolResult

DEFAULT_OUTPUT_LIMIT = 1_000_000


class PassthroughOptions(BaseModel):
    """Options of the passthrough sandbox."""

    model_config = ConfigDict(extra="forbid")

    workdir: str | None = Field(
        default=None,
        description="Directory tools start in; relative paths resolve against the config file.",
    )


TRUNCATION_MARKER = "\n[output truncated: {dropped} bytes dropped]"


@dataclass(frozen=True)
class ProcessResult:
    """The outcome of a process run through a sandbox."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False


class Sandbox(ABC):
    """Where tool calls run.

    Implementations must run :meth:`run_tool` so that the tool's effects are
    confined to what the sandbox allows, and :meth:`run_process` so that a
    timeout kills the whole process group and output is capped while it is read.
    """

    name: str = "sandbox"

    async def run_tool(self, tool: Tool, args: BaseModel, ctx: ToolContext) -> ToolResult:
        """Run one validated, approved tool call. The default calls the tool in-process."""
        return await tool(args, ctx)

    @abstractmethod
    async def run_process(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        input: bytes | None = None,
        max_output: int = DEFAULT_OUTPUT_LIMIT,
        session_id: str | None = None,
    ) -> ProcessResult:
        """Run a command to completion (or until ``timeout`` seconds) and capture its output.

        ``session_id`` says whose command it is: a sandbox that gives each
        session its own working directory confines the command to that one.
        """

    def open_process(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        stderr: Literal["pipe", "stdout", "discard"] = "pipe",
        session_id: str | None = None,
    ) -> SandboxProcess:
        """Start a long-lived process under the same confinement as :meth:`run_process`.

        Returns a :class:`SandboxProcess` to use as ``async with``: its ``stdin``,
        ``stdout`` (and ``stderr`` with ``stderr="pipe"``) are async byte streams; on
        close the process is killed with its whole tree (its process group, and under
        a PID namespace everything in it). What a server speaking over stdio (an MCP
        server, a language server) runs in. ``SandboxContract`` tests it.

        A backend that cannot confine such a process raises :class:`SandboxError`.
        """
        raise SandboxError(f"the {self.name!r} sandbox cannot start long-lived processes")

    def workdir_for(self, session_id: str) -> Path | None:
        """The working directory of ``session_id``'s tools (None: the process's own).

        The default is one directory for every session (``self.workdir`` when
        the sandbox has one); a sandbox with per-session directories overrides it.
        """
        workdir = getattr(self, "workdir", None)
        return Path(workdir) if workdir is not None else None

    @property
    def isolated(self) -> bool:
        """True when tool processes are confined (not ``passthrough``).

        An autonomous run (no human to approve) may only run destructive tools
        in an isolated sandbox.
        """
        return True

    @property
    def isolates_sessions(self) -> bool:
        """True when no session's tools can reach another session's files, processes
        or koboi's own state (its config, secrets, store). A server serving several
        principals refuses to start on a sandbox that does not (unless the operator
        says so). False unless a backend proves it."""
        return False

    def describe(self) -> dict[str, Any]:
        """What this sandbox enforces, for ``koboi sandbox check`` and the journal."""
        return {"backend": self.name}

    async def aclose(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Release resources (kill background processes). Called once when the agent closes."""


class PassthroughSandbox(Sandbox):
    """No isolation: tools run in the agent's process, commands as the agent's user.

    It still enforces what every sandbox must: timeouts kill the process group,
    output is capped while it is read.
    """

    name = "passthrough"

    def __init__(self, workdir: Path | None = None) -> None:
        self.workdir = workdir

    @property
    def isolated(self) -> bool:
        return False

    async def run_process(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        input: bytes | None = None,
        max_output: int = DEFAULT_OUTPUT_LIMIT,
        session_id: str | None = None,
    ) -> ProcessResult:
        return await run_capped_process(
            argv,
            cwd=cwd or self.workdir,
            env=dict(env) if env is not None else inherited_environment(),
            timeout=timeout,
            input=input,
            max_output=max_output,
        )

    def open_process(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        stderr: Literal["pipe", "stdout", "discard"] = "pipe",
        session_id: str | None = None,
    ) -> SandboxProcess:
        if not argv:
            raise ValueError("argv must not be empty")
        command, directory = list(argv), cwd or self.workdir
        environment = dict(env) if env is not None else inherited_environment()

        async def start() -> Process:
            return await open_in_new_session(command, cwd=directory, env=environment, stderr=stderr)

        return SandboxProcess(start, label=command[0])

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "isolation": "none"}


def inherited_environment() -> dict[str, str]:
    """koboi's own environment without the variables named like credentials
    (:func:`koboi.secrets.is_secret_name`): what a process started with ``env=None``
    gets from a sandbox that does not build one. Pass an explicit ``env`` to give a
    process a credential it needs."""
    from koboi.secrets import is_secret_name

    return {name: value for name, value in os.environ.items() if not is_secret_name(name)}


_STDERR = {"pipe": subprocess.PIPE, "stdout": subprocess.STDOUT, "discard": subprocess.DEVNULL}


async def open_in_new_session(
    argv: list[str],
    *,
    cwd: str | os.PathLike[str] | None,
    env: dict[str, str] | None,
    stderr: Literal["pipe", "stdout", "discard"] = "pipe",
    spawn: Callable[..., Awaitable[Process]] | None = None,
) -> Process:
    """Start ``argv`` with piped stdin/stdout in a session (and process group) of its own.

    ``spawn`` (a sandbox's confined starter, with the signature of
    :func:`anyio.open_process` keywords ``cwd``, ``env``, ``stdin``, ``stderr``)
    replaces how it is started.
    """
    if spawn is not None:
        return await spawn(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stderr=_STDERR[stderr])
    return await anyio.open_process(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=_STDERR[stderr],
        start_new_session=True,
    )


class SandboxProcess:
    """A long-lived process started by :meth:`Sandbox.open_process`.

    Use it as ``async with``; on exit (or :meth:`aclose`) the process group is killed
    and the process reaped, even when the closing task is being cancelled.
    """

    def __init__(
        self,
        start: Callable[[], Awaitable[Process]],
        *,
        label: str = "process",
        on_close: Sequence[Callable[[], None]] = (),
    ) -> None:
        self._start = start
        self._process: Process | None = None
        self._on_close = list(on_close)
        self.label = label

    async def __aenter__(self) -> SandboxProcess:
        try:
            with anyio.CancelScope(shield=True):
                # A cancellation landing while the process starts would leave it unkilled.
                self._process = await self._start()
        except BaseException:  # nothing started: still release what the sandbox holds
            self._release()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def process(self) -> Process:
        if self._process is None:
            raise SandboxError(f"{self.label}: the process is not started (use 'async with')")
        return self._process

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    @property
    def stdin(self) -> ByteSendStream:
        stream = self.process.stdin
        if stream is None:  # pragma: no cover - always piped
            raise SandboxError(f"{self.label}: stdin is not a pipe")
        return stream

    @property
    def stdout(self) -> ByteReceiveStream:
        stream = self.process.stdout
        if stream is None:  # pragma: no cover - always piped
            raise SandboxError(f"{self.label}: stdout is not a pipe")
        return stream

    @property
    def stderr(self) -> ByteReceiveStream | None:
        """The process's stderr, when it was opened with ``stderr="pipe"``."""
        return self.process.stderr

    async def wait(self) -> int:
        """Wait for the process to exit; its exit code (negative: killed by a signal)."""
        return await self.process.wait()

    def kill(self) -> None:
        """Kill the process and its process group now (no wait)."""
        if self._process is not None:
            _kill_group(self._process)

    async def aclose(self) -> None:
        """Kill the whole group, reap the process, release what the sandbox held for it
        (also for a process that never started). Closing twice is harmless."""
        process, self._process = self._process, None
        try:
            if process is not None:
                with anyio.CancelScope(shield=True):
                    _kill_group(process)
                    with contextlib.suppress(Exception):  # already reaped, pipes closed
                        await process.wait()
                    with contextlib.suppress(Exception):  # closing: the process is gone anyway
                        await process.aclose()
        finally:
            self._release()

    def _release(self) -> None:
        releases, self._on_close = self._on_close, []
        for release in releases:
            with contextlib.suppress(Exception):  # closing a descriptor twice is harmless
                release()


#: Starts a process: ``spawn(argv, cwd=..., env=..., stdin=...)``. It must put the
#: process in a session (and process group) of its own.
Spawn = Callable[..., Awaitable[Process]]


async def _spawn_in_new_session(
    argv: list[str],
    *,
    cwd: str | os.PathLike[str] | None,
    env: dict[str, str] | None,
    stdin: int,
) -> Process:
    return await anyio.open_process(argv, cwd=cwd, env=env, stdin=stdin, start_new_session=True)


async def run_capped_process(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    input: bytes | None = None,
    max_output: int = DEFAULT_OUTPUT_LIMIT,
    spawn: Spawn | None = None,
) -> ProcessResult:
    """Run ``argv`` in its own session; cap output while reading; kill the group on timeout.

    ``spawn`` replaces how the process is started (a sandbox confines it
    there); whatever starts it, the group of the process it returns is what a
    timeout kills.
    """
    if not argv:
        raise ValueError("argv must not be empty")
    # Shielded: a cancellation that landed while the process was being set up would
    # leave it running without anyone to kill its group or collect its exit.
    with anyio.CancelScope(shield=True):
        process = await (spawn or _spawn_in_new_session)(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        )
    out = _CappedBuffer(max_output)
    err = _CappedBuffer(max_output)
    timed_out = False
    async with process:
        try:
            with anyio.move_on_after(timeout) as scope:
                async with anyio.create_task_group() as tg:
                    drained = _Countdown(2)
                    tg.start_soon(_drain, process.stdout, out, drained)
                    tg.start_soon(_drain, process.stderr, err, drained)
                    if input is not None and process.stdin is not None:
                        tg.start_soon(_feed, process.stdin, input)
                    await process.wait()
                    # The leader is done; what it left running in its group goes too,
                    # so nothing keeps the pipes open.
                    _kill_group(process)
                    with anyio.move_on_after(_DRAIN_GRACE):
                        await drained.event.wait()
                    tg.cancel_scope.cancel()
            timed_out = scope.cancelled_caught
        finally:
            if process.returncode is None or timed_out:
                _kill_group(process)
                with anyio.CancelScope(shield=True):
                    await process.wait()
    return ProcessResult(
        returncode=process.returncode,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        truncated=out.dropped > 0 or err.dropped > 0,
    )


#: After the command exits, how long to wait for its output pipes to reach EOF.
_DRAIN_GRACE = 2.0


class _Countdown:
    def __init__(self, count: int) -> None:
        self.count = count
        self.event = anyio.Event()

    def done(self) -> None:
        self.count -= 1
        if self.count <= 0:
            self.event.set()


async def _feed(stream: ByteSendStream, data: bytes) -> None:
    """Write the input; a command that exits without reading it all is not an error."""
    try:
        await stream.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass
    finally:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await stream.aclose()


def _kill_group(process: Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


class _CappedBuffer:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        room = self.limit - self.size
        if room > 0:
            kept = data[:room]
            self.chunks.append(kept)
            self.size += len(kept)
        self.dropped += max(0, len(data) - max(room, 0))

    def text(self) -> str:
        text = b"".join(self.chunks).decode("utf-8", errors="replace")
        if self.dropped:
            text += TRUNCATION_MARKER.format(dropped=self.dropped)
        return text


async def _drain(
    stream: ByteReceiveStream | None, buffer: _CappedBuffer, drained: _Countdown
) -> None:
    try:
        if stream is not None:
            async for chunk in stream:
                buffer.feed(chunk)
    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    finally:
        drained.done()
