"""The tools: ``run_shell``, ``shell_status`` and ``shell_kill``.

Every command runs as ``/bin/sh -c COMMAND`` through ``ctx.run_process``, so
the session's sandbox applies: its working directory, its user, its limits,
and a timeout that kills the whole process group (under ``restricted``, the
whole PID namespace).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from koboi.errors import ToolError
from koboi.sandbox import ProcessResult
from koboi.tools import Risk, Tool, ToolContext, ToolResult
from koboi_confine.environment import is_forbidden
from koboi_confine.paths import PathRefused, open_inside, relative_parts
from koboi_tools_shell.jobs import JOBS, JobRegistry, JobStatus
from koboi_tools_shell.settings import MAX_COMMAND_CHARS, ShellSettings
from koboi_tools_shell.text import strip_controls

#: The shell every command runs in (POSIX sh: dash on Debian, whatever /bin/sh is elsewhere).
SHELL = "/bin/sh"


# -- arguments ------------------------------------------------------------------------


class RunShellArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(
        min_length=1,
        max_length=MAX_COMMAND_CHARS,
        description="The command line, run by /bin/sh -c (POSIX sh: pipes, redirections, "
        "&&, ; all work).",
    )
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Seconds before the command and everything it started are killed. "
        "Default: 60 in the foreground, 600 for a background job.",
    )
    cwd: str | None = Field(
        default=None,
        max_length=4_096,
        description="Directory to run in, relative to the session's working directory (or an "
        "absolute path inside it). Default: the working directory itself.",
    )
    background: bool = Field(
        default=False,
        description="true: start the command as a background job and return its job_id at "
        "once; read it with shell_status, stop it with shell_kill.",
    )

    @field_validator("command")
    @classmethod
    def _runnable(cls, value: str) -> str:
        if "\0" in value:
            raise ValueError("the command contains a NUL byte")
        if not value.strip():
            raise ValueError("the command is empty")
        return value


class JobArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str = Field(
        min_length=1, max_length=64, description="The job_id run_shell returned, e.g. job-1a2b3c."
    )


# -- run_shell ---------------------------------------------------------------------------


class RunShell(Tool):
    """Run a shell command in the session's working directory (see the module docstring)."""

    name = "run_shell"
    args_model = RunShellArgs
    risk = Risk.DESTRUCTIVE  # a shell can do anything the sandbox lets it
    idempotent = False  # running a command twice is not running it once

    def __init__(
        self, settings: ShellSettings | None = None, registry: JobRegistry | None = None
    ) -> None:
        self.settings = settings or ShellSettings()
        self.registry = registry or JOBS
        s = self.settings
        background = (
            f"To keep something running, pass background=true: the command becomes a job "
            f"(default lifetime {s.background_timeout_seconds:g} s, at most "
            f"{s.max_background_timeout_seconds:g} s; at most {s.max_background_jobs} running "
            "per session) and the call returns its job_id at once; read its output with "
            "shell_status, stop it with shell_kill."
            if s.max_background_jobs > 0
            else "Background jobs are disabled."
        )
        self.description = (
            "Run a shell command (/bin/sh -c) in the session's working directory and return "
            "its exit code, stdout and stderr (terminal escapes and control characters "
            f"removed; each stream cut after {s.max_output_bytes} bytes). A timeout (default "
            f"{s.default_timeout_seconds:g} s, at most {s.max_timeout_seconds:g} s) kills the "
            "command and everything it started; so does the command's end, for anything it "
            f"left running with &. {background}"
        )

    async def invoke(self, args: RunShellArgs, ctx: ToolContext) -> ToolResult:
        root = ctx.workdir if ctx.workdir is not None else Path.cwd()
        directory = resolve_cwd(root, args.cwd)
        env = command_environment(ctx)
        if args.background:
            return await self._start_job(args, ctx, directory, env)
        s = self.settings
        timeout = _timeout(args.timeout_seconds, s.default_timeout_seconds, s.max_timeout_seconds)
        result = await ctx.run_process(
            [SHELL, "-c", args.command],
            cwd=directory,
            env=env,
            timeout=timeout,
            max_output=s.max_output_bytes,
        )
        return format_result(result, timeout)

    async def _start_job(
        self,
        args: RunShellArgs,
        ctx: ToolContext,
        directory: Path | None,
        env: dict[str, str] | None,
    ) -> ToolResult:
        s = self.settings
        if s.max_background_jobs == 0:
            raise ToolError("background jobs are disabled (tools_shell.max_background_jobs: 0)")
        timeout = _timeout(
            args.timeout_seconds, s.background_timeout_seconds, s.max_background_timeout_seconds
        )
        job = await self.registry.start(
            ctx,
            args.command,
            cwd=directory,
            env=env,
            timeout=timeout,
            max_jobs=s.max_background_jobs,
            max_output=s.max_output_bytes,
        )
        content = "\n".join(
            [
                f"job_id: {job.id}",
                "state: running",
                f"timeout_seconds: {timeout:g}",
                f"Started in the background (stdout and stderr together). Read it with "
                f'shell_status(job_id="{job.id}"), stop it with shell_kill(job_id="{job.id}").',
            ]
        )
        return ToolResult(content, data={"job_id": job.id, "state": "running"})


