"""``koboi --help`` with every first-party plugin installed imports only what listing the
commands needs: each plugin's ``plugin.py`` and what it truly needs at load (the hooks
plugins define for each other), nothing a command, an agent or a catalog needs."""

from __future__ import annotations

import re
import subprocess
import sys


def test_help_imports_nothing_it_does_not_use() -> None:
    shown = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "koboi_cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "Usage: koboi" in shown.stdout
    imported = set(re.findall(r"^import time:.*\|\s+(\S+)$", shown.stderr, re.MULTILINE))
    assert "koboi.plugins" in imported  # control: the parse found the plugin host
    heavy = {
        "pydantic",
        "yaml",
        "tomllib",  # the install hints are data read with the catalog, never for --help
        "httpx",
        "sqlalchemy",
        "fastapi",
        "koboi.config",
        "koboi.loop",
        "koboi.agent",
    }
    assert not heavy & imported, sorted(heavy & imported)
    # A plugin package's version is read from its metadata, never by importing it.
    versions = sorted(m for m in imported if m.endswith("._version") and m.startswith("koboi_"))
    assert versions == ["koboi_cli._version"], versions
