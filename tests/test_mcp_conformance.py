"""The official MCP conformance suite against ``koboi mcp-serve`` and koboi's MCP client.

One test per side and spec version (``tests/mcp_conformance.py`` does the work): it
fails on any failure the expected-failures list does not name, and on any listed
failure that passes. Offline: the suite and Node 22 are npm packages ``.ci/run``
installs into ``.ci/node_modules``; their test servers and ours are on 127.0.0.1.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "mcp_conformance", Path(__file__).with_name("mcp_conformance.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


conformance = _load()


def _require_suite() -> None:
    missing = conformance.available()
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{missing} (CI is set, so this is a failure, not a skip)")
    pytest.skip(missing)


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    _require_suite()
    process, url = conformance._start_server()
    try:
        yield url
    finally:
        process.kill()
        process.wait()


def test_every_expected_failure_says_why() -> None:
    entries = conformance.expected_failures()
    assert set(entries) <= set(conformance.SIDES)
    for side, versions in entries.items():
        assert set(versions) <= {*conformance.VERSIONS, "extension"}, side


@pytest.mark.parametrize("version", conformance.VERSIONS)
def test_koboi_mcp_serve_passes_the_server_scenarios(served: str, version: str) -> None:
    outcome = conformance.run_side("server", version, url=served)
    print(outcome.line())
    assert outcome.ok, f"failed: {outcome.scenarios_failed}\n{outcome.output[-4000:]}"
    assert outcome.scenarios_passed


@pytest.mark.parametrize("version", conformance.VERSIONS)
def test_koboi_as_mcp_client_passes_the_client_scenarios(version: str) -> None:
    _require_suite()
    outcome = conformance.run_side("client", version)
    print(outcome.line())
    assert outcome.ok, f"failed: {outcome.scenarios_failed}\n{outcome.output[-4000:]}"
    assert outcome.scenarios_passed


@pytest.mark.parametrize("scenario", conformance.CLIENT_EXTENSIONS)
def test_koboi_as_mcp_client_passes_the_auth_extensions(scenario: str) -> None:
    _require_suite()
    outcome = conformance.run_side("client", "extension", scenario=scenario)
    print(outcome.line())
    assert outcome.ok and outcome.scenarios_passed == [scenario], outcome.output[-4000:]


def test_the_script_runs_from_the_command_line() -> None:
    """``uv run python tests/mcp_conformance.py --help``: the script a person runs."""
    shown = subprocess.run(
        [sys.executable, str(Path(conformance.__file__)), "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "server" in shown.stdout and "client" in shown.stdout