def _timeout(asked: float | None, default: float, limit: float) -> float:
    if asked is None:
        return default
    if asked > limit:
        raise ToolError(f"timeout_seconds is {asked:g}; the limit is {limit:g}")
    return asked


def resolve_cwd(root: Path, cwd: str | None) -> Path | None:
    """``cwd`` as a directory inside ``root`` (None: the default), or a ToolError why not.

    The path is split into checked components (no ``..``, absolute only below
    ``root``, compared component by component), then opened beneath ``root`` by
    the kernel, which refuses a symlink leading out. That is a check of the
    argument, not confinement: the command itself is confined by the sandbox.
    """
    if cwd is None:
        return None
    try:
        parts = relative_parts(root, cwd)
        fd = open_inside(root, cwd, os.O_RDONLY | os.O_DIRECTORY)
    except PathRefused as exc:
        raise ToolError(f"cwd: {exc}") from None
    except FileNotFoundError:
        raise ToolError(f"cwd {cwd!r} does not exist in the working directory") from None
    except NotADirectoryError:
        raise ToolError(f"cwd {cwd!r} is not a directory") from None
    except OSError as exc:
        raise ToolError(f"cwd {cwd!r}: {exc.strerror or exc}") from None
    os.close(fd)
    return root.joinpath(*parts)


def command_environment(ctx: ToolContext) -> dict[str, str] | None:
    """The environment to ask for: the sandbox's own (None) when it isolates.

    Without isolation the command would inherit koboi's whole environment, API
    keys included, and a plain ``env`` would print them into the journal. The
    variables the restricted sandbox never passes (secrets, code-loading ones)
    stay out here too.
    """
    if ctx.sandbox.isolated:
        return None
    return {name: value for name, value in os.environ.items() if not is_forbidden(name)}


def format_result(result: ProcessResult, timeout: float) -> ToolResult:
    """The text the model reads: a fixed header, then both streams, cleaned."""
    stdout, stderr = strip_controls(result.stdout), strip_controls(result.stderr)
    lines = [
        f"exit_code: {_code(result.returncode)}",
        f"timed_out: {_flag(result.timed_out)}",
        f"truncated: {_flag(result.truncated)}",
    ]
    if result.timed_out:
        lines.append(f"note: killed after {timeout:g} s, with every process it started")
    lines += ["--- stdout ---", _section(stdout), "--- stderr ---", _section(stderr)]
    data = {
        "exit_code": result.returncode,
        "timed_out": result.timed_out,
        "truncated": result.truncated,
        "stdout": stdout,
        "stderr": stderr,
    }
    return ToolResult("\n".join(lines), is_error=result.timed_out, data=data)


