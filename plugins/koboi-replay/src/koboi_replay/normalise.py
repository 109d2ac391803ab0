"""What "the same event stream" means: the normal form two journal events are compared in.

A replayed run must journal every event byte for byte as the recording has it,
after normalising **only timestamps and ids** — values the runtime makes up
fresh on each run (clock readings, random or host-derived identifiers). The
rule, applied the same way to the recorded and the replayed stream:

1. An event is reduced to ``{"seq", "type", "data"}``: the envelope's commit
   time (``at``) and session id are dropped.
2. In ``data``, at the top level only (never inside tool arguments, model
   responses or tool results, which are compared exactly):

   - a **timestamp** — key ``at`` or ``timestamp``, or a key ending in
     ``_at`` — that is not null becomes ``"<time>"``;
   - an **id** — key ``id``, ``holder`` or ``session_id``, or a key ending in
     ``_id`` other than ``call_id`` — that is not null becomes ``"<id-N>"``,
     where N numbers distinct values in order of first appearance in the
     stream. An id that recurs must recur at the same places in both streams:
     renaming is consistent, not blanket.

   ``call_id`` is not normalised: call ids come from the model's recorded
   answers, so a replay reproduces them exactly.
3. The result is serialised as canonical JSON (sorted keys, no spaces, UTF-8)
   and compared as bytes.

Audit records are compared the same way (their store-wide ``id`` and ``at``
dropped, their data normalised by the same rule), as a second stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koboi_replay.bundle import canonical_json

TIME_PLACEHOLDER = "<time>"
#: Ids a replay reproduces exactly, so they are compared as they are.
RECORDED_IDS = frozenset({"call_id"})
_TIME_KEYS = frozenset({"at", "timestamp"})
_ID_KEYS = frozenset({"id", "holder", "session_id"})


def is_timestamp_key(key: str) -> bool:
    return key in _TIME_KEYS or key.endswith("_at")


def is_id_key(key: str) -> bool:
    return key not in RECORDED_IDS and (key in _ID_KEYS or key.endswith("_id"))


class Normaliser:
    """Normalises one stream; keeps the numbering of the ids it has seen so far.

    Use one instance per stream (one for the recording, one for the replay),
    feeding events in order.
    """

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def _id(self, value: Any) -> str:
        token = value if isinstance(value, str) else canonical_json(value)
        number = self._ids.setdefault(token, len(self._ids) + 1)
        return f"<id-{number}>"

    def data(self, data: Mapping[str, Any]) -> dict[str, Any]:
        normal: dict[str, Any] = {}
        for key, value in data.items():
            if value is None:
                normal[key] = None
            elif is_timestamp_key(key):
                normal[key] = TIME_PLACEHOLDER
            elif is_id_key(key):
                normal[key] = self._id(value)
            else:
                normal[key] = value
        return normal

    def event(self, seq: int, type_: str, data: Mapping[str, Any]) -> dict[str, Any]:
        return {"seq": seq, "type": type_, "data": self.data(data)}

    def audit(self, index: int, data: Mapping[str, Any]) -> dict[str, Any]:
        return {"index": index, "data": self.data(data)}


def encode(normal: Mapping[str, Any]) -> bytes:
    """The bytes two normalised events are compared as."""
    return canonical_json(normal).encode("utf-8")


Path = tuple[str | int, ...]


def first_difference(expected: Any, actual: Any, path: Path = ()) -> Path | None:
    """Where two JSON values first differ (keys in sorted order), or None when equal."""
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        for key in sorted(set(expected) | set(actual)):
            if key not in expected or key not in actual:
                return (*path, key)
            found = first_difference(expected[key], actual[key], (*path, key))
            if found is not None:
                return found
        return None
    if isinstance(expected, list) and isinstance(actual, list):
        for index, (a, b) in enumerate(zip(expected, actual, strict=False)):
            found = first_difference(a, b, (*path, index))
            if found is not None:
                return found
        if len(expected) != len(actual):
            return (*path, min(len(expected), len(actual)))
        return None
    if type(expected) is not type(actual) or expected != actual:
        return path
    return None


def render_path(path: Path) -> str:
    """``("data", "arguments", "items", 2)`` -> ``data.arguments.items[2]``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(the whole event)"


MISSING: Any = object()


def value_at(value: Any, path: Path) -> Any:
    """The value at ``path``, or :data:`MISSING` when it is absent."""
    current = value
    for part in path:
        if isinstance(part, int):
            if not isinstance(current, list) or part >= len(current):
                return MISSING
        elif not isinstance(current, Mapping) or part not in current:
            return MISSING
        current = current[part]
    return current
