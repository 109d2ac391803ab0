"""What a confined process may reach on the filesystem, as Landlock rules.

Landlock only *allows*: a rule grants rights beneath a directory, and nothing
can take a part of that back. So a path that must stay out of reach — the
store's directory, the config's directory, the workdir root with every other
session, koboi's virtualenv, a ``deny`` path — but lies beneath an allowed one
(a project in ``/opt/agent`` under the read-only ``/opt``, a config in
``/etc/koboi``) is *carved out*: the allowed directory is replaced by rules on
each of its entries except the one leading to the protected path, and so on
down to it. The directories on that way lose their own listing (a rule on them
would grant what is beneath); everything else in them stays as readable as
before. Symlinks among those entries get no rule: a rule on the directory never
covered what they point to either.

The carving is computed once, when the sandbox starts; an entry created later
in a carved directory is out of reach (the safe direction).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

#: Never carved away whole: protecting one of these would leave no usable system.
_SYSTEM_ROOTS = frozenset(
    Path(p) for p in ("/", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc", "/opt")
)


def normalise(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Absolute, symlink-free paths (``realpath``; missing parts kept as given), deduplicated."""
    seen: dict[Path, None] = {}
    for path in paths:
        seen[Path(os.path.realpath(path))] = None
    return list(seen)


def protectable(path: Path) -> bool:
    """False for ``/`` and the system directories themselves, which cannot be hidden whole."""
    return path not in _SYSTEM_ROOTS


def carve(allowed: Sequence[Path], protected: Sequence[Path]) -> list[Path]:
    """``allowed`` hierarchies with every ``protected`` path (and what is beneath) cut out.

    Both are normalised. An allowed path inside (or equal to) a protected one is
    dropped; one that contains protected paths is replaced by its entries, recursively,
    as the module docstring says.
    """
    protected = normalise(protected)
    out: list[Path] = []
    for path in normalise(allowed):
        out.extend(_carve_one(path, [p for p in protected if _beneath(p, path)], protected))
    return list(dict.fromkeys(out))


def _carve_one(path: Path, inside: list[Path], protected: list[Path]) -> list[Path]:
    if any(_beneath(path, p) for p in protected):
        return []  # the allowed path is itself protected, or lies in a protected one
    if not inside:
        return [path]
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return []  # cannot be listed: then it cannot be carved, and is left out
    rules: list[Path] = []
    for name in names:
        child = path / name
        try:
            info = os.lstat(child)
        except OSError:
            continue
        if stat.S_ISLNK(info.st_mode):
            continue
        below = [p for p in inside if _beneath(p, child)]
        if below and not stat.S_ISDIR(info.st_mode):
            continue  # the protected path is this very file
        rules.extend(_carve_one(child, below, protected))
    return rules


def _beneath(path: Path, ancestor: Path) -> bool:
    """``path`` is ``ancestor`` or lies under it (both normalised)."""
    return path == ancestor or ancestor in path.parents
