"""The store a replay journals into: it compares every append with the recording.

Events are compared as the loop appends them, each with the recorded event at
the same position, in the normal form of :mod:`koboi_replay.normalise`; audit
records likewise, as a second stream. The first difference is kept as the
:class:`~koboi_replay.report.Divergence` and the append fails, which stops the
run (the loop writes nothing after a failed commit). A run whose recorded
process was killed may write up to where its journal ends: the first write
past it raises :class:`CrashPointReached`, as SIGKILL ended the recorded run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from koboi.errors import StoreError
from koboi.store import InMemoryStore, JournalEvent, NewEvent, SessionStatus
from koboi_replay import recording
from koboi_replay.normalise import Normaliser, encode
from koboi_replay.recording import mapping
from koboi_replay.report import Divergence


class CrashPointReached(StoreError):
    """The replayed run reached the point where the recorded run's process died."""


class ReplayDiverged(StoreError):
    """The replayed run journaled something other than the recording: it is stopped."""


class ReplayStore(InMemoryStore):
    """An in-memory store that checks every append against the recording."""

    name = "replay"

    def __init__(
        self, expected: Sequence[JournalEvent], expected_audit: Sequence[Mapping[str, Any]]
    ) -> None:
        super().__init__()
        normaliser = Normaliser()
        self.expected = [normaliser.event(e.seq, e.type, e.data) for e in expected]
        self._expected_bytes = [encode(e) for e in self.expected]
        audit_normaliser = Normaliser()
        self.expected_audit = [
            audit_normaliser.audit(i, mapping(r.get("data")))
            for i, r in enumerate(expected_audit, start=1)
        ]
        self._expected_audit_bytes = [encode(a) for a in self.expected_audit]
        self._actual = Normaliser()
        self._actual_audit = Normaliser()
        #: Events committed so far (the replayed journal's length).
        self.committed = 0
        self.audit_committed = 0
        #: The last position the current run may write, and whether it ends by a kill.
        self.limit = 0
        self.killed_at_limit = False
        self.divergence: Divergence | None = None

    def start(self, run: recording.RecordedRun) -> None:
        self.limit = run.last_seq
        self.killed_at_limit = not run.finished

    def expected_at(self, position: int) -> dict[str, Any] | None:
        return self.expected[position - 1] if 0 < position <= len(self.expected) else None

    def missing_next(self, reason: str) -> None:
        """The replay wrote nothing where the recording has its next event."""
        position = self.committed + 1
        self.diverge(Divergence("events", position, self.expected_at(position), None, reason))

    def diverge(self, divergence: Divergence) -> ReplayDiverged:
        if self.divergence is None:
            self.divergence = divergence
        where = f"{divergence.stream} {divergence.index}"
        return ReplayDiverged(f"replay: the replayed run diverged from the recording at {where}")

    async def append(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        *,
        fence: int | None = None,
        audit: Sequence[Mapping[str, Any]] = (),
        status: SessionStatus | None = None,
    ) -> list[JournalEvent]:
        if self.divergence is not None:
            raise ReplayDiverged("replay: the replay already diverged; nothing more is recorded")
        for offset, event in enumerate(events):
            position = self.committed + offset + 1
            if position > self.limit and offset == 0 and self.killed_at_limit:
                # The recorded process died before it committed anything more. (Checked
                # before normalising: the ids of what is never stored must not be numbered.)
                raise CrashPointReached(
                    f"replay: the recorded run's process died after event {self.limit}"
                )
            actual = self._actual.event(position, event.type, event.data)
            if position > self.limit:
                raise self.diverge(
                    Divergence(
                        "events",
                        position,
                        self.expected_at(position),
                        _json(actual),
                        "the recorded run had ended here"
                        if not self.killed_at_limit
                        else "the recorded run's process died before it committed this",
                    )
                )
            if _encode(actual) != self._expected_bytes[position - 1]:
                raise self.diverge(
                    Divergence("events", position, self.expected[position - 1], _json(actual))
                )
        for offset, record in enumerate(audit):
            position = self.audit_committed + offset + 1
            actual = self._actual_audit.audit(position, record)
            expected = (
                self.expected_audit[position - 1] if position <= len(self.expected_audit) else None
            )
            if expected is None or _encode(actual) != self._expected_audit_bytes[position - 1]:
                raise self.diverge(
                    Divergence(
                        "audit",
                        position,
                        expected,
                        _json(actual),
                        "" if expected is not None else "the recording has no more audit records",
                    )
                )
        stored = await super().append(session_id, events, fence=fence, audit=audit, status=status)
        self.committed += len(events)
        self.audit_committed += len(audit)
        return stored


def _encode(normal: Mapping[str, Any]) -> bytes:
    """The bytes of a normalised event. Data that is not JSON never matches; the store
    refuses it anyway, with its own message."""
    try:
        return encode(normal)
    except (TypeError, ValueError):
        return b""


def _json(data: Mapping[str, Any]) -> dict[str, Any]:
    """Data as a durable store keeps it (tuples become lists...), for the report."""
    try:
        copied: dict[str, Any] = json.loads(json.dumps(data, allow_nan=False))
    except (TypeError, ValueError):
        return dict(data)
    return copied
