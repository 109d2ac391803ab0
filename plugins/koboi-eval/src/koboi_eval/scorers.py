"""Scorers of batch evaluation: each turns one dataset row and its run into a score in [0, 1].

A scorer applies to a row only when the row gives what it needs (an
``expected_output`` for ``exact_match``...). Each says why a row did not score
1, in one line, so a summary can point at the rows to look at. Latency and
cost are measured on every row and reported as figures, not scores.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from koboi_eval.matching import CallSpec, MadeCall, StringMatch, compare_calls, show

EXACT_MATCH = "exact_match"
CONTAINS = "contains"
REGEX = "regex"
TOOL_CALL_ACCURACY = "tool_call_accuracy"
#: Every scorer, in the order reports list them.
SCORERS = (EXACT_MATCH, CONTAINS, REGEX, TOOL_CALL_ACCURACY)


@dataclass(frozen=True)
class Score:
    """A row's score on one scorer, and why it is not 1 (empty when it is)."""

    value: float
    detail: str = ""


def _shown(text: str, limit: int = 200) -> str:
    return show(text if len(text) <= limit else text[:limit] + "…")


def exact_match(expected: str, output: str) -> Score:
    """1 when the output is the expected text (surrounding whitespace aside)."""
    if output.strip() == expected.strip():
        return Score(1.0)
    return Score(0.0, f"expected {_shown(expected)}, got {_shown(output)}")


def contains(expected: Sequence[str], output: str) -> Score:
    """1 when every expected piece of text is in the output."""
    missing = [piece for piece in expected if piece not in output]
    if not missing:
        return Score(1.0)
    return Score(0.0, f"missing {', '.join(show(m) for m in missing)} in {_shown(output)}")


def regex(pattern: str, output: str) -> Score:
    """1 when the regular expression is found in the output (``re.search``)."""
    if re.search(pattern, output):
        return Score(1.0)
    return Score(0.0, f"no match for {show(pattern)} in {_shown(output)}")


def tool_call_accuracy(
    expected: Sequence[CallSpec],
    made: Sequence[MadeCall],
    *,
    ordered: bool = False,
    strings: StringMatch = "exact",
) -> Score:
    """1 when the calls made are exactly the expected ones, compared BFCL-style
    (koboi_eval.matching): every expected call made, with matching arguments, and
    no other call; as a set unless ``ordered``."""
    comparison = compare_calls(expected, made, ordered=ordered, strings=strings)
    if comparison.exact:
        return Score(1.0)
    return Score(0.0, "; ".join(comparison.problems))


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(fraction * len(ordered))))
    return ordered[rank - 1]
