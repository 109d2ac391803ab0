"""What a replay found: identical, or the first divergence (where, expected, actual)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from koboi_replay.normalise import MISSING, first_difference, render_path, value_at

ToolsMode = Literal["recorded", "live"]


@dataclass
class Divergence:
    """The first place where the replay differs from the recording.

    ``index`` is the 1-based position in its ``stream``: for ``events``, the
    event's sequence number (``koboi show`` numbers events the same way).
    ``expected`` and ``actual`` are the normalised events; None where there is
    none (the replay stopped early, or went on where the recording ended).
    """

    stream: Literal["events", "audit"]
    index: int
    expected: dict[str, Any] | None
    actual: dict[str, Any] | None
    reason: str = ""

    @property
    def path(self) -> str:
        if self.expected is None or self.actual is None:
            return ""
        found = first_difference(self.expected, self.actual)
        return render_path(found) if found is not None else ""

    def values(self) -> tuple[Any, Any]:
        """The two values at :attr:`path` (MISSING when absent)."""
        found = first_difference(self.expected, self.actual)
        if found is None or self.expected is None or self.actual is None:
            return self.expected, self.actual
        return value_at(self.expected, found), value_at(self.actual, found)

    def as_dict(self) -> dict[str, Any]:
        expected_value, actual_value = self.values()
        return {
            "stream": self.stream,
            "index": self.index,
            "path": self.path,
            "reason": self.reason,
            "expected": self.expected,
            "actual": self.actual,
            "expected_value": None if expected_value is MISSING else expected_value,
            "actual_value": None if actual_value is MISSING else actual_value,
        }


@dataclass
class ReplayReport:
    """What a replay found."""

    session_id: str
    tools: ToolsMode
    runs: int
    expected_events: int
    replayed_events: int
    expected_audit: int
    replayed_audit: int
    seconds: float
    divergence: Divergence | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return self.divergence is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "identical": self.identical,
            "session_id": self.session_id,
            "tools": self.tools,
            "runs": self.runs,
            "events": {"expected": self.expected_events, "replayed": self.replayed_events},
            "audit": {"expected": self.expected_audit, "replayed": self.replayed_audit},
            "seconds": round(self.seconds, 6),
            "divergence": self.divergence.as_dict() if self.divergence else None,
            "notes": self.notes,
        }
