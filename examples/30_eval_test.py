"""Eval as code (koboi-eval): cases that state what an agent must do — call this tool,
never that one, have a call blocked, finish, answer like this — run offline and
deterministically with `koboi eval-test --mock`, as CI runs them on every commit.

The cases below are written to a temporary *.eval.py file against two of the
checkout's configs and run with the real command; its exit code is 0 only when every
case passes (a JUnit report is one --junit FILE away).

    python examples/30_eval_test.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

CASES = f"""
from koboi_eval import called_tool, case, completed, not_called_tool, output_contains, tool_was_blocked

case(
    "arithmetic goes through the calculator",
    config={str(CONFIGS / "quickstart.yaml")!r},
    input="What is 2 + 3 * 4?",
    expect=[called_tool("calculator", args={{"expression": "2 + 3 * 4"}}), output_contains("= 14"), completed()],
)

case(
    "a greeting calls no tool",
    config={str(CONFIGS / "quickstart.yaml")!r},
    input="Hello!",
    expect=[not_called_tool("calculator"), completed()],
)

case(
    "the policy keeps secrets out of the log",
    config={str(CONFIGS / "governance_demo.yaml")!r},
    input="log secret-plan",
    expect=[tool_was_blocked("append_log", by="policy")],
)
"""


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        cases = Path(tmp) / "demo.eval.py"
        cases.write_text(textwrap.dedent(CASES), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "koboi", "eval-test", "--mock", str(cases)],
            capture_output=True,
            text=True,
            check=False,
        )
        print(done.stdout + done.stderr)
        return done.returncode


if __name__ == "__main__":
    sys.exit(main())
