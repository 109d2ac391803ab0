"""Sandbox + resume: the crash demo (50 journaled steps, each appending a line with a
non-idempotent tool) run in the restricted sandbox, SIGKILLed mid-run, then resumed
from the library. No step runs twice: finished steps come from the journal, and a
step that was in flight when the process died is reported to the model, not repeated.

Linux only (the restricted sandbox: per-session workdirs, rlimits, no network).

    python examples/32_sandbox_resume.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import aclosing
from pathlib import Path

import anyio
import yaml

from koboi import KoboiAgent
from koboi.approval import AllowAllApprover
from koboi.events import FinalEvent

DEMO = Path(__file__).resolve().parents[1] / "configs" / "crash_demo.yaml"


def write_config(directory: Path) -> Path:
    config = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    config["sandbox"] = {"backend": "restricted", "workdir": "work", "network": "deny"}
    path = directory / "crash_demo.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def log_lines(directory: Path) -> list[str]:
    found = sorted(directory.glob("work/**/crash_demo.log"))
    return found[0].read_text().splitlines() if found else []


async def resume(config: Path) -> str:
    # --yes of the command: append_log is risk "moderate"; here every call is approved.
    output = ""
    agent = KoboiAgent.from_config(config, approver=AllowAllApprover())
    async with agent, aclosing(agent.resume("last")) as events:
        async for event in events:
            if isinstance(event, FinalEvent):
                output = str(event.result.output)
    return output


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        directory.chmod(0o711)  # the sessions' users (as root) pass through to their workdirs
        config = write_config(directory)
        env = {**os.environ, "KOBOI_DEMO_STEP_SECONDS": "0.05", "KOBOI_STORE": ""}
        run = subprocess.Popen(
            [sys.executable, "-m", "koboi", "run", str(config), "-m", "go", "--yes"],
            cwd=directory,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while len(log_lines(directory)) < 10 and run.poll() is None:
            if time.monotonic() > deadline:
                raise SystemExit("the demo did not start writing")
            time.sleep(0.05)
        run.send_signal(signal.SIGKILL)
        run.wait()
        print(f"killed after {len(log_lines(directory))} lines")
        os.chdir(directory)
        print(f"resumed: {anyio.run(resume, config)}")
        lines = log_lines(directory)
        twice = [line for line, n in Counter(lines).items() if n > 1]
        print(f"{len(lines)} lines, written twice: {twice or 'none'}")
        if twice:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
