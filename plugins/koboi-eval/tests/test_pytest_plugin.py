"""The pytest integration, in real pytest processes on a project of their own."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

# Each test runs pytest in a subprocess: slow, so they run in this member's own session.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EVALS = """
from koboi_eval import called_tool, case, completed, judge, output_contains

case("adds", config=CALCULATOR, input="What is 2 + 2?", tags=["math"],
     expect=[called_tool("calculator", args={"expression": "2 + 2"}), completed()])
case("adds wrongly", config=CALCULATOR, input="What is 2 + 2?",
     expect=[output_contains("5")])
case("judged only", config=CALCULATOR, input="What is 1 + 1?", expect=[judge("says 2")])
case("judged too", config=CALCULATOR, input="What is 1 + 1?",
     expect=[completed(), judge("says 2")])
"""

PLAIN_TEST = "def test_plain():\n    assert True\n"


def _plugin_options() -> list[str]:
    """``-p koboi_eval.pytest_plugin`` when the entry point is not installed (an environment
    synced before koboi-eval declared it); nothing when pytest loads it by itself."""
    installed = any(ep.value == "koboi_eval.pytest_plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "koboi_eval.pytest_plugin"]


def pytest_in(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *_plugin_options(), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=project,
        env={**os.environ, "KOBOI_STRICT_PLUGINS": "1", "PYTEST_ADDOPTS": ""},
    )


@pytest.fixture
def project(tmp_path: Path, write_eval: Any) -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (tmp_path / "test_plain.py").write_text(PLAIN_TEST, encoding="utf-8")
    write_eval("calc.eval.py", EVALS)
    return tmp_path


def test_inert_unless_enabled(project: Path) -> None:
    result = pytest_in(project, "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert "calc.eval.py" not in result.stdout


def test_cases_are_tests_with_the_same_explanations(project: Path) -> None:
    junit = project / "junit.xml"
    result = pytest_in(project, "--koboi-evals", "-rs", f"--junitxml={junit}")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "2 failed" not in output
    assert "1 failed, 3 passed, 1 skipped" in output, output
    assert "FAILED calc.eval.py::adds wrongly" in output
    assert '  FAIL output_contains("5")' in output
    assert 'actual:   output "2 + 2 = 4"' in output
    # A case whose only check could not run is skipped, with the reason; never passed.
    assert "the judge needs a real model, and --mock runs offline" in output
    testcase = ET.parse(junit).getroot().find(".//testcase[@name='judged too']")
    assert testcase is not None
    properties = {p.get("name"): p.get("value") for p in testcase.iter("property")}
    assert properties["skipped_check"].startswith('judge("says 2"): the judge needs a real model')


def test_enabled_from_the_ini_and_selected_by_tag(project: Path) -> None:
    (project / "pytest.ini").write_text("[pytest]\nkoboi_evals = true\n", encoding="utf-8")
    result = pytest_in(project, "-q", "-k", "math")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout and "deselected" in result.stdout


def test_a_broken_eval_file_is_a_collection_error(project: Path, write_eval: Any) -> None:
    write_eval("broken.eval.py", "from koboi_eval import case\ncase('x', config=CALCULATOR)\n")
    result = pytest_in(project, "--koboi-evals", "-q", "broken.eval.py")
    assert result.returncode != 0
    assert "broken.eval.py:3: TypeError: case() missing 1 required keyword-only argument" in (
        result.stdout
    )
