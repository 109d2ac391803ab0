"""koboi-context's errors."""

from __future__ import annotations

from koboi.errors import KoboiError


class ContextOverflow(KoboiError):
    """Even the smallest request the strategy may send does not fit the window.

    Raised from ``before_model_call``: the run ends ``failed`` with this message,
    before any provider sees a request it would refuse.
    """
