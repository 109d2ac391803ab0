"""The runner: cases in parallel (bounded), private stores and workdirs, skips, errors,
timeouts, and cases run in processes of their own — crashed for real and resumed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from koboi_eval import (
    CaseResult,
    RunOptions,
    case,
    check_that,
    completed,
    output_contains,
    run_case,
    run_cases,
    tool_ran,
    was_resumed,
)
from koboi_eval.loader import load_file

FILES_CONFIG = {
    "agent": {"name": "files", "mode": "act", "max_iterations": 4},
    "llm": {"provider": "scripted"},
    "tools": {"builtin": ["write_file"]},
}


def write_call(name: str) -> list[Any]:
    return [{"name": "write_file", "arguments": {"path": name, "content": name}}, f"wrote {name}"]


def run(made: Any, **options: Any) -> CaseResult:
    return anyio.run(run_case, made, RunOptions(**{"mock": True, **options}))


def test_cases_run_in_parallel_but_never_more_than_the_limit() -> None:
    active = 0
    most = 0

    async def slow_yes(request: Any) -> bool:
        nonlocal active, most
        active += 1
        most = max(most, active)
        await anyio.sleep(0.05)
        active -= 1
        return True

    cases = [
        case(
            f"case {n}",
            config=FILES_CONFIG,
            input="go",
            mock=write_call(f"f{n}.txt"),
            approve=slow_yes,
            expect=[tool_ran("write_file", args={"path": f"f{n}.txt", "content": f"f{n}.txt"})],
        )
        for n in range(6)
    ]
    results = anyio.run(run_cases, cases, RunOptions(mock=True, concurrency=2))
    assert [r.name for r in results] == [f"case {n}" for n in range(6)]
    assert all(r.status == "passed" for r in results), results
    assert most == 2


def test_without_a_scripted_model_mock_skips_and_says_why() -> None:
    live_only = {"llm": {"provider": "openai", "model": "gpt-4o-mini"}}
    skipped = run(case("x", config=live_only, input="hi", expect=[completed()]))
    assert skipped.status == "skipped"
    assert skipped.reason.startswith(
        "no scripted model for --mock: the config's provider is 'openai'"
    )
    # The control: the same case with a scripted model runs offline.
    ran = run(
        case("x", config=live_only, input="hi", mock=["hello"], expect=[output_contains("hello")])
    )
    assert ran.status == "passed", ran


def test_a_config_that_does_not_validate_is_an_error_not_a_traceback() -> None:
    bad = {"llm": {"provider": "scripted"}, "tools": {"builtin": ["no_such_tool"]}}
    result = run(case("x", config=bad, input="hi", expect=[completed()]))
    assert result.status == "error"
    assert "tools.builtin[0]: unknown tool 'no_such_tool'" in result.reason
    assert "Traceback" not in result.reason


def test_a_case_never_touches_the_configs_store_or_workdir(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    data = {
        **FILES_CONFIG,
        "sandbox": {"backend": "passthrough", "workdir": "work"},
    }
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = run(
        case(
            "isolated",
            config=config,
            input="go",
            mock=write_call("a.txt"),
            approve="allow",
            expect=[
                tool_ran("write_file"),
                check_that(
                    "the workdir is the case's own", lambda t: "koboi-eval-" in str(t.workdir)
                ),
            ],
        )
    )
    assert result.status == "passed", result
    # No store.url: the config alone would use .koboi/koboi.db beside it; the case did not.
    assert not (tmp_path / ".koboi").exists()
    assert not (tmp_path / "work").exists()

    # The control: the same config run directly does use both.
    from koboi.agent import KoboiAgent
    from koboi_scripted import ScriptedProvider

    async def direct() -> None:
        provider = ScriptedProvider.from_turns(write_call("a.txt"))
        from koboi.approval import AllowAllApprover

        async with KoboiAgent.from_config(
            config, provider=provider, approver=AllowAllApprover()
        ) as agent:
            await agent.run("go")

    anyio.run(direct)
    assert (tmp_path / ".koboi" / "koboi.db").exists()
    assert (tmp_path / "work" / "a.txt").read_text(encoding="utf-8") == "a.txt"


def test_temporary_paths_and_session_ids_are_normalised() -> None:
    result = run(
        case(
            "paths",
            config=FILES_CONFIG,
            input="go",
            mock=["done"],
            expect=[
                check_that("shows the workdir", lambda t: f"workdir {t.workdir}"),
                check_that("shows the session", lambda t: f"session {t.events[0].session_id}"),
            ],
        )
    )
    assert [c.actual for c in result.checks] == ["workdir <tmp>/workdir", "session <session>"]


def test_a_case_that_takes_too_long_fails_with_its_timeout() -> None:
    async def never(request: Any) -> bool:
        await anyio.sleep(60)
        return True

    made = case(
        "slow",
        config=FILES_CONFIG,
        input="go",
        mock=write_call("a"),
        approve=never,
        expect=[completed()],
        timeout=0.3,
    )
    result = run(made)
    assert result.status == "failed"
    assert result.reason.startswith("timed out after 0.3 s")
    assert run(made, timeout=0.2).reason.startswith("timed out after 0.2 s")


def test_a_case_skipped_on_purpose() -> None:
    result = run(
        case("later", config=FILES_CONFIG, input="x", expect=[completed()], skip="flaky upstream")
    )
    assert (result.status, result.reason) == ("skipped", "flaky upstream")


# -- in processes of their own ---------------------------------------------------------------


def test_env_reaches_the_case_and_nothing_else(write_eval: Any) -> None:
    path = write_eval(
        "env.eval.py",
        """
        from koboi_eval import case, output_contains
        case(
            "greets from the environment",
            config={"llm": {"provider": "scripted", "fallback": "${EVAL_TEST_GREETING}"}},
            input="hi",
            env={"EVAL_TEST_GREETING": "hello from env"},
            expect=[output_contains("hello from env")],
        )
        """,
    )
    (made,) = load_file(path)
    assert made.isolated
    result = run(made)
    assert result.status == "passed", result
    assert "EVAL_TEST_GREETING" not in os.environ


CRASH_FILE = """
from koboi_eval import (case, completed, file_equals, kill_after, output_contains, tool_ran,
                        tool_was_interrupted, was_resumed)

