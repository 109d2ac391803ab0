"""A small version-range checker for plugin compatibility.

The kernel depends only on pluggy, pydantic, anyio and PyYAML, so it cannot use
``packaging``. Plugins declare their kernel range as ordinary PEP 440 release
specifiers (``koboi-core>=0.1,<0.2``); this module understands the operators
``== != >= <= > < ~=`` on release segments (``1.2.3``), with pre-release and
local suffixes ignored, which is what a kernel range needs.
"""

from __future__ import annotations

import re

_SPEC_RE = re.compile(r"^\s*(~=|==|!=|>=|<=|>|<)\s*([0-9][0-9a-zA-Z.*+!-]*)\s*$")
_REQ_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")


def release(version: str) -> tuple[int, ...]:
    """The numeric release segment of a version: ``"0.1.0rc1"`` -> ``(0, 1, 0)``."""
    version = version.split("!", 1)[-1]
    parts: list[int] = []
    for piece in version.split("."):
        match = re.match(r"^(\d+)", piece)
        if not match:
            break
        parts.append(int(match.group(1)))
        if match.group(1) != piece:
            break
    return tuple(parts)


def _pad(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def satisfies(version: str, specifier: str) -> bool:
    """True when ``version`` satisfies every clause of ``specifier`` (comma-separated)."""
    have = release(version)
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        match = _SPEC_RE.match(clause)
        if not match:
            raise ValueError(f"cannot read version specifier {clause!r}")
        op, raw = match.groups()
        if raw.endswith(".*") and op in ("==", "!="):
            prefix = release(raw[:-2])
            equal = have[: len(prefix)] == prefix
            if equal != (op == "=="):
                return False
            continue
        want = release(raw)
        a, b = _pad(have, want)
        ok = {
            "==": a == b,
            "!=": a != b,
            ">=": a >= b,
            "<=": a <= b,
            ">": a > b,
            "<": a < b,
        }.get(op)
        if op == "~=":
            if len(want) < 2:
                raise ValueError(f"'~=' needs at least two version parts: {clause!r}")
            upper = (*want[:-2], want[-2] + 1)
            lo, hi = _pad(have, upper)
            ok = a >= b and lo < hi
        if not ok:
            return False
    return True


def requirement_specifier(requirement: str, name: str) -> str | None:
    """If ``requirement`` (a ``Requires-Dist`` line) is on ``name``, return its specifier.

    Returns ``""`` for an unversioned requirement and None when the requirement
    is on another distribution or only applies under an extra.
    """
    text, _, marker = requirement.partition(";")
    if "extra" in marker:
        return None
    match = _REQ_RE.match(text)
    if not match:
        return None
    if _normalise(match.group(1)) != _normalise(name):
        return None
    spec = match.group(3).strip()
    if spec.startswith("(") and spec.endswith(")"):
        spec = spec[1:-1]
    return spec.strip()


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
