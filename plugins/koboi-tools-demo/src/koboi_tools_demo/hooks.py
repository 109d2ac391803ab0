"""Test hooks of the crash demo: stop the process at a precise point so a test can kill it.

Each hook is off unless its environment variable is set. When a hook fires it
writes a marker file (so the test knows the process has reached the point) and
then sleeps (``KOBOI_DEMO_PAUSE_SECONDS``, default one hour) until it is killed.

``KOBOI_DEMO_PAUSE_BEFORE_EFFECT=step-7``
    ``append_log`` pauses when asked to append the line ``step-7``, after its
    ``tool_call_started`` event is committed and before the line is written.
``KOBOI_DEMO_PAUSE_AFTER_EFFECT=step-7``
    ``append_log`` pauses after ``step-7`` was written and fsynced, before it
    returns (so before ``tool_call_finished`` is journaled).
``KOBOI_DEMO_PAUSE_IN_MODEL_CALL=7``
    An interceptor pauses in ``after_model_call`` of model call (step) 7: the
    journal's last event is that step's ``model_call_started``, the model's
    answer is not recorded — to the journal, the process died mid model call.
``KOBOI_DEMO_PAUSE_MARKER=/path``
    Where the marker goes; default ``crash_demo.paused`` in the tool's working
    directory (the current directory for the model-call hook). It holds one
    line: ``before step-7``, ``after step-7`` or ``model 7``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from koboi.interceptors import Interceptor, RunInfo
from koboi.messages import ModelResponse

BEFORE_EFFECT = "KOBOI_DEMO_PAUSE_BEFORE_EFFECT"
AFTER_EFFECT = "KOBOI_DEMO_PAUSE_AFTER_EFFECT"
IN_MODEL_CALL = "KOBOI_DEMO_PAUSE_IN_MODEL_CALL"
MARKER = "KOBOI_DEMO_PAUSE_MARKER"
PAUSE_SECONDS = "KOBOI_DEMO_PAUSE_SECONDS"
MARKER_NAME = "crash_demo.paused"


def pause_in_model_call_step() -> int | None:
    raw = os.environ.get(IN_MODEL_CALL, "").strip()
    return int(raw) if raw else None


def pause_if_asked(variable: str, line: str, directory: Path, label: str) -> None:
    """Pause (write the marker, then sleep) when ``$variable`` names ``line``."""
    if os.environ.get(variable, "").strip() != line:
        return
    pause(directory, f"{label} {line}")


def pause(directory: Path, what: str) -> None:
    marker = Path(os.environ.get(MARKER) or directory / MARKER_NAME)
    marker.write_text(what + "\n", encoding="utf-8")
    time.sleep(float(os.environ.get(PAUSE_SECONDS) or 3600))


class PauseInModelCall(Interceptor):
    """Holds one model call's answer back, so a test can kill the process "in" that call."""

    name = "tools-demo-pause"
    priority = 10_000

    async def after_model_call(self, response: ModelResponse, run: RunInfo) -> None:
        if run.step == pause_in_model_call_step():
            # Blocking on purpose: the process must not make progress of any kind.
            pause(Path.cwd(), f"model {run.step}")
        return None
