"""Every numbered example (examples/NN_*.py) runs offline and prints what it promises.

They run as the README says (``python examples/NN_name.py``), two at a time, from a
directory outside the checkout (an example must not depend on the working directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("[0-9][0-9]_*.py"))

#: What each example must print (a line of it, or a part of one).
EXPECT = {
    "01_basic_chat.py": ["2 + 2 = 4", "outcome completed", "3 * 3 = 9"],
    "02_tool_use.py": ["-> calculator", "<- 42", "answer: (17 + 4) * 2 = 42", "= 42"],
    "07_guardrails.py": ["completed 'Hello", "more than the 80 allowed", "prompt injection"],
    "11_policy.py": [
        "append_log: ran: appended ok-1",
        "append_log: refused by policy: secrets stay out of the log",
        "append_log: refused by approval",
        "calculator: ran: 36",
    ],
    "14_custom_tools.py": ["['shout', 'word_count']", "4 words.", "HELLO! HELLO!"],
    "21_server_jobs.py": ["job completed: Summary of the Q3 report:", "sse tool_call", "sse final"],
    "30_eval_test.py": ["3 case(s): 3 passed, 0 failed"],
    "32_sandbox_resume.py": ["resumed: Wrote 50 lines.", "written twice: none"],
    "36_capture_replay.py": ["ran: 6 * 7 = 42", "replay: identical"],
}


def test_every_example_has_expectations() -> None:
    assert sorted(p.name for p in EXAMPLES) == sorted(EXPECT)


def _run(path: Path, cwd: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KOBOI_STORE", "KOBOI_DEMO"))}
    env["KOBOI_STRICT_PLUGINS"] = "1"
    done = subprocess.run(
        [sys.executable, str(path)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    return path, done


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_example_runs_offline(tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda p: _run(p, tmp_path), EXAMPLES))
    problems = []
    for path, done in results:
        output = done.stdout + done.stderr
        missing = [line for line in EXPECT[path.name] if line not in done.stdout]
        if done.returncode != 0 or missing or "Traceback" in output:
            problems.append(f"{path.name}: exit {done.returncode}, missing {missing}\n{output}")
    assert not problems, "\n\n".join(problems)
    assert not (tmp_path / ".koboi").exists(), "an example wrote into the working directory"
