"""Correcting an estimate with the provider's own count of the same request.

Where no tokenizer is shipped (Claude, Workers AI, local models), the counter is
a heuristic; but the provider reports how many input tokens each request really
took (``ModelResponse.usage.input_tokens``). The ratio of that count to the
estimate of the same request is the factor by which to scale later estimates.

It must change a run's decisions only through what is journaled, or a resumed or
replayed run would send other requests than the first: :meth:`Calibration.observe`
says when the factor moved enough (by more than ``tolerance``) to be recorded,
and only a recorded factor is used (:meth:`Calibration.apply`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Bounds of the factor: a reported count this far off is not about the tokenizer
#: (a provider that counts cached or image tokens differently) and is not followed.
LOWEST, HIGHEST = 0.5, 3.0


@dataclass
class Calibration:
    """The factor applied to a heuristic's estimates (1.0: none)."""

    factor: float = 1.0
    tolerance: float = 0.1

    def apply(self, estimate: int) -> int:
        """``estimate`` corrected by the recorded factor (rounded up)."""
        return estimate if self.factor == 1.0 else math.ceil(estimate * self.factor)

    def observe(self, estimated: int, reported: int) -> float | None:
        """The provider reported ``reported`` input tokens for a request estimated at
        ``estimated``: the new factor to record, or None when the recorded one holds."""
        if estimated <= 0 or reported <= 0:
            return None
        measured = min(HIGHEST, max(LOWEST, reported / estimated))
        if abs(measured - self.factor) <= self.tolerance * self.factor:
            return None
        return round(measured, 3)
