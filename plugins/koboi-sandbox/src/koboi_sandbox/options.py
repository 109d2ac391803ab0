"""The ``sandbox:`` block of the ``restricted`` backend, validated strictly."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Where commands may come from unless the config says otherwise.
DEFAULT_PATH = ("/usr/local/bin", "/usr/bin", "/bin")
#: Variables a sandboxed process may inherit, when set; everything else is dropped.
DEFAULT_PASS_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
#: Read-only for a process under ``isolation: hard``: what ordinary commands need
#: to start (binaries, libraries, locale and resolver files), nothing else.
#: Writable for every process under ``isolation: hard``, besides the session's workdir:
#: redirections to /dev/null, background jobs and git need it.
DEFAULT_READ_WRITE = ("/dev/null",)
DEFAULT_READ_ONLY = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/lib32",
    "/etc",
    "/opt",
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
    "/dev/full",
    "/dev/tty",
)


class Rlimits(BaseModel):
    """Resource limits of every process a tool starts (per process; ``processes`` per user)."""

    model_config = ConfigDict(extra="forbid")

    cpu_seconds: int = Field(default=60, ge=1, description="CPU time (RLIMIT_CPU), in seconds.")
    address_space_mb: int = Field(
        default=2048, ge=16, description="Virtual memory (RLIMIT_AS), in MiB."
    )
    file_size_mb: int = Field(
        default=1024, ge=1, description="Largest file a process may write (RLIMIT_FSIZE), in MiB."
    )
    processes: int = Field(
        default=128,
        ge=1,
        description="Processes and threads of the sandbox user (RLIMIT_NPROC): stops fork bombs.",
    )
    open_files: int = Field(
        default=256, ge=16, description="Open file descriptors (RLIMIT_NOFILE)."
    )


class RestrictedOptions(BaseModel):
    """The ``sandbox:`` block with ``backend: restricted``."""

    model_config = ConfigDict(extra="forbid")

    workdir: str = Field(
        default=".koboi/workdirs",
        description="Root of the per-session working directories: each session gets "
        "<workdir>/<session id>; relative to the config file's directory.",
    )
    isolation: Literal["standard", "hard"] = Field(
        default="standard",
        description="standard: own session and process group, rlimits, a clean environment, an "
        "unprivileged user when koboi runs as root, a PID namespace when the machine allows. "
        "hard (Linux): also a seccomp filter that denies network egress and ptrace, and "
        "Landlock limiting the filesystem to the session's workdir (read-write) and system "
        "directories (read-only). hard refuses to start where a part is missing.",
    )
    network: Literal["allow", "deny"] | None = Field(
        default=None,
        description="deny: the seccomp filter blocks network egress. Default: deny under "
        "isolation hard, allow otherwise; deny needs seccomp.",
    )
    rlimits: Rlimits = Field(default_factory=Rlimits, description="Resource limits.")
    path: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PATH),
        description="Directories commands may be run from (the PATH the process sees); a "
        "command found elsewhere is refused.",
    )
    pass_env: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PASS_ENV),
        description="Variables passed through from koboi's environment when set. Secrets "
        "(*_KEY, *_TOKEN, *_SECRET, provider variables, LD_*, BASH_ENV...) never pass, even "
        "when listed.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Variables set for every process (after pass_env); secret-looking names "
        "are refused here too.",
    )
    read_only: list[str] = Field(
        default_factory=list,
        description="Under isolation hard: more paths processes may read (besides system "
        "directories and the workdir).",
    )
    user: Literal["auto", "keep"] = Field(
        default="auto",
        description="auto: when koboi runs as root, processes run as the unprivileged user "
        "'nobody' with no capabilities. keep: as koboi's own user (not allowed as root under "
        "hard).",
    )

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not entry.startswith("/"):
                raise ValueError(f"path entries must be absolute directories, not {entry!r}")
        return value

    @field_validator("env")
    @classmethod
    def _no_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        from koboi_sandbox.environment import is_forbidden

        refused = sorted(name for name in value if is_forbidden(name))
        if refused:
            raise ValueError(
                f"{', '.join(refused)} may not be given to sandboxed processes (secrets and "
                "variables that load code never are)"
            )
        return value

    @property
    def network_denied(self) -> bool:
        if self.network is not None:
            return self.network == "deny"
        return self.isolation == "hard"
