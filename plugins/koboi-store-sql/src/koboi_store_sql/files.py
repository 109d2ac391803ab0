"""A SQLite store's files are koboi's alone: ``0600`` files in a ``0700`` directory.

The database holds every session's inputs and outputs, so no other user of the
machine — least of all a sandboxed tool's process — may read it or list its
directory. SQLite creates a missing database ``0644`` (less the umask) and gives
its ``-wal``, ``-shm`` and ``-journal`` files the database's own mode, so:

- the directories koboi makes on the way are ``0700``;
- a missing database file is created empty, ``0600``, before SQLite opens it
  (SQLite takes an empty file for a new database), so its side files follow;
- an existing database and side files that are koboi's (same owner) and open
  to the group or others are tightened to ``0600``, with a warning saying so;
- an existing directory is left as the operator made it — it may be theirs and
  shared — except koboi's own ``.koboi``, from which group and others lose read
  and write (not passage: the restricted sandbox's per-session users may have to
  pass through it to ``.koboi/workdirs``); a directory others may write to is
  warned about (another user could swap the database).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from koboi.logs import get_logger

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
#: The files SQLite keeps beside a database.
SIDE_FILES = ("-wal", "-shm", "-journal")
#: koboi's own state directory, whose mode koboi may decide even when it exists.
STATE_DIR = ".koboi"

log = get_logger("koboi.store")


def make_private(path: Path) -> None:
    """Prepare the database at ``path`` (see the module docstring) before SQLite opens it."""
    directory = path.parent
    missing = [p for p in (directory, *directory.parents) if not os.path.lexists(p)]
    for made in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            os.mkdir(made, PRIVATE_DIR)
    _check_directory(directory)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, flags, PRIVATE_FILE))
    for name in (str(path), *(f"{path}{suffix}" for suffix in SIDE_FILES)):
        _tighten(Path(name))


def _check_directory(directory: Path) -> None:
    info = os.stat(directory)
    mode = stat.S_IMODE(info.st_mode)
    ours = info.st_uid == os.geteuid()
    if directory.name == STATE_DIR and ours and mode & 0o066:
        os.chmod(directory, mode & ~0o066)
        log.warning(
            "the store's directory %s was readable or writable by other users (mode %o); "
            "it is now %o",
            directory,
            mode,
            mode & ~0o066,
        )
    elif mode & 0o022 and not mode & stat.S_ISVTX:
        log.warning(
            "other users may write to the store's directory %s (mode %o) and so replace the "
            "database: chmod go-w it, or keep the store in a directory of koboi's own",
            directory,
            mode,
        )


def _tighten(path: Path) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or not mode & 0o077:
        return
    os.chmod(path, PRIVATE_FILE)
    log.warning(
        "the store file %s was readable by other users (mode %o); it is now 600", path, mode
    )
