"""The crash demo (configs/crash_demo.yaml), really crashed: its process is SIGKILLed and a
new process resumes the session from its journal.

append_log is not idempotent: the call that was in flight when the process died must not
run again, and every other line must be in the log exactly once.
"""

from __future__ import annotations

from koboi_eval import (
    case,
    completed,
    file_equals,
    kill_after,
    output_contains,
    tool_ran,
    tool_was_interrupted,
    was_resumed,
)

DEMO = "../configs/crash_demo.yaml"
STEPS = 50
# The demo's tool sleeps 0.1 s a step to be killable by hand; evals kill it precisely.
FAST = {"KOBOI_DEMO_STEP_SECONDS": "0"}


def log_without(*missing: int) -> str:
    return "".join(f"step-{i}\n" for i in range(1, STEPS + 1) if i not in missing)


case(
    "killed between a tool call's start and its effect, then resumed",
    config=DEMO,
    input="go",
    approve="allow",  # as `koboi run ... --yes`: append_log is moderate
    env=FAST,
    # tool_call_started is committed after every decision, just before the effect.
    crash=kill_after("tool_call_started", name="append_log", arguments={"line": "step-17"}),
    expect=[
        was_resumed(),
        completed(),
        output_contains("Wrote 50 lines."),
        # In doubt after the crash: reported, and not run again (on_interrupted_tool: tell_model).
        tool_was_interrupted("append_log", args={"line": "step-17"}),
        tool_ran("append_log", args={"line": "step-17"}, times=1),
        tool_ran("append_log", times=STEPS),
        file_equals("crash_demo.log", log_without(17)),
    ],
)

case(
    "killed after a tool call finished, then resumed",
    config=DEMO,
    input="go",
    approve="allow",
    env=FAST,
    # The finished call is committed with the next model call's start: kill right there.
    crash=kill_after("model_call_started", step=31),
    expect=[
        was_resumed(),
        completed(),
        tool_ran("append_log", args={"line": "step-30"}, times=1),
        tool_ran("append_log", times=STEPS),
        file_equals("crash_demo.log", log_without()),
    ],
)

case(
    "runs to the end without a crash (control)",
    config=DEMO,
    input="go",
    approve="allow",
    env=FAST,
    expect=[
        completed(),
        output_contains("Wrote 50 lines."),
        tool_ran("append_log", times=STEPS),
        file_equals("crash_demo.log", log_without()),
    ],
)
