"""``append_log``: append a line to ``crash_demo.log`` — an effect that must happen once."""

from __future__ import annotations

import os
import time
from pathlib import Path

from koboi.errors import ToolError
from koboi.tools import Risk, ToolContext, tool
from koboi_tools_demo import hooks

LOG_NAME = "crash_demo.log"
#: Seconds each call takes (the "work" before the write); tests and benchmarks lower it.
STEP_SECONDS = "KOBOI_DEMO_STEP_SECONDS"
DEFAULT_STEP_SECONDS = 0.1


def step_seconds() -> float:
    raw = os.environ.get(STEP_SECONDS, "").strip()
    return float(raw) if raw else DEFAULT_STEP_SECONDS


@tool(risk=Risk.MODERATE, idempotent=False)
def append_log(line: str, ctx: ToolContext) -> str:
    """Append one line to crash_demo.log in the working directory (not idempotent).

    Args:
        line: The text to append, without a newline, e.g. "step-3".
    """
    if "\n" in line or "\r" in line:
        raise ToolError("line must be a single line (no newline characters)")
    directory = ctx.workdir if ctx.workdir is not None else Path.cwd()
    time.sleep(step_seconds())
    hooks.pause_if_asked(hooks.BEFORE_EFFECT, line, directory, "before")
    with open(directory / LOG_NAME, "a", encoding="utf-8") as log:
        log.write(line + "\n")
        log.flush()
        os.fsync(log.fileno())
    hooks.pause_if_asked(hooks.AFTER_EFFECT, line, directory, "after")
    return f"appended {line}"
