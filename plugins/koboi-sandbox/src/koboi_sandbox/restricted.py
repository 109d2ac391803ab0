"""The ``restricted`` sandbox: per-session workdirs and confined processes.

What it confines is the *processes* tools start (``ctx.run_process``): each
runs in the session's own directory, in its own session and process group
(in a PID namespace where the machine allows), under resource limits, with an
environment built from nothing, as an unprivileged user when koboi is root,
and, under ``isolation: hard``, behind seccomp and Landlock. Tools written in
Python run in koboi's process, as with ``passthrough``: they are governed by
the decision pipeline and by their own path checks, not by this sandbox.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from anyio.abc import Process

from koboi.errors import SandboxError
from koboi.sandbox import DEFAULT_OUTPUT_LIMIT, ProcessResult, Sandbox, run_capped_process
from koboi_sandbox.environment import clean_environment
from koboi_sandbox.options import DEFAULT_READ_ONLY, DEFAULT_READ_WRITE, RestrictedOptions
from koboi_sandbox.probe import Capabilities, probe
from koboi_sandbox.runner import Confinement, make_preexec, make_undumpable, rlimit_pairs
from koboi_sandbox.text import neutralise

#: The directory of processes started outside any session (``session_id=None``).
SHARED_SESSION = "shared"
#: What a session id may look like to become a directory name.
_SESSION_DIR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class RestrictedSandbox(Sandbox):
    """See the module docstring; built from :class:`RestrictedOptions`."""

    name = "restricted"

    def __init__(
        self,
        options: RestrictedOptions,
        *,
        base_dir: Path | None = None,
        capabilities: Capabilities | None = None,
    ) -> None:
        self.options = options
        self.caps = capabilities or probe()
        root = Path(options.workdir).expanduser()
        self.root = (root if root.is_absolute() else (base_dir or Path.cwd()) / root).resolve()
        self.workdir = self.root
        self.hard = options.isolation == "hard"
        self.user = self._user()
        self._check_level()
        self.root.mkdir(parents=True, exist_ok=True)
        self._network_filter = self._build_filter() if options.network_denied else None
        # A tool must never read koboi's memory or environment, even as the same user.
        make_undumpable()

    # -- what this machine can do ---------------------------------------------------

    def _user(self) -> tuple[int, int] | None:
        if not self.caps.root or self.options.user == "keep":
            return None
        uid, gid = self.caps.unprivileged_uid, self.caps.unprivileged_gid
        if uid is None or gid is None:
            raise SandboxError(
                "koboi runs as root and the sandbox found no unprivileged user to run tools "
                "as (no 'nobody'); create one, or set sandbox.user: keep (not under hard)"
            )
        return uid, gid

    def _check_level(self) -> None:
        gaps = required_gaps(self.options, self.caps)
        if gaps:
            level = "isolation: hard" if self.hard else "network: deny"
            raise SandboxError(
                f"the sandbox cannot enforce {level} on this machine; missing: "
                + "; ".join(gaps)
                + " (koboi sandbox check shows what is available; it never runs tools with "
                "less isolation than configured)"
            )

    def _build_filter(self) -> Any:
        from koboi_sandbox.seccomp_filter import NetworkFilter

        # Sends without an address (write-like, on sockets the process made itself)
        # stay allowed: asyncio wakes its loop that way, and nothing else is opened.
        return NetworkFilter(allow_connected_send=True)

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "isolation": self.options.isolation,
            "network": "deny" if self.options.network_denied else "allow",
            "workdir": str(self.root),
            "user": "nobody" if self.user else "koboi's own",
            "pid_namespace": self.caps.pid_namespaces,
            "landlock_abi": self.caps.landlock_abi if self.hard else None,
        }

    # -- per-session directories ------------------------------------------------------

    def workdir_for(self, session_id: str) -> Path:
        """``<workdir>/<session id>``, created (and handed to the sandbox user) on first use."""
        if not _SESSION_DIR.match(session_id):
            raise SandboxError(f"session id {session_id!r} cannot name a working directory")
        path = self.root / session_id
        if not path.exists():
            path.mkdir(mode=0o700, parents=True)
            if self.user is not None:
                os.chown(path, *self.user)
        return path

    # -- running ------------------------------------------------------------------------

    def _command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` with its program resolved through the PATH allow-list, or refused."""
        program = argv[0]
        allowed = [Path(p) for p in self.options.path]
        if "/" in program:
            resolved = Path(program).resolve()
            if not any(resolved.is_relative_to(d.resolve()) for d in allowed if d.exists()):
                raise SandboxError(
                    f"{program!r} is not in an allowed directory (sandbox.path: "
                    f"{', '.join(self.options.path)})"
                )
            return [str(resolved), *argv[1:]]
        found = shutil.which(program, path=os.pathsep.join(self.options.path))
        if found is None:
            raise SandboxError(
                f"command {program!r} was not found in the allowed directories (sandbox.path: "
                f"{', '.join(self.options.path)})"
            )
        return [found, *argv[1:]]

    def _confinement(self, workdir: Path) -> tuple[Confinement, Any]:
        limits = self.options.rlimits
        ruleset = None
        restrict = None
        if self.hard:
            from koboi_sandbox import landlock

            read_only = [Path(p) for p in (*DEFAULT_READ_ONLY, *self.options.read_only)]
            read_write = [workdir, *(Path(p) for p in DEFAULT_READ_WRITE)]
            ruleset = landlock.Ruleset.create(read_only=read_only, read_write=read_write)
            restrict = landlock.restrict_self
        confinement = Confinement(
            rlimits=rlimit_pairs(**limits.model_dump()),
            pid_namespace=self.caps.pid_namespaces,
            user_namespace=self.caps.pid_namespaces and not self.caps.root,
            landlock_fd=ruleset.fd if ruleset is not None else None,
            restrict_self=restrict,
            uid=self.user[0] if self.user else None,
            gid=self.user[1] if self.user else None,
            seccomp_load=self._network_filter.load if self._network_filter is not None else None,
        )
        return confinement, ruleset

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
        if not argv:
            raise ValueError("argv must not be empty")
        workdir = self.workdir_for(session_id if session_id is not None else SHARED_SESSION)
        directory = _inside(cwd, workdir)
        command = self._command(argv)
        environment = clean_environment(
            inherited=os.environ,
            pass_names=self.options.pass_env,
            fixed=self.options.env,
            requested=env,
            path=self.options.path,
            home=str(workdir),
        )
        confinement, ruleset = self._confinement(workdir)
        try:
            result = await run_capped_process(
                command,
                cwd=directory,
                env=environment,
                timeout=timeout,
                input=input,
                max_output=max_output,
                spawn=_spawner(confinement),
            )
        finally:
            if ruleset is not None:
                ruleset.close()
        # Whatever the command printed reaches a model, a log or a terminal: no escape
        # sequences that could rewrite a screen, and (already) no invalid UTF-8.
        return dataclasses.replace(
            result, stdout=neutralise(result.stdout), stderr=neutralise(result.stderr)
        )


