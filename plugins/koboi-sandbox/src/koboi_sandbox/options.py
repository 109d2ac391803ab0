"""The ``sandbox:`` block of the ``restricted`` backend, validated strictly."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Where commands may come from unless the config says otherwise.
DEFAULT_PATH = ("/usr/local/bin", "/usr/bin", "/bin")
#: Variables a sandboxed process may inherit, when set; everything else is dropped.
DEFAULT_PASS_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
#: Writable for every confined process besides the session's workdir (wherever
#: Landlock applies): redirections to /dev/null, background jobs and git need it.
DEFAULT_READ_WRITE = ("/dev/null",)
#: Read-only for a confined process (wherever Landlock applies): what ordinary
#: commands need to start (binaries, libraries, locale and resolver files), nothing
#: else. ``/etc/resolv.conf`` is named on its own because it is often a symlink out of
#: ``/etc`` (into ``/run``): the rule follows it to the file it names.
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
    "/etc/resolv.conf",
)
#: The uids (and gids, the same numbers) sessions' processes run as when koboi is root:
#: above the 16-bit ids where accounts, ``nobody`` and systemd's dynamic users live,
#: above systemd-nspawn's container range (524288-1879048191) and below systemd's
#: "foreign" range (from 2147352576).
DEFAULT_FIRST_SESSION_ID = 0x7000_0000
DEFAULT_SESSION_ID_COUNT = 0x100_0000
#: The machine's one record of the session ids every koboi process handed out.
DEFAULT_SESSION_ID_RECORD = "/var/lib/koboi/session-ids"
#: The largest id a session may get: (uid_t)-1 means "no change" to the kernel, and
#: (uid_t)-2 is the traditional overflow id.
_LAST_ID = 2**32 - 3


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


class SessionIds(BaseModel):
    """The range of uids/gids the sessions' processes run as when koboi runs as root."""

    model_config = ConfigDict(extra="forbid")

    first: int = Field(
        default=DEFAULT_FIRST_SESSION_ID,
        ge=65_536,
        description="First uid (and gid) of the range. At least 65536, so it never overlaps "
        "the ids of accounts, nobody or systemd's dynamic users.",
    )
    count: int = Field(
        default=DEFAULT_SESSION_ID_COUNT,
        ge=1,
        le=2**31,
        description="How many ids the range holds: the most sessions the machine can have "
        "(every workdir root and koboi process shares the range's ids through the record). An "
        "id that names an account or a group (NSS: /etc/passwd, LDAP...) or lies in an "
        "/etc/subuid or /etc/subgid range is skipped; ids are never reused.",
    )
    record: str = Field(
        default=DEFAULT_SESSION_ID_RECORD,
        description="The machine's record of the ids handed out, shared by every koboi "
        "process and workdir root so no two sessions ever get one id: an absolute path in a "
        "directory of root's that no one else may write to (made 0700 when missing). Keep "
        "the default unless every koboi on the machine names the same file.",
    )

    @field_validator("record")
    @classmethod
    def _absolute_record(cls, value: str) -> str:
        if not value.startswith("/") or "\n" in value:
            raise ValueError(f"the record must be an absolute path, not {value!r}")
        return value

    @model_validator(mode="after")
    def _fits(self) -> SessionIds:
        if self.first + self.count - 1 > _LAST_ID:
            raise ValueError(f"the range ends past {_LAST_ID}, the largest usable id")
        return self


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
        "unprivileged uid of its own per session when koboi runs as root, a PID namespace and "
        "Landlock (the filesystem limited to the session's workdir, read-write, and system "
        "directories, read-only) where the machine allows; says at start what it cannot "
        "enforce. hard (Linux): also a seccomp filter that denies network egress and ptrace; "
        "refuses to start where a part is missing.",
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
        "(*_KEY, *_TOKEN, *_SECRET, provider variables, LD_*, BASH_ENV..., and any value "
        "that is a credential) never pass, even when listed.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Variables set for every process (after pass_env); secret-looking names "
        "are refused here too.",
    )
    read_only: list[str] = Field(
        default_factory=list,
        description="More paths processes may read where Landlock applies (besides system "
        "directories, the path allow-list and the workdir). Never the store, the config's "
        "directory, the workdir root or a deny path: those are carved out.",
    )
    deny: list[str] = Field(
        default_factory=list,
        description="More paths no process may reach where Landlock applies, even inside a "
        "system directory or a read_only path (say, /etc/koboi holding keys). The store's "
        "and the config's directories, the workdir root and koboi's virtualenv always are.",
    )
    user: Literal["auto", "keep"] = Field(
        default="auto",
        description="auto: when koboi runs as root, each session's processes run as an "
        "unprivileged uid/gid of their own (from session_ids) with no capabilities. keep: as "
        "koboi's own user (not allowed as root under hard; as root it isolates nothing).",
    )
    session_ids: SessionIds = Field(
        default_factory=SessionIds,
        description="The uid/gid range of the per-session identities (user: auto, koboi "
        "running as root).",
    )

    @field_validator("path", "deny")
    @classmethod
    def _absolute(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not entry.startswith("/"):
                raise ValueError(f"entries must be absolute paths, not {entry!r}")
        return value

    @field_validator("env")
    @classmethod
    def _no_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        from koboi_confine.environment import is_forbidden

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
