"""koboi hooks of koboi-replay. Imports nothing heavy: every target is an import path."""

from __future__ import annotations

from collections.abc import Callable

from koboi.hookspecs import hookimpl


@hookimpl
def koboi_register_commands(register: Callable[..., None]) -> None:
    register(
        "capture",
        "koboi_replay.cli:capture_app",
        help="Freeze a finished or interrupted session into a bundle (replayable offline).",
    )
    register(
        "export",
        "koboi_replay.cli:export_app",
        help="Export a config as a reusable workflow bundle.",
    )
    register(
        "import",
        "koboi_replay.cli:import_app",
        help="Verify a workflow bundle and keep it in the store.",
    )
    register(
        "workflows",
        "koboi_replay.cli:workflows_app",
        help="List, show, export and delete stored workflows.",
    )


@hookimpl
def koboi_register_run_sources(register: Callable[..., None]) -> None:
    register(
        "bundle",
        "koboi_replay.run_source:run",
        suffixes=(".koboi",),
        description="koboi bundles: replay a captured run (--replay-mode replay) or run a "
        "bundle's config (-m).",
    )