def required_gaps(options: RestrictedOptions, caps: Capabilities) -> list[str]:
    """What the configured level needs and this machine lacks (empty: it can be met)."""
    gaps = []
    if options.isolation == "hard":
        if not sys.platform.startswith("linux"):
            gaps.append(f"Linux ({sys.platform} has no seccomp or Landlock)")
        if not caps.seccomp:
            gaps.append(f"seccomp: {caps.seccomp_reason}")
        if caps.landlock_abi < 1:
            gaps.append(f"Landlock: {caps.landlock_reason}")
        if not caps.pid_namespaces:
            gaps.append("PID namespaces (to kill every process a tool leaves behind)")
        if caps.root and options.user == "keep":
            gaps.append("an unprivileged user: user: keep runs tools as root")
    elif options.network_denied and not caps.seccomp:
        gaps.append(f"seccomp (for network: deny): {caps.seccomp_reason}")
    return gaps


def _inside(cwd: str | os.PathLike[str] | None, workdir: Path) -> Path:
    """``cwd`` (default: ``workdir``), refused unless it lies inside the session's workdir."""
    if cwd is None:
        return workdir
    directory = Path(cwd).resolve()
    if not directory.is_relative_to(workdir.resolve()):
        raise SandboxError(
            f"working directory {str(directory)!r} is outside the session's workdir "
            f"{str(workdir)!r}"
        )
    return directory


def _spawner(confinement: Confinement) -> Any:
    # The Landlock ruleset descriptor needs no pass_fds: preexec_fn runs before
    # CPython closes descriptors, and the kernel made it close-on-exec anyway.
    preexec = make_preexec(confinement)

    async def spawn(
        argv: list[str], *, cwd: Any, env: dict[str, str] | None, stdin: int
    ) -> Process:
        # anyio's public open_process has no preexec_fn; its backend's does, and
        # this is the one place koboi needs it.
        from anyio._core._eventloop import get_async_backend

        return await get_async_backend().open_process(
            argv,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            preexec_fn=preexec,
            close_fds=True,
        )

    return spawn
