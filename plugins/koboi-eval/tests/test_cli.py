"""``koboi eval-test`` through the real command, in new processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.e2e


def _start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "koboi_cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, "KOBOI_STRICT_PLUGINS": "1"},
    )


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """``koboi eval-test --mock evals/`` twice at once: the table, the JUnit XML and the JSON."""
    out = tmp_path_factory.mktemp("reports")
    processes = [
        _start(
            "eval-test",
            "--mock",
            "evals/",
            "--junit",
            str(out / f"{n}.xml"),
            "--json-report",
            str(out / f"{n}.json"),
            cwd=ROOT,
        )
        for n in (1, 2)
    ]
    runs: list[dict[str, Any]] = []
    for n, process in enumerate(processes, start=1):
        stdout, stderr = process.communicate(timeout=120)
        runs.append(
            {
                "code": process.returncode,
                "stdout": stdout,
                "stderr": stderr,
                "junit": (out / f"{n}.xml").read_bytes(),
                "json": (out / f"{n}.json").read_text(encoding="utf-8"),
            }
        )
    return runs


@pytest.mark.slow  # a real process: runs in this member's own session
@pytest.mark.timeout(150)
def test_the_repo_evals_give_byte_identical_reports(two_runs: list[dict[str, Any]]) -> None:
    first, second = two_runs
    for kind in ("stdout", "junit", "json"):
        assert first[kind] == second[kind], kind
    for run in two_runs:
        assert "Traceback" not in run["stdout"] + run["stderr"], run["stderr"]
    report = json.loads(first["json"])
    assert report["mock"] is True
    names = {c["id"] for c in report["cases"]}
    for expected in (
        "evals/quickstart.eval.py::adds two numbers with the calculator",
        "evals/governance.eval.py::chat mode refuses a destructive tool",
        "evals/governance.eval.py::approval is denied when there is no one to ask",
        "evals/crash_resume.eval.py::killed between a tool call's start and its effect, then resumed",
    ):
        assert expected in names
    # Nothing in a deterministic report changes from run to run: no timings, no ids.
    assert "duration_s" not in first["json"]
    assert b"time=" not in first["junit"]
    # The judge is reported as skipped, never as passed.
    quick = next(c for c in report["cases"] if c["name"] == "adds two numbers with the calculator")
    judged = [c for c in quick["checks"] if c["check"].startswith("judge(")]
    assert [c["status"] for c in judged] == ["skipped"]
    assert "SKIPPED CHECKS (not counted as passed)" in first["stdout"]
    assert ET.fromstring(first["junit"]).get("tests") == str(len(report["cases"]))


@pytest.mark.timeout(150)
def test_the_repo_evals_pass(two_runs: list[dict[str, Any]]) -> None:
    for run in two_runs:
        assert run["code"] == 0, run["stdout"] + run["stderr"]
    report = json.loads(two_runs[0]["json"])
    assert report["summary"]["failed"] == report["summary"]["error"] == 0
    assert report["summary"]["passed"] == report["summary"]["cases"]


FAILING = """
from koboi_eval import called_tool, case, completed, output_contains

case(
    "adds the wrong numbers",
    config=CALCULATOR,
    input="What is 2 + 2?",
    expect=[
        called_tool("calculator", args={"expression": "2 + 3"}),
        output_contains("5"),
        completed(),
    ],
)
case("a passing neighbour", config=CALCULATOR, input="What is 1 + 1?", expect=[completed()])
"""


def test_a_failing_case_fails_with_a_readable_explanation(
    koboi: Any, write_eval: Any, tmp_path: Path
) -> None:
    write_eval("deliberately_failing.eval.py", FAILING)
    junit = tmp_path / "report.xml"
    result = koboi("eval-test", "--mock", ".", "--junit", str(junit), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    expected = """\
FAILED deliberately_failing.eval.py::adds the wrong numbers
  FAIL called_tool("calculator", args={"expression": "2 + 3"})
       expected: at least one call to calculator with {"expression": "2 + 3"}
       actual:   the model called: calculator {"expression": "2 + 2"} (step 1)
       closest call, calculator {"expression": "2 + 2"} (step 1): expression: expected "2 + 3", got "2 + 2"
  FAIL output_contains("5")
       expected: the output contains "5"
       actual:   output "2 + 2 = 4"
  ok   completed()
"""
    assert expected in result.stdout
    assert "passed  deliberately_failing.eval.py::a passing neighbour" in result.stdout
    assert result.stdout.rstrip().endswith("2 case(s): 1 passed, 1 failed, 0 skipped, 0 errors")
    failure = ET.parse(junit).getroot().find(".//testcase[@name='adds the wrong numbers']/failure")
    assert failure is not None
    assert 'expected: at least one call to calculator with {"expression": "2 + 3"}' in (
        failure.text or ""
    )
    # The control: the passing case alone exits 0.
    alone = koboi("eval-test", "--mock", ".", "-k", "neighbour", cwd=tmp_path)
    assert alone.returncode == 0, alone.stdout + alone.stderr


def test_a_broken_eval_file_is_reported_and_the_rest_still_run(
    koboi: Any, write_eval: Any, tmp_path: Path
) -> None:
    write_eval("broken.eval.py", "from koboi_eval import case\ncase('x', config=CALCULATOR)\n")
    write_eval(
        "fine.eval.py",
        "from koboi_eval import case, completed\n"
        "case('fine', config=CALCULATOR, input='1 + 1', expect=[completed()])\n",
    )
    result = koboi("eval-test", "--mock", cwd=tmp_path)  # default: evals/, missing here
    assert result.returncode == 1
    assert "error: evals: no such file or directory" in result.stderr
    result = koboi("eval-test", "--mock", ".", cwd=tmp_path)
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    assert "error   broken.eval.py" in result.stdout
    assert (
        "broken.eval.py:3: TypeError: case() missing 1 required keyword-only argument: 'expect'"
        in result.stdout
    )
    assert "passed  fine.eval.py::fine" in result.stdout


def test_usage_errors_are_one_line(koboi: Any, tmp_path: Path, write_eval: Any) -> None:
    write_eval(
        "one.eval.py",
        "from koboi_eval import case, completed\n"
        "case('one', config=CALCULATOR, input='1 + 1', expect=[completed()])\n",
    )
    nothing = koboi("eval-test", "--mock", ".", "-k", "zzz", cwd=tmp_path)
    assert nothing.returncode == 1
    assert nothing.stderr.strip() == "error: no eval cases matched -k 'zzz' in ."
    other = tmp_path / "notes.txt"
    other.write_text("", encoding="utf-8")
    wrong = koboi("eval-test", str(other), cwd=tmp_path)
    assert wrong.returncode == 1
    assert "not an eval file" in wrong.stderr and "Traceback" not in wrong.stderr


def test_the_commands_are_listed_without_loading_them(koboi: Any) -> None:
    result = koboi("--help")
    assert result.returncode == 0
    assert "eval-test" in result.stdout and "eval " in result.stdout
    # Loaded as a plugin, hooks it defines for others included: still nothing heavy.
    code = (
        "import sys, koboi_eval.plugin; from koboi.plugins import PluginHost; "
        "host = PluginHost(load_entry_points=False); host.add_plugin(koboi_eval.plugin, 'eval'); "
        "host.load(); assert host.hook_owner('koboi_eval_register_checks') == 'eval'; "
        "print(sorted(m for m in ('pydantic', 'typer', 'koboi_eval.cli', 'koboi_eval.checks', "
        "'koboi.agent') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert loaded.stdout.strip() == "[]"
