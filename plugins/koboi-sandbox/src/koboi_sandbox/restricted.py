"""The ``restricted`` sandbox: per-session workdirs and confined processes.

What it confines is the *processes* tools start (``ctx.run_process`` and the
long-lived ``ctx.open_process``): each runs in the session's own directory, in
its own session and process group (in a PID namespace where the machine
allows), under resource limits, with an environment built from nothing, as an
unprivileged uid/gid of that session's own when koboi is root, behind Landlock
wherever the kernel has it (the session's workdir read-write, system
directories read-only, nothing else), and, under ``isolation: hard``, behind
seccomp too. Tools written in Python run in koboi's process, as with
``passthrough``: they are governed by the decision pipeline and by their own
path checks (``koboi_confine.paths``), not by this sandbox.

Whether sessions are isolated from each other on this machine is worked out
when the sandbox starts (:mod:`koboi_sandbox.isolation`): ``isolates_sessions``
says it, ``describe()`` says how, and a warning says when they are not.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from anyio.abc import Process

from koboi.errors import SandboxError
from koboi.logs import get_logger
from koboi.sandbox import (
    DEFAULT_OUTPUT_LIMIT,
    ProcessResult,
    Sandbox,
    SandboxProcess,
    Spawn,
    open_in_new_session,
    run_capped_process,
)
from koboi_confine.environment import clean_environment
from koboi_confine.text import neutralise
from koboi_sandbox.filesystem import carve, normalise, protectable
from koboi_sandbox.identity import SessionIdentities
from koboi_sandbox.isolation import SessionIsolation, assess, uses_landlock, uses_session_ids
from koboi_sandbox.options import DEFAULT_READ_ONLY, DEFAULT_READ_WRITE, RestrictedOptions
from koboi_sandbox.probe import Capabilities, probe
from koboi_sandbox.runner import Confinement, make_preexec, make_undumpable, rlimit_pairs

#: The directory of processes started outside any session (``session_id=None``).
SHARED_SESSION = "shared"
#: What a session id may look like to become a directory name.
_SESSION_DIR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
#: What a confined process creates is its session's alone.
_UMASK = 0o077
#: An existing directory on the way to the workdir root that koboi itself made
#: private (the store's ``.koboi``) and may open for passage to the session ids.
_KOBOI_STATE_DIR = ".koboi"

log = get_logger("koboi.sandbox")


class RestrictedSandbox(Sandbox):
    """See the module docstring; built from :class:`RestrictedOptions`.

    ``base_dir``: the config's directory (relative paths resolve against it; it is
    kept out of reach). ``private``: more of koboi's paths to keep out of reach — the
    config file, the store's directory (the plugin passes both).
    """

    name = "restricted"

    def __init__(
        self,
        options: RestrictedOptions,
        *,
        base_dir: Path | None = None,
        capabilities: Capabilities | None = None,
        private: Sequence[str | os.PathLike[str]] = (),
    ) -> None:
        self.options = options
        self.caps = capabilities or probe()
        base = (base_dir or Path.cwd()).resolve()
        root = Path(options.workdir).expanduser()
        self.root = (root if root.is_absolute() else base / root).resolve()
        self.workdir = self.root
        self.hard = options.isolation == "hard"
        self._check_level()
        self.landlock = uses_landlock(self.caps)
        self.identities = (
            SessionIdentities(self.root, options.session_ids)
            if uses_session_ids(options, self.caps)
            else None
        )
        self._prepare_root()
        self.protected = self._protected_paths(base, private)
        self.read_only = (
            carve(
                [Path(p) for p in (*DEFAULT_READ_ONLY, *options.path, *options.read_only)],
                self.protected,
            )
            if self.landlock
            else []
        )
        self._network_filter = self._build_filter() if options.network_denied else None
        self.session_isolation: SessionIsolation = assess(
            options, self.caps, exposed=self._exposed(base, private)
        )
        # A tool must never read koboi's memory or environment, even as the same user.
        make_undumpable()
        if not self.session_isolation.isolated:
            log.warning(
                "the restricted sandbox cannot isolate sessions from each other on this "
                "machine: %s (koboi sandbox check explains; do not serve several principals "
                "with it)",
                "; ".join(self.session_isolation.gaps),
            )

    # -- what this machine can do ---------------------------------------------------

    @property
    def isolates_sessions(self) -> bool:
        """True when no session's processes can reach another session's workdir, the
        store, the config or koboi's own files (see :mod:`koboi_sandbox.isolation`)."""
        return self.session_isolation.isolated

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
        if self.identities is not None:
            ids = self.options.session_ids
            user = f"a uid/gid per session ({ids.first}-{ids.first + ids.count - 1})"
        else:
            user = "root (user: keep)" if self.caps.root else "koboi's own"
        return {
            "backend": self.name,
            "isolation": self.options.isolation,
            "network": "deny" if self.options.network_denied else "allow",
            "workdir": str(self.root),
            "user": user,
            "pid_namespace": self.caps.pid_namespaces,
            "landlock_abi": self.caps.landlock_abi if self.landlock else None,
            "sessions_isolated": self.isolates_sessions,
            "session_isolation": self.session_isolation.as_dict(),
        }

    # -- koboi's own paths ---------------------------------------------------------------

    def _prepare_root(self) -> None:
        """The workdir root: made private (passable only, for session ids), never shared."""
        passable = self.identities is not None
        mode = 0o711 if passable else 0o700
        missing = [p for p in (self.root, *self.root.parents) if not os.path.lexists(p)]
        for path in reversed(missing):
            try:
                os.mkdir(path, mode)
                os.chmod(path, mode)  # the umask does not decide
            except FileExistsError:
                pass
        info = os.lstat(self.root)
        if not stat.S_ISDIR(info.st_mode):
            raise SandboxError(f"the sandbox workdir {self.root} is not a directory")
        if info.st_uid == os.geteuid():
            if stat.S_IMODE(info.st_mode) != mode:
                os.chmod(self.root, mode)
        elif info.st_mode & 0o022:
            raise SandboxError(
                f"the sandbox workdir {self.root} belongs to uid {info.st_uid} and others may "
                "write to it: give the sandbox a directory of koboi's own"
            )
        if passable:
            self._open_passage()

    def _open_passage(self) -> None:
        """Let the session ids pass (``x``, never ``r``) through the root's parents."""
        for parent in self.root.parents:
            info = os.stat(parent)
            if info.st_mode & 0o001:
                continue
            if parent.name == _KOBOI_STATE_DIR and info.st_uid == os.geteuid():
                os.chmod(parent, stat.S_IMODE(info.st_mode) | 0o001)
                continue
            log.warning(
                "the sessions' users cannot pass through %s (mode %o): their commands reach "
                "their workdir by relative paths only; chmod o+x it, or put sandbox.workdir "
                "elsewhere",
                parent,
                stat.S_IMODE(info.st_mode),
            )
            return

    def _protected_paths(self, base: Path, private: Sequence[str | os.PathLike[str]]) -> list[Path]:
        """What no confined process may reach, even beneath an allowed directory."""
        wanted: list[str | os.PathLike[str]] = [self.root, base, *private, *self.options.deny]
        if sys.prefix != sys.base_prefix:
            wanted.append(sys.prefix)  # koboi's virtualenv
        protected = []
        for path in normalise(wanted):
            if protectable(path):
                protected.append(path)
            elif self.landlock and path != Path("/"):  # "/" is not allowed as a whole anyway
                log.warning(
                    "%s is a system directory and cannot be hidden from the sandbox whole; "
                    "keep koboi's config and store in a directory of their own",
                    path,
                )
        return protected

    def _exposed(self, base: Path, private: Sequence[str | os.PathLike[str]]) -> list[str]:
        """koboi's files that every user may read (only a gap where Landlock is missing)."""
        if self.landlock or self.identities is None:
            return []
        return exposed_files([*private, *base.glob(".env*")])

    # -- per-session directories ------------------------------------------------------

    def workdir_for(self, session_id: str) -> Path:
        """``<workdir>/<session id>``, created ``0700`` (for the session's own id) on first use."""
        return self._session(session_id)[0]

    def _session(self, session_id: str) -> tuple[Path, int | None]:
        """The session's directory and the uid (= gid) its processes run as (None: koboi's)."""
        if not _SESSION_DIR.match(session_id):
            raise SandboxError(f"session id {session_id!r} cannot name a working directory")
        path = self.root / session_id
        if self.identities is not None:
            return path, self.identities.ensure(session_id, path)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode):
                raise SandboxError(f"{path} exists and is not a directory") from None
            if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) != 0o700:
                os.chmod(path, 0o700)
        return path, None

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

    def _prepare(
        self,
        argv: Sequence[str],
        cwd: str | os.PathLike[str] | None,
        env: Mapping[str, str] | None,
        session_id: str | None,
    ) -> tuple[list[str], Path, dict[str, str], Spawn]:
        """What both ways of starting a process share: the command, its directory, its
        environment and the confined spawner — or a :class:`SandboxError` saying why not."""
        if not argv:
            raise ValueError("argv must not be empty")
        workdir, uid = self._session(session_id if session_id is not None else SHARED_SESSION)
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
        return command, directory, environment, self._spawn_for(workdir, uid)

    def _confinement(self, workdir: Path, uid: int | None) -> tuple[Confinement, Any]:
        limits = self.options.rlimits
        ruleset = None
        restrict = None
        if self.landlock:
            from koboi_sandbox import landlock

            try:
                ruleset = landlock.Ruleset.create(
                    read_only=self.read_only,
                    read_write=[workdir, *(Path(p) for p in DEFAULT_READ_WRITE)],
                    deny_tcp=self.options.network_denied,
                )
            except OSError as exc:
                raise SandboxError(f"could not build the Landlock ruleset: {exc}") from None
            restrict = landlock.restrict_self
        confinement = Confinement(
            rlimits=rlimit_pairs(**limits.model_dump()),
            pid_namespace=self.caps.pid_namespaces,
            user_namespace=self.caps.pid_namespaces and not self.caps.root,
            landlock_fd=ruleset.fd if ruleset is not None else None,
            restrict_self=restrict,
            uid=uid,
            gid=uid,
            seccomp_load=self._network_filter.load if self._network_filter is not None else None,
            umask=_UMASK,
        )
        return confinement, ruleset

    def _spawn_for(self, workdir: Path, uid: int | None) -> Spawn:
        """A spawner that builds the confinement for ``workdir`` when a process starts.

        The Landlock ruleset lives only while the process starts: the child has
        restricted itself before ``exec``, and the parent learns of the ``exec`` before
        the spawn returns, so the descriptor is closed right then — also when the start
        fails or the caller never gets to close the process.
        """

        async def spawn(
            argv: list[str],
            *,
            cwd: Any,
            env: dict[str, str] | None,
            stdin: int,
            stderr: int = subprocess.PIPE,
        ) -> Process:
            confinement, ruleset = self._confinement(workdir, uid)
            try:
                return await _spawner(confinement)(
                    argv, cwd=cwd, env=env, stdin=stdin, stderr=stderr
                )
            finally:
                if ruleset is not None:
                    ruleset.close()

        return spawn

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
        command, directory, environment, spawn = self._prepare(argv, cwd, env, session_id)
        result = await run_capped_process(
            command,
            cwd=directory,
            env=environment,
            timeout=timeout,
            input=input,
            max_output=max_output,
            spawn=spawn,
        )
        # Whatever the command printed reaches a model, a log or a terminal: no escape
        # sequences that could rewrite a screen, and (already) no invalid UTF-8.
        return dataclasses.replace(
            result, stdout=neutralise(result.stdout), stderr=neutralise(result.stderr)
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
        """A long-lived process with exactly :meth:`run_process`'s confinement.

        Its streams carry **raw bytes**, unlike :meth:`run_process`'s neutralised text:
        a stdio protocol (MCP, LSP) needs them intact. Whoever shows any of it to a
        person or a model must clean it (``koboi_confine.text.neutralise``).

        On close the process is killed with its process group; under a PID namespace
        (where the machine has them) the process is PID 1 of its own, so the kernel
        kills everything it started, ``setsid`` escapees included. Without one, a
        descendant that left the process group survives the close (``describe()``
        says ``pid_namespace: false``).
        """
        command, directory, environment, spawn = self._prepare(argv, cwd, env, session_id)

        async def start() -> Process:
            return await open_in_new_session(
                command, cwd=directory, env=environment, stderr=stderr, spawn=spawn
            )

        return SandboxProcess(start, label=Path(command[0]).name)


def exposed_files(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """A sentence for each file among ``paths`` (or directly in a directory among them)
    that every user may read."""
    files: list[Path] = []
    for path in normalise(paths):
        if path.is_dir():
            files.extend(p for p in sorted(path.iterdir())[:100] if p.is_file())
        elif path.is_file():
            files.append(path)
    found = []
    for path in files:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o004:
            found.append(
                f"{path} is readable by every user (mode {mode:o}) and no Landlock keeps "
                "the sessions' users from it: chmod 600 it"
            )
    return found


def koboi_paths(config: Any) -> list[Path]:
    """The config file and the directory of a SQLite store ``config`` uses (when known)."""
    from koboi.store_url import project_dir, store_scheme

    base = Path(getattr(config, "base_dir", None) or Path.cwd())
    found: list[Path] = []
    source = getattr(config, "source", None)
    if source is not None:
        found.append(Path(source).resolve())
    store = getattr(config, "store", None)
    url = getattr(store, "url", None)
    if not url:  # KOBOI_STORE is relative to the project directory, as the kernel reads it
        url = os.environ.get("KOBOI_STORE", "").strip()
        if hasattr(config, "base_dir"):
            base = project_dir(config)
    if url and store_scheme(url) == "sqlite" and "://" in url:
        database = url.split("://", 1)[1].split("?", 1)[0]
        database = database[1:] if database.startswith("/") else database
        if database and not database.startswith(":"):
            path = Path(database).expanduser()
            found.append((path if path.is_absolute() else base / path).parent)
    return found


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


def _spawner(confinement: Confinement) -> Spawn:
    # The Landlock ruleset descriptor needs no pass_fds: preexec_fn runs before
    # CPython closes descriptors, and the kernel made it close-on-exec anyway.
    preexec = make_preexec(confinement)

    async def spawn(
        argv: list[str],
        *,
        cwd: Any,
        env: dict[str, str] | None,
        stdin: int,
        stderr: int = subprocess.PIPE,
    ) -> Process:
        # anyio's public open_process has no preexec_fn; its backend's does, and
        # this is the one place koboi needs it.
        from anyio._core._eventloop import get_async_backend

        return await get_async_backend().open_process(
            argv,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=cwd,
            env=env,
            preexec_fn=preexec,
            close_fds=True,
        )

    return spawn
