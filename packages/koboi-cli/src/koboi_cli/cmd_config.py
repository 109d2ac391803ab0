"""``koboi validate`` and ``koboi config schema``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from koboi_cli import host
from koboi_cli.style import Style, err, write


def validate(config: Path) -> None:
    """Print an ``ok:`` line, or raise the ConfigError (every problem, one line each)."""
    from koboi.config import load_config

    loaded = load_config(config, host.get_host().catalog())
    count = len(loaded.tools.builtin)
    tools = f"{count} tool{'' if count == 1 else 's'}"
    style = Style(sys.stdout)
    write(
        sys.stdout,
        f"{style.green('ok:')} {config} is valid (agent {loaded.agent.name}, "
        f"provider {loaded.llm.provider}, {tools})\n",
    )


def schema(output: Path | None) -> None:
    """Write the JSON schema of a config, for the kernel and the installed plugins."""
    from koboi.config import config_schema

    text = json.dumps(config_schema(host.get_host().catalog()), indent=2) + "\n"
    if output is None:
        write(sys.stdout, text)
        return
    output.write_text(text, encoding="utf-8")
    err(f"wrote the config schema to {output}", prefix="ok")
