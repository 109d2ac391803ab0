"""The regression gate of ``koboi eval``: compare results with a stored baseline.

``--save-baseline`` stores the metrics (and each row's scores) in a JSON file
kept with the project; ``--baseline FILE`` compares a new run with it and fails
when:

* a score (``completed`` and every scorer, in [0, 1]) dropped by more than
  ``--tolerance`` (absolute; default 0: any drop), or is no longer measured;
* the mean cost per row rose by more than ``--cost-tolerance`` (a fraction);
* with ``--latency-tolerance`` only, the p95 latency rose by more than that
  fraction (wall-clock time is too noisy on shared machines to gate by default).

A baseline recorded on a different dataset (other bytes) is still compared,
with a note saying so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from koboi_eval.batch import RATE_METRICS, BatchResults
from koboi_eval.errors import BaselineError

KIND = "koboi-eval-baseline"
FORMAT_VERSION = 1
_EPSILON = 1e-9


def baseline_data(results: BatchResults) -> dict[str, Any]:
    return {
        "kind": KIND,
        "format": FORMAT_VERSION,
        "config": results.config,
        "dataset": results.dataset,
        "dataset_sha256": results.dataset_sha256,
        "metrics": results.metrics(),
        "rows": {r.id: dict(r.scores) for r in results.rows if r.status != "skipped"},
    }


def write(path: Path, results: BatchResults) -> None:
    """Store ``results`` as the baseline ``path`` (replaced whole, never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(baseline_data(results), indent=2, sort_keys=True) + "\n"
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def read(path: Path) -> dict[str, Any]:
    """A stored baseline, checked: a clear error when it is missing or not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineError(
            f"{path}: no such baseline; create it with --baseline {path} --save-baseline"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{path}: not a baseline (invalid JSON: {exc})") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise BaselineError(f'{path}: not a koboi eval baseline (no "kind": "{KIND}")')
    version = data.get("format")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise BaselineError(
            f"{path}: baseline format {version!r} is newer than this koboi-eval reads "
            f"({FORMAT_VERSION}); upgrade koboi-eval or save the baseline again"
        )
    metrics = data.get("metrics")
    if not isinstance(metrics, dict) or not all(
        isinstance(v, int | float) for v in metrics.values()
    ):
        raise BaselineError(f"{path}: the baseline's metrics are missing or not numbers")
    return data


@dataclass(frozen=True)
class Change:
    """One metric, before and after; ``regressed`` when it moved past its tolerance."""

    metric: str
    before: float | None
    after: float | None
    regressed: bool
    why: str = ""


@dataclass
class Comparison:
    changes: list[Change]
    #: (row id, scorer, before, after) for row scores that dropped.
    rows_dropped: list[tuple[str, str, float, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return any(c.regressed for c in self.changes)

    def data(self) -> dict[str, Any]:
        return {
            "regressed": self.regressed,
            "changes": [
                {
                    "metric": c.metric,
                    "before": c.before,
                    "after": c.after,
                    "regressed": c.regressed,
                    "why": c.why,
                }
                for c in self.changes
            ],
            "rows_dropped": [
                {"id": i, "scorer": s, "before": b, "after": a} for i, s, b, a in self.rows_dropped
            ],
            "notes": self.notes,
        }

    def render(self, path: Path | None = None) -> str:
        where = f" {path}" if path is not None else ""
        lines = [f"regression gate against the baseline{where}:"]
        width = max((len(c.metric) for c in self.changes), default=0)
        for change in self.changes:
            before = "-" if change.before is None else f"{change.before:.6g}"
            after = "-" if change.after is None else f"{change.after:.6g}"
            verdict = f"REGRESSED: {change.why}" if change.regressed else "ok"
            lines.append(f"  {change.metric.ljust(width)}  {before} -> {after}  {verdict}")
        if self.rows_dropped:
            lines.append("  rows whose score dropped:")
            lines += [f"    {i}: {s} {b:g} -> {a:g}" for i, s, b, a in self.rows_dropped]
        lines += [f"  note: {n}" for n in self.notes]
        lines.append("result: REGRESSED" if self.regressed else "result: no regression")
        return "\n".join(lines) + "\n"


def compare(
    baseline: dict[str, Any],
    results: BatchResults,
    *,
    tolerance: float = 0.0,
    cost_tolerance: float = 0.1,
    latency_tolerance: float | None = None,
) -> Comparison:
    """Compare ``results`` with a stored ``baseline`` (see the module docstring)."""
    before: dict[str, float] = {k: float(v) for k, v in baseline["metrics"].items()}
    after = results.metrics()
    changes: list[Change] = []
    for metric in RATE_METRICS:
        if metric not in before and metric not in after:
            continue
        old, new = before.get(metric), after.get(metric)
        if old is None:
            changes.append(Change(metric, None, new, False, "new: not in the baseline"))
        elif new is None:
            changes.append(
                Change(metric, old, None, True, "no longer measured (no row is scored by it)")
            )
        else:
            dropped = new < old - tolerance - _EPSILON
            why = f"dropped by {old - new:.4g} (tolerance {tolerance:g})" if dropped else ""
            changes.append(Change(metric, old, new, dropped, why))
    changes.append(_rise("cost_mean_usd", before, after, cost_tolerance))
    if latency_tolerance is not None:
        changes.append(_rise("latency_p95_s", before, after, latency_tolerance))
    notes = []
    if baseline.get("dataset_sha256") != results.dataset_sha256:
        notes.append(
            "the baseline was recorded on a different dataset; save it again once the change "
            "is intended (--save-baseline)"
        )
    dropped_rows: list[tuple[str, str, float, float]] = []
    old_rows = baseline.get("rows") if isinstance(baseline.get("rows"), dict) else {}
    for row in results.rows:
        previous = old_rows.get(row.id) if isinstance(old_rows, dict) else None
        if not isinstance(previous, dict):
            continue
        for scorer, value in sorted(row.scores.items()):
            old_value = previous.get(scorer)
            if isinstance(old_value, int | float) and value < old_value - _EPSILON:
                dropped_rows.append((row.id, scorer, float(old_value), value))
    return Comparison(changes, dropped_rows, notes)


def _rise(
    metric: str, before: dict[str, float], after: dict[str, float], fraction: float
) -> Change:
    """Lower is better: a regression when the value rose by more than ``fraction``."""
    old, new = before.get(metric), after.get(metric)
    if old is None or new is None:
        return Change(metric, old, new, False, "not measured on both sides")
    limit = old * (1 + fraction)
    risen = new > limit + _EPSILON
    why = f"rose above {limit:.6g} (+{fraction:.0%} of the baseline)" if risen else ""
    return Change(metric, old, new, risen, why)
