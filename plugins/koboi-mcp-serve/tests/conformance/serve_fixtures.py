"""``koboi mcp-serve`` with the conformance fixtures' plugin added: what the suite tests.

    python serve_fixtures.py CONFIG --http --port N --dev-no-auth

The same command as ``koboi mcp-serve``, in a plugin host that also holds the
test-only plugin of ``fixtures.py`` (never installed).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from koboi.plugins import PluginHost, use_host
from koboi_cli.app import app


def main() -> None:
    spec = importlib.util.spec_from_file_location(
        "koboi_conformance_fixtures", Path(__file__).with_name("fixtures.py")
    )
    assert spec is not None and spec.loader is not None
    fixtures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixtures)
    host = PluginHost()
    host.add_plugin(fixtures, "conformance-fixtures")
    with use_host(host):
        app(["mcp-serve", *sys.argv[1:]], prog_name="koboi")


if __name__ == "__main__":
    main()
