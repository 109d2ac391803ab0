"""Turning exceptions into what the user sees: ``error: ...`` lines and exit codes.

A :class:`koboi.errors.KoboiError` (or a :class:`CliError`) is something the
user can fix: its message is printed as one ``error:`` line per line of text
(one per problem for a ``ConfigError``). Anything else is a bug: one
``error: internal error: ...`` line and a hint to rerun with ``--debug``.
With ``--debug`` (or ``KOBOI_DEBUG=1``) the traceback is printed first.
"""

from __future__ import annotations

import os
import sys
import traceback

from koboi_cli.style import err

DEBUG_KEY = "koboi.debug"
DEBUG_HINT = "rerun with --debug (or KOBOI_DEBUG=1) to see the traceback"


class CliError(Exception):
    """A user-facing error raised by the CLI itself (bad argument, unknown plugin id...)."""


def debug_from_env() -> bool:
    return os.environ.get("KOBOI_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


def error_lines(exc: BaseException) -> list[str] | None:
    """The ``error:`` lines for an expected error, or None when ``exc`` is a bug."""
    if isinstance(exc, CliError):
        return _split(str(exc))
    koboi_errors = sys.modules.get("koboi.errors")
    if koboi_errors is None:  # the kernel was never imported, so it cannot have raised
        return None
    if isinstance(exc, koboi_errors.ConfigError) and exc.problems:
        return [problem.render(exc.source) for problem in exc.problems]
    if isinstance(exc, koboi_errors.KoboiError):
        return _split(str(exc)) or [type(exc).__name__]
    return None


def report(exc: BaseException, *, debug: bool) -> int:
    """Print ``exc`` for the user and return the exit code (always 1)."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    lines = error_lines(exc)
    if lines is not None:
        for line in lines:
            err(line)
        return 1
    text = " ".join(str(exc).split())
    summary = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    err(f"internal error: {summary}")
    if not debug:
        err(DEBUG_HINT, prefix="hint")
    return 1


def _split(message: str) -> list[str]:
    return [line.strip() for line in message.strip().splitlines() if line.strip()]
