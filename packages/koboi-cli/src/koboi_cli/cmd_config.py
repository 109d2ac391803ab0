"""``koboi validate`` and ``koboi config schema``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from koboi_cli import host
from koboi_cli.style import Style, err, write


def validate(config: Path, *, suggest: bool = False) -> None:
    """Print an ``ok:`` line, or raise the ConfigError (every problem, one line each).

    ``suggest``: also print, for each section written in another spelling (an alias a
    plugin registered), the same settings in koboi's own spelling, as YAML.
    """
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
    if not loaded.spellings:
        if suggest:
            write(sys.stdout, "suggest: every section is in koboi's own spelling\n")
        return
    if not suggest:
        names = ", ".join(s.alias for s in loaded.spellings)
        err(f"{names}: another spelling; koboi validate --suggest prints koboi's", prefix="note")
        return
    import yaml

    from koboi.secrets import mask_secrets

    for spelling in loaded.spellings:
        # A converted alias may hold a credential (tracing's keys become an Authorization
        # header): masked as anywhere a person sees it; the config keeps its ${VAR}.
        preferred = mask_secrets(
            yaml.safe_dump(
                {spelling.section: spelling.preferred}, sort_keys=False, default_flow_style=False
            )
        )
        write(
            sys.stdout,
            f"suggest: {spelling.alias}: is accepted; koboi's own spelling is:\n"
            + "".join(f"  {line}\n" for line in preferred.splitlines()),
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
