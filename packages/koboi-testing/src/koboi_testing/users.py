"""Run a test module again as an ordinary user, from a test running as root.

What koboi promises must often hold both when it runs as root and when it runs
as an ordinary user (the restricted sandbox isolates sessions differently in
each case). A test suite run as root can prove the second case too: it runs
its own module again under ``setpriv`` with an id no account has, in a
temporary home given to that id, and checks that run passed.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: The ids tried, highest first: above the usual ranges of system and human accounts.
_IDS = range(60_999, 60_000, -1)


def unused_id() -> int:
    """An id that is neither a user's nor a group's (``setpriv`` needs no account)."""
    for candidate in _IDS:
        try:
            pwd.getpwuid(candidate)
            continue
        except KeyError:
            pass
        try:
            grp.getgrgid(candidate)
        except KeyError:
            return candidate
    raise RuntimeError("no unused id between 60000 and 61000")


def rerun_as_ordinary_user(
    test_file: str | os.PathLike[str],
    *,
    inner: str,
    select: str = "not ordinary_user",
    timeout: float = 540,
) -> subprocess.CompletedProcess[str]:
    """Run ``pytest test_file -k select`` as an unused uid/gid with no capabilities.

    ``inner`` names an environment variable set to ``1`` in that run, so the
    test calling this can skip itself there. The temporary home is removed
    afterwards. Needs root and ``setpriv`` (util-linux): a RuntimeError otherwise.
    """
    if os.geteuid() != 0:
        raise RuntimeError("rerunning as another user needs root")
    if shutil.which("setpriv") is None:
        raise RuntimeError("setpriv (util-linux) is not installed")
    uid = unused_id()
    home = Path(tempfile.mkdtemp(prefix="koboi-user-home-"))
    try:
        os.chown(home, uid, uid)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
            inner: "1",
            "HOME": str(home),
            "TMPDIR": str(home),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        command = [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            sys.executable,
            "-m",
            "pytest",
            str(test_file),
            "-q",
            "-p",
            "no:cacheprovider",
            f"--basetemp={home / 'pytest'}",
            "-k",
            select,
        ]
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, cwd=home, check=False
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)


__all__ = ["rerun_as_ordinary_user", "unused_id"]
