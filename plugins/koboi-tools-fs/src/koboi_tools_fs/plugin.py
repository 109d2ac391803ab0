"""koboi hooks of koboi-tools-fs: the ``tools_fs`` section and nine tool factories.

Only cheap imports here: the tools are built (and their modules imported)
when an agent that enables them is opened.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.tools import Tool

#: name -> what `koboi plugins` shows about it
DESCRIPTIONS: dict[str, str] = {
    "read_file": "Read a text file in pages (lines), confined to the session's workdir.",
    "write_file": "Create or replace a file atomically, confined to the session's workdir.",
    "edit_file": "Replace exact text in a file (once, or every occurrence).",
    "apply_patch": "Apply a unified diff to files in the workdir, all or nothing.",
    "list_dir": "List a directory of the workdir (symlinks not followed).",
    "glob": "Find paths in the workdir by glob pattern, with a cap on results.",
    "grep": "Search files in the workdir by regular expression, with caps.",
    "delete_file": "Delete a file (or an empty directory when asked) in the workdir.",
    "move_file": "Move or rename a file within the workdir.",
}


@hookimpl
def koboi_register_config_sections(register: Callable[..., None]) -> None:
    # Imported here: `koboi --help` collects commands without loading pydantic.
    from koboi_tools_fs.config import SECTION, FsSettings

    register(SECTION, FsSettings, description="Limits of the file tools (koboi-tools-fs).")


def create_tool(name: str, config: AgentConfig) -> Tool:
    """Tool factory: the tool ``name`` with the agent's ``tools_fs`` settings."""
    from koboi_tools_fs.config import settings_of
    from koboi_tools_fs.tools import make_tool

    return make_tool(name, settings_of(config))


@hookimpl
def koboi_register_tools(register: Callable[..., None]) -> None:
    for name, description in DESCRIPTIONS.items():
        register(name, partial(create_tool, name), description=description)