# -- shell_status and shell_kill --------------------------------------------------------------


class ShellStatus(Tool):
    """Report on one of the session's background jobs."""

    name = "shell_status"
    args_model = JobArgs
    risk = Risk.SAFE  # it only reads what the registry holds
    idempotent = True

    def __init__(self, registry: JobRegistry | None = None) -> None:
        self.registry = registry or JOBS
        self.description = (
            "Report on a background job started by run_shell(background=true): state "
            "(running, exited, timed_out, killed, failed), exit code, and its output so far "
            "(the last bytes of stdout and stderr together, control characters removed)."
        )

    async def invoke(self, args: JobArgs, ctx: ToolContext) -> ToolResult:
        job = self.registry.get(ctx.session_id, args.job_id)
        if job is None:
            raise unknown_job(args.job_id)
        return format_status(job.status())


class ShellKill(Tool):
    """Kill one of the session's background jobs and everything it started."""

    name = "shell_kill"
    args_model = JobArgs
    risk = Risk.MODERATE  # stops work, but only work this session started
    idempotent = True  # a second kill finds the job ended: the same outcome as one

    def __init__(self, registry: JobRegistry | None = None) -> None:
        self.registry = registry or JOBS
        self.description = (
            "Stop a background job started by run_shell(background=true): it and every process "
            "it started are killed. Returns its final state and output."
        )

    async def invoke(self, args: JobArgs, ctx: ToolContext) -> ToolResult:
        job = self.registry.get(ctx.session_id, args.job_id)
        if job is None:
            raise unknown_job(args.job_id)
        killed = await self.registry.kill(job)
        status = job.status()
        if status.running:
            raise ToolError(f"job {job.id} did not stop in time; its state is unknown")
        note = "" if killed else "the job had already ended; nothing was killed"
        return format_status(status, note=note)


def unknown_job(job_id: str) -> ToolError:
    shown = job_id if len(job_id) <= 64 else job_id[:61] + "..."
    return ToolError(
        f"unknown job {strip_controls(shown)!r}: no background job of this session has that id "
        "(jobs end with the agent process and are not restored after a restart)"
    )


def format_status(status: JobStatus, *, note: str = "") -> ToolResult:
    lines = [
        f"job_id: {status.job_id}",
        f"state: {status.state}",
        f"exit_code: {_code(status.exit_code)}",
        f"runtime_seconds: {status.runtime_seconds:g}",
        f"timeout_seconds: {status.timeout_seconds:g}",
        f"output_bytes: {status.output_bytes}",
        f"truncated: {_flag(status.dropped_bytes > 0)}",
    ]
    notes = [n for n in (status.note, note) if n]
    if notes:
        lines.append("note: " + "; ".join(notes))
    heading = "--- output (stdout and stderr) ---"
    output = status.output
    if status.dropped_bytes:
        heading = f"--- output (stdout and stderr; the last {status.output_bytes - status.dropped_bytes} bytes) ---"
        output = (
            f"[output truncated: the first {status.dropped_bytes} bytes were dropped]\n" + output
        )
    lines += [heading, _section(output)]
    data: dict[str, Any] = {
        "job_id": status.job_id,
        "state": status.state,
        "exit_code": status.exit_code,
        "output": status.output,
        "output_bytes": status.output_bytes,
        "dropped_bytes": status.dropped_bytes,
    }
    return ToolResult("\n".join(lines), data=data)


def _code(code: int | None) -> str:
    return "null" if code is None else str(code)


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _section(text: str) -> str:
    text = text[:-1] if text.endswith("\n") else text
    return text if text else "(empty)"


# -- factories (registered by the plugin; the config gives the limits) ---------------------


def make_run_shell(config: Any = None) -> RunShell:
    from koboi_tools_shell.settings import settings_from

    return RunShell(settings_from(config))


def make_shell_status(config: Any = None) -> ShellStatus:
    return ShellStatus()


def make_shell_kill(config: Any = None) -> ShellKill:
    return ShellKill()
