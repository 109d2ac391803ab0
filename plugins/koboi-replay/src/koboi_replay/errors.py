"""The errors of koboi-replay: all :class:`koboi.errors.KoboiError`, so the CLI shows one line."""

from __future__ import annotations

from koboi.errors import KoboiError


class BundleError(KoboiError):
    """A file is not a bundle this koboi can trust: unreadable, damaged, newer, or tampered with."""


class CaptureError(KoboiError):
    """A session (or a config) cannot be frozen into a bundle as asked."""


class ReplayError(KoboiError):
    """A bundle cannot be replayed here (its config does not load, a run cannot start...)."""


class WorkflowError(KoboiError):
    """A stored workflow cannot be imported, found or removed as asked."""
