"""The plugin's registration: entry point, the ``server`` section, the commands, light imports."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import anyio
import pytest

from koboi.config import load_config
from koboi.errors import ConfigError
from koboi.plugins import default_host
from koboi_server.hub import Committed, Delta, Hub
from koboi_server.settings import ServerSettings

AGENT_ON_MEMORY = """
    agent: {name: served}
    llm: {provider: scripted}
    store: {url: "memory://"}
"""


def test_entry_point_is_declared() -> None:
    (ep,) = [ep for ep in entry_points(group="koboi.plugins") if ep.name == "server"]
    assert ep.value == "koboi_server.plugin"


def test_importing_the_hooks_loads_neither_fastapi_nor_pydantic() -> None:
    code = (
        "import sys, koboi_server.plugin, koboi_server; "
        "print(sorted(m for m in ('fastapi', 'pydantic', 'uvicorn', 'starlette') "
        "if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_help_lists_the_commands_without_importing_fastapi() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['koboi', '--help']\n"
        "from koboi_cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', [m for m in ('fastapi', 'uvicorn', 'pydantic') if m in sys.modules],"
        " file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert "serve" in result.stdout and "keys" in result.stdout
    assert result.stderr.strip().endswith("LOADED []"), result.stderr


def test_every_setting_is_described() -> None:
    for name, field in ServerSettings.model_fields.items():
        assert field.description, name


def test_the_server_section_is_validated(write_config: Callable[..., Path]) -> None:
    good = write_config(extra="server: {port: 9000, keepalive_seconds: 5}\n", name="good.yaml")
    section = load_config(good, default_host().catalog()).section("server")
    assert isinstance(section, ServerSettings)
    assert section.port == 9000 and section.keepalive_seconds == 5
    bad = write_config(extra="server: {prot: 9000, max_body_bytes: 10}\n", name="bad.yaml")
    with pytest.raises(ConfigError) as caught:
        load_config(bad, default_host().catalog())
    text = str(caught.value)
    assert "server.prot" in text and "server.max_body_bytes" in text


def test_serve_refuses_what_it_cannot_serve_with_one_line(
    write_config: Callable[..., Path],
) -> None:
    from typer.testing import CliRunner

    from koboi_cli.app import app

    def serve(*args: str) -> Any:
        return CliRunner().invoke(app, ["serve", *args])

    config = write_config()
    public = serve(str(config), "--host", "0.0.0.0", "--dev-no-auth")
    assert public.exit_code != 0 and "dev_no_auth" in public.stderr
    assert "Traceback" not in public.stderr
    missing = serve(str(config.parent / "nope.yaml"))
    assert missing.exit_code != 0 and "nope.yaml" in missing.stderr
    assert "Traceback" not in missing.stderr
    broken = write_config(extra="server: {workers: 0}\n", name="broken.yaml")
    result = serve(str(broken))
    assert result.exit_code != 0 and "server.workers" in result.stderr
    memory = write_config(AGENT_ON_MEMORY, name="memory.yaml")
    several = serve(str(memory), "--workers", "2")
    assert several.exit_code != 0 and "several workers" in several.stderr


def test_the_hub_replays_the_text_of_the_call_in_progress_to_a_late_subscriber() -> None:
    async def main() -> None:
        hub = Hub()
        early = hub.subscribe("s")
        hub.run_started("s")
        hub.committed("s", 5, model_call_step=1)
        hub.text("s", 1, "Hello, ")
        hub.text("s", 1, "wor")
        late = hub.subscribe("s")
        hub.text("s", 1, "ld")
        assert early.take() == [
            Committed(5),
            Delta(5, 1, 0, "Hello, "),
            Delta(5, 1, 7, "wor"),
            Delta(5, 1, 10, "ld"),
        ]
        # Everything so far as one delta at offset 0, then the rest: a client that had
        # "Hello, " drops what it has by offset, and nothing is missing.
        assert late.take() == [Delta(5, 1, 0, "Hello, wor"), Delta(5, 1, 10, "ld")]
        hub.committed("s", 7, model_call_step=2)  # the next call starts: a new text
        hub.text("s", 1, "stale")  # a piece for a call that ended is never sent
        assert late.take() == [Committed(7)]
        hub.run_ended("s")
        assert not hub.local("s")
        late.close()
        early.close()
        assert hub.subscribe("t").take() == []

    anyio.run(main)
