"""The click API typer is built on.

typer >= 0.2x vendors click as ``typer._click``; older releases use the click
distribution. Everything in koboi-cli that needs click classes (contexts,
commands, exceptions) imports them from here, so that difference lives in one
place.
"""

from __future__ import annotations

try:
    from typer import _click as click
except ImportError:  # pragma: no cover - typer releases that depend on click
    import click  # type: ignore[no-redef, import-not-found, unused-ignore]

__all__ = ["click"]