STEPS = [{"tool_calls": [{"name": "append_log", "arguments": {"line": f"step-{i}"}}]}
         for i in range(1, 6)] + ["Wrote 5 lines."]
CONFIG = {
    "agent": {"name": "crash", "mode": "act", "max_iterations": 10},
    "llm": {"provider": "scripted", "script": STEPS, "on_exhausted": "error"},
    "tools": {"builtin": ["append_log"]},
}

case(
    "resumed",
    config=CONFIG,
    input="go",
    approve="allow",
    env={"KOBOI_DEMO_STEP_SECONDS": "0"},
    crash=kill_after("tool_call_started", name="append_log", arguments={"line": "step-3"}),
    expect=[
        was_resumed(),
        completed(),
        output_contains("Wrote 5 lines."),
        tool_was_interrupted("append_log", args={"line": "step-3"}),
        tool_ran("append_log", args={"line": "step-3"}, times=1),
        tool_ran("append_log", times=5),
        file_equals("crash_demo.log", "step-1\\nstep-2\\nstep-4\\nstep-5\\n"),
    ],
)

case(
    "never reaches its kill point",
    config=CONFIG,
    input="go",
    approve="allow",
    crash=kill_after("tool_call_started", arguments={"line": "step-9"}),
    expect=[completed()],
)
"""


@pytest.mark.slow  # a real process: runs in this member's own session
@pytest.mark.e2e
def test_a_crash_case_is_killed_for_real_and_resumed_in_a_new_process(write_eval: Any) -> None:
    resumed, unreached = load_file(write_eval("crash.eval.py", CRASH_FILE))
    result = run(resumed)
    assert result.status == "passed", result
    assert result.outcome == "completed"
    # The control: the kill point must be reached, or the case is an error that says so.
    failed = run(unreached)
    assert failed.status == "error"
    assert failed.reason.startswith(
        'the run never reached the kill point kill_after("tool_call_started", '
        'arguments={"line": "step-9"}): its process ended first (exit code 0)'
    )


@pytest.mark.e2e
def test_a_crash_case_without_the_resume_would_not_pass(write_eval: Any) -> None:
    """The checks of the crash case do see the crash: was_resumed() fails on an uncrashed run."""
    source = CRASH_FILE.split('case(\n    "never', 1)[0].replace(
        '    crash=kill_after("tool_call_started", name="append_log", arguments={"line": "step-3"}),\n',
        "",
    )
    (made,) = load_file(write_eval("nocrash.eval.py", source))
    result = run(made)
    assert result.status == "failed"
    failed = {c.label: c for c in result.checks if c.status == "failed"}
    assert set(failed) == {
        "was_resumed()",
        'tool_was_interrupted("append_log", args={"line": "step-3"})',
        'file_equals("crash_demo.log", "step-1\\nstep-2\\nstep-4\\nstep-5\\n")',
    }
    assert was_resumed().label in failed
