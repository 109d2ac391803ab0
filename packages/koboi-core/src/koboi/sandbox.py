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
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process
from pydantic import BaseModel, ConfigDict, Field

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
            env=env,
            timeout=timeout,
            input=input,
            max_output=max_output,
        )

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "isolation": "none"}


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
