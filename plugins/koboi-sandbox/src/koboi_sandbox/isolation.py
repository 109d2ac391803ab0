"""Whether one session's processes can reach another's, on this machine, at a level.

Sessions are isolated when nothing a session's processes do can read or write
another session's workdir, the store, the config or koboi's own files, nor
signal another session's processes or koboi. What provides that:

- **Landlock** (Linux 5.13+, wherever available, at both levels): each process
  reaches only its session's workdir (read-write) and the system directories
  (read-only); ``/proc`` tricks (``/proc/self/root/...``, ``/proc/<pid>/cwd``)
  end at a file outside those and are refused; from ABI 6, signals and abstract
  Unix sockets stay inside the session. Enough by itself, as root or not.
- **A uid/gid per session** (koboi running as root, ``user: auto``): another
  session's workdir is another user's ``0700`` directory. Enough for the
  sessions; koboi's files then rely on their modes (the store is ``0600`` in a
  ``0700`` directory; a config readable by everyone is reported).
- **PID namespaces**: a process cannot name, so cannot signal, one outside its
  namespace.

Without Landlock *and* without root (so every session runs as koboi's own user,
with no filesystem confinement), or with ``user: keep`` as root, sessions are
not isolated: ``restricted`` says so when it starts, ``koboi sandbox check``
says so, and :attr:`RestrictedSandbox.isolates_sessions` is False for
``koboi serve`` to refuse several principals.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.probe import Capabilities


@dataclass(frozen=True)
class SessionIsolation:
    """The verdict, and the reasons for it, in words a person can act on."""

    #: True when no session's processes can reach another session or koboi's files.
    isolated: bool
    #: What provides the isolation here.
    mechanisms: tuple[str, ...]
    #: Why sessions are not isolated (empty when they are).
    gaps: tuple[str, ...]
    #: What holds anyway and is worth knowing (never a reason for ``isolated`` False).
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "isolated": self.isolated,
            "mechanisms": list(self.mechanisms),
            "gaps": list(self.gaps),
            "notes": list(self.notes),
        }


def uses_landlock(caps: Capabilities) -> bool:
    """Landlock applies to every confined process where the kernel has it."""
    return sys.platform.startswith("linux") and caps.landlock_abi >= 1


def uses_session_ids(options: RestrictedOptions, caps: Capabilities) -> bool:
    """Each session runs as an id of its own: koboi is root and ``user: auto``."""
    return caps.root and options.user == "auto"


def assess(
    options: RestrictedOptions, caps: Capabilities, *, exposed: Sequence[str] = ()
) -> SessionIsolation:
    """Sessions' isolation under ``options`` on a machine with ``caps``.

    ``exposed``: koboi's files found readable by other users (a sentence each); they
    are gaps only where Landlock does not apply and sessions run as other users.
    """
    landlock = uses_landlock(caps)
    ids = uses_session_ids(options, caps)
    mechanisms: list[str] = []
    gaps: list[str] = []
    notes: list[str] = []
    if ids:
        first, count = options.session_ids.first, options.session_ids.count
        mechanisms.append(
            f"a uid/gid of its own per session ({first}-{first + count - 1}, never one id "
            f"for two sessions on this machine: {options.session_ids.record}), no "
            "capabilities; each workdir is 0700 and owned by its session's id"
        )
    if landlock:
        mechanisms.append(
            f"Landlock (ABI {caps.landlock_abi}): a session's processes reach its own "
            "workdir (read-write) and system directories (read-only); not other sessions, "
            "the store, the config's directory or koboi's files; not /proc"
        )
    if caps.pid_namespaces:
        mechanisms.append("a PID namespace per command: other processes cannot be signalled")
    elif landlock and caps.landlock_abi >= 6:
        mechanisms.append("Landlock scopes: no signal leaves a session's processes")
    mechanisms.append("koboi's process is non-dumpable: its memory and environment stay unreadable")

    if caps.root and options.user == "keep":
        gaps.append(
            "user: keep runs every session's processes as root, with every capability: "
            "nothing stops one session from reaching another"
        )
    elif not landlock and not ids:
        gaps.append(
            f"no Landlock ({caps.landlock_reason}) and koboi is not root: every session's "
            "processes run as koboi's own user with no filesystem confinement, so they can "
            "read and write each other's workdirs, the store and the config (run koboi as "
            "root, or on Linux 5.13+ with Landlock enabled)"
        )
    elif not landlock:
        gaps.extend(exposed)
        notes.append(
            f"without Landlock ({caps.landlock_reason}) a session's processes can still read "
            "what every user may read and write to world-writable directories such as /tmp "
            "(files they make there are private to them: umask 077)"
        )
    if not ids and not caps.pid_namespaces and not (landlock and caps.landlock_abi >= 6):
        gaps.append(
            "every session's processes run as one user, with neither PID namespaces nor "
            "Landlock ABI 6: one session's processes can signal another's, and koboi"
        )
    if not options.network_denied:
        notes.append(
            "with network allowed, a process may connect to what another session's "
            "processes listen on (loopback TCP); network: deny closes that"
        )
    return SessionIsolation(
        isolated=not gaps, mechanisms=tuple(mechanisms), gaps=tuple(gaps), notes=tuple(notes)
    )
