"""Who a session's processes run as when koboi is root: a uid/gid of that session's own.

Running every session as ``nobody`` lets one session read and write another's
files: the same user owns them all. So, as root, each session gets an
unprivileged id of its own (the same number as uid and gid, no supplementary
groups), from the range ``sandbox.session_ids``, and its working directory is
created ``0700`` and owned by it: another session's processes cannot even enter
it, whatever else the machine lacks.

How an id is chosen, so it is **stable** and **never collides on the machine**:

- Ids are recorded in one file for the whole machine, ``sandbox.session_ids.record``
  (default ``/var/lib/koboi/session-ids``: root's, ``0600``, in a ``0700`` directory
  of root's), one ``<id> <session id> <workdir root>`` line each, appended under an
  exclusive ``flock``. Every koboi process on the machine, whatever its workdir
  root, its config or its range, takes ids from that one record: two processes —
  or two configs with different workdir roots — never hand out one id twice. A
  session keeps its id for good, also when its directory is deleted and made
  again; an id is never given to another session (of any root), so files a session
  left behind (in its workdir or in ``/tmp``) can never be inherited by a later one.
  A record of a workdir root from before (``<workdir root>/.session-ids``) is still
  read: a session keeps the id it had there unless the machine's record gave that
  id to another session since.
- A new session's first candidate is derived from a hash of its id; from there
  the range is searched for an id that is not recorded, owns no directory in the
  root, names no account and no group (asked through NSS: ``/etc/passwd``, LDAP,
  sssd...), and lies in no ``/etc/subuid`` / ``/etc/subgid`` range (container
  user namespaces). The default range starts above every 16-bit id (accounts,
  ``nobody``, systemd's dynamic users) and outside systemd's container ranges.
- A directory made before this scheme (owned by ``nobody``, or by root) is
  given to the session's new id: its tree is re-owned without following
  symlinks, leaving alone any file with more than one hard link (re-owning it
  would change the owner of a file elsewhere).
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import hashlib
import os
import pwd
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from koboi.errors import SandboxError
from koboi_sandbox.options import SessionIds

#: The per-root record of ids of earlier versions, in the workdir root (read, no longer
#: written; a session id never starts with ".").
RECORD_NAME = ".session-ids"
_SUBORDINATE_FILES = ("/etc/subuid", "/etc/subgid")


class SessionIdentities:
    """Hands out and remembers the per-session ids of one workdir root, in the machine's
    record of every root's ids (see the module)."""

    def __init__(self, root: Path, ids: SessionIds) -> None:
        if "\n" in str(root):
            raise SandboxError(f"the sandbox workdir {str(root)!r} holds a line break")
        self.root = root
        self.first = ids.first
        self.count = ids.count
        self.record = Path(ids.record)
        self._lock = threading.Lock()
        self._known: dict[str, int] = {}

    def contains(self, uid: int) -> bool:
        """True when ``uid`` lies in the configured range."""
        return self.first <= uid < self.first + self.count

    def ensure(self, session_id: str, path: Path) -> int:
        """The id of ``session_id``, whose directory ``path`` exists afterwards, ``0700``
        and owned by that id (uid and gid)."""
        known = self._known.get(session_id)
        if known is not None and _owned_dir(path, known):
            return known
        with self._lock, machine_record(self.record) as record:
            given = read_record(record)
            key = (str(self.root), session_id)
            uid = given.get(key)
            if uid is None:
                taken = set(given.values())
                uid = self._earlier(session_id)
                if uid is None or uid in taken:
                    uid = self._allocate(session_id, taken)
                os.write(record, f"{uid} {session_id} {self.root}\n".encode())
                os.fsync(record)
            _make_session_dir(path, uid)
            self._known[session_id] = uid
            return uid

    def _earlier(self, session_id: str) -> int | None:
        """The id this root's own record (of earlier versions) gave ``session_id``."""
        try:
            fd = os.open(self.root / RECORD_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                return None
            for number, name in _lines(fd):
                if name == session_id:
                    return number
            return None
        finally:
            os.close(fd)

    def _allocate(self, session_id: str, recorded: set[int]) -> int:
        used = recorded | self._directory_owners()
        subordinate = _subordinate_ranges()
        digest = hashlib.sha256(f"{self.root}\0{session_id}".encode()).digest()
        start = int.from_bytes(digest[:8], "big") % self.count
        for step in range(self.count):
            uid = self.first + (start + step) % self.count
            if uid in used or _names_something(uid):
                continue
            if any(low <= uid < low + size for low, size in subordinate):
                continue
            return uid
        raise SandboxError(
            f"no free id left in sandbox.session_ids ({self.first}-{self.first + self.count - 1}) "
            f"for session {session_id!r}: every id of the range is recorded in {self.record} "
            "(ids are never reused) or names an account; widen the range or give it ids of "
            "its own"
        )

    def _directory_owners(self) -> set[int]:
        owners: set[int] = set()
        with os.scandir(self.root) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    owners.add(entry.stat(follow_symlinks=False).st_uid)
        return owners


@contextlib.contextmanager
def machine_record(path: Path) -> Iterator[int]:
    """The machine's record of session ids, open for appending and locked (``flock``).

    Its directory is made ``0700`` when missing; the directory and the file must be
    koboi's (root's) and writable by nobody else, or the record could be forged.
    """
    directory = path.parent
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise SandboxError(
            f"cannot make {directory} for the machine's record of session ids ({exc.strerror})"
        ) from None
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise SandboxError(
            f"{directory} must be a directory of koboi's own user that no one else may write "
            "to, to hold the machine's record of session ids (sandbox.session_ids.record)"
        )
    try:
        fd = os.open(
            path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except OSError as exc:
        raise SandboxError(
            f"cannot open the machine's record of session ids {path} ({exc.strerror})"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise SandboxError(f"{path} is not koboi's record of session ids")
        os.fchmod(fd, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # releases the lock


def read_record(fd: int) -> dict[tuple[str, str], int]:
    """``{(workdir root, session id): id}`` of the machine's record."""
    given: dict[tuple[str, str], int] = {}
    for number, rest in _lines(fd):
        session_id, _, root = rest.partition(" ")
        if root:
            given[(root, session_id)] = number
    return given


def _lines(fd: int) -> Iterator[tuple[int, str]]:
    """``(id, rest of the line)`` of each well-formed ``<id> <rest>`` line of a record."""
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
        number, _, rest = line.partition(" ")
        if number.isdigit() and rest:
            yield int(number), rest


def _owned_dir(path: Path, uid: int) -> bool:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == uid
        and info.st_gid == uid
        and stat.S_IMODE(info.st_mode) == 0o700
    )


def _make_session_dir(path: Path, uid: int) -> None:
    """``path`` as a ``0700`` directory owned by ``uid``: made, or an old one re-owned."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode):
            raise SandboxError(f"{path} exists and is not a directory") from None
        if (info.st_uid, info.st_gid) != (uid, uid):
            _give_tree(path, uid)
    os.chown(path, uid, uid, follow_symlinks=False)
    os.chmod(path, 0o700, follow_symlinks=False)


def _give_tree(path: Path, uid: int) -> None:
    """Re-own what lies under ``path`` (symlinks themselves, never their targets)."""
    for _, dirs, files, dir_fd in os.fwalk(path, follow_symlinks=False):
        for name in (*dirs, *files):
            with contextlib.suppress(OSError):
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode) and info.st_nlink > 1:
                    continue  # another name of this file may lie outside the directory
                os.chown(name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)


def _names_something(uid: int) -> bool:
    """True when ``uid`` is the id of an account or of a group (asked through NSS)."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
        except (KeyError, OverflowError):
            continue
        return True
    return False


def _subordinate_ranges() -> list[tuple[int, int]]:
    """``(first, count)`` of every range in /etc/subuid and /etc/subgid."""
    ranges: list[tuple[int, int]] = []
    for name in _SUBORDINATE_FILES:
        try:
            text = Path(name).read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.strip().split(":")
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                ranges.append((int(parts[1]), int(parts[2])))
    return ranges
