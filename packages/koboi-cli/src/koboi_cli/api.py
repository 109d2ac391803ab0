"""What a plugin's command may use of koboi-cli: the one supported import for plugins.

A plugin adds a command with ``koboi_register_commands`` (see docs/plugins/cli.md).
Its command should look and fail like the built-in ones; this module is how:

- **Arguments**: :data:`ConfigArgument` (a positional ``CONFIG``),
  :data:`ConfigOption` (``--config``, for commands that read a store), and
  :data:`JsonOption` (``--json``: one JSON document on stdout, nothing else).
- **Output**: :func:`write` (flushes), :func:`print_json`, :func:`table`,
  :class:`Style` (colour only on a terminal that wants it), and :func:`err`,
  :func:`warn`, :func:`note` for ``error:`` / ``warning:`` / ``note:`` lines on stderr.
  What shows a journal's or a tool's data goes through :func:`mask_secrets` /
  :func:`redact_arguments` first.
- **Errors**: raise :class:`CliError` (or any :class:`koboi.errors.KoboiError`) for
  anything the user can fix: one ``error:`` line and exit code 1, no traceback
  unless ``--debug``.
- **The plugin host and the store**: :func:`get_host`, and :func:`store_target` /
  :func:`open_store`, which find the store by the same rule as every command.
- **Running a config** as ``koboi run`` does (printing, approvals, exit code):
  :func:`run_config`.
- **Asking a person for approvals** in a UI of the plugin's own:
  :class:`PersonApprover` (one question at a time, ``always`` remembered, each
  decision bound to its request); the subclass implements ``ask``, returning an
  :data:`Answer`.

Everything else in ``koboi_cli`` is internal and may change.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from koboi_cli.approver import Answer, PersonApprover
from koboi_cli.cmd_run import run_config
from koboi_cli.errors import CliError
from koboi_cli.host import get_host
from koboi_cli.redact import mask_secrets, mask_strings, redact_arguments, redact_event_data
from koboi_cli.stores import StoreTarget, open_store, store_target
from koboi_cli.style import Style, err, table, warn, write

__all__ = [
    "Answer",
    "CliError",
    "ConfigArgument",
    "ConfigOption",
    "JsonOption",
    "PersonApprover",
    "StoreTarget",
    "Style",
    "err",
    "get_host",
    "mask_secrets",
    "mask_strings",
    "note",
    "open_store",
    "print_json",
    "redact_arguments",
    "redact_event_data",
    "run_config",
    "store_target",
    "table",
    "warn",
    "write",
]

ConfigArgument = Annotated[
    Path, typer.Argument(metavar="CONFIG", help="The agent's YAML config file.", show_default=False)
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="A config whose store to use. Without one: KOBOI_STORE, else the default store "
        "in the working directory (docs/config.md, 'Finding the store').",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def note(message: str) -> None:
    """A ``note:`` line on stderr."""
    err(message, prefix="note")


def print_json(value: Any) -> None:
    """``value`` as one JSON document on stdout (what ``--json`` prints)."""
    write(sys.stdout, json.dumps(value, ensure_ascii=False, indent=2, default=str) + "\n")
