"""Every check against real runs (scripted model, real tools, memory store): it passes where
it should, and a failure says what was expected and what happened."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from koboi_eval import (
    CaseResult,
    RunOptions,
    called_tool,
    case,
    check_that,
    completed,
    cost_below,
    ended_with,
    file_contains,
    file_equals,
    file_exists,
    file_missing,
    judge,
    max_steps,
    not_called_tool,
    output_contains,
    output_matches,
    run_case,
    scripted,
    tool_ran,
    tool_was_blocked,
)

MakeCase = Callable[..., Any]

FILES_CONFIG = {
    "agent": {"name": "files", "mode": "act", "max_iterations": 4},
    "llm": {"provider": "scripted"},
    "tools": {"builtin": ["write_file", "read_file"]},
}
WRITE = [{"name": "write_file", "arguments": {"path": "a.txt", "content": "hello"}}, "Written."]


def run(made: Any, *, mock: bool = True, judge_config: Path | None = None) -> CaseResult:
    return anyio.run(run_case, made, RunOptions(mock=mock, judge_config=judge_config))


def only(result: CaseResult) -> Any:
    assert len(result.checks) == 1, result
    return result.checks[0]


def test_called_tool_passes_and_a_wrong_call_is_explained(calc_case: MakeCase) -> None:
    passed = run(calc_case(called_tool("calculator", args={"expression": "2 + 2"}, times=1)))
    assert passed.status == "passed", passed
    failed = run(calc_case(called_tool("calculator", args={"expression": "2 + 3"})))
    assert failed.status == "failed"
    check = only(failed)
    assert check.expected == 'at least one call to calculator with {"expression": "2 + 3"}'
    assert check.actual == 'the model called: calculator {"expression": "2 + 2"} (step 1)'
    assert check.reason == (
        'closest call, calculator {"expression": "2 + 2"} (step 1): '
        'expression: expected "2 + 3", got "2 + 2"'
    )


def test_called_tool_counts_calls_and_sees_when_no_tool_was_called(calc_case: MakeCase) -> None:
    twice = run(calc_case(called_tool("calculator", times=2)))
    assert only(twice).actual.startswith("1 such call(s); the model called: calculator")
    none = run(calc_case(called_tool("calculator"), text="hello"))
    assert only(none).actual == "the model called no tool"
    assert run(calc_case(not_called_tool("calculator"), text="hello")).status == "passed"


def test_not_called_tool_says_what_became_of_the_calls(calc_case: MakeCase) -> None:
    result = run(calc_case(not_called_tool("calculator")))
    assert only(result).expected == "no call to calculator"
    assert only(result).actual == 'calculator {"expression": "2 + 2"} (step 1) (1 ran)'


def files_case(*checks: Any, **extra: Any) -> Any:
    settings: dict[str, Any] = {"mock": WRITE}
    settings.update(extra)
    return case("f", config=FILES_CONFIG, input="write it", expect=list(checks), **settings)


def test_tool_was_blocked_by_approval_and_its_control() -> None:
    blocked = run(files_case(tool_was_blocked("write_file", by="approval"), file_missing("a.txt")))
    assert blocked.status == "passed", blocked
    # The same call with someone to approve it runs: the check then fails, saying so.
    allowed = run(files_case(tool_was_blocked("write_file", by="approval"), approve="allow"))
    assert allowed.status == "failed"
    assert only(allowed).actual == (
        'not refused: it ran (write_file {"content": "hello", "path": "a.txt"} (step 1))'
    )


def test_tool_was_blocked_names_the_stage_that_did_refuse() -> None:
    result = run(files_case(tool_was_blocked("write_file", by="mode")))
    check = only(result)
    assert check.expected == "a call to write_file refused by mode"
    assert check.actual.startswith("refused by approval: tool 'write_file' (moderate) needs")
    never = run(files_case(tool_was_blocked("read_file")))
    assert only(never).actual == (
        'the model never called read_file (it called: write_file {"content": "hello", '
        '"path": "a.txt"} (step 1))'
    )


def test_tool_ran_and_file_checks_see_what_the_tools_did() -> None:
    result = run(
        files_case(
            tool_ran("write_file", args={"path": "a.txt", "content": "hello"}, times=1),
            file_equals("a.txt", "hello"),
            file_contains("a.txt", "ell"),
            file_exists("a.txt"),
            file_missing("b.txt"),
            approve="allow",
        )
    )
    assert result.status == "passed", result
    failed = run(files_case(file_equals("a.txt", "bye"), file_exists("b.txt"), approve="allow"))
    assert [(c.expected, c.actual) for c in failed.checks] == [
        ('a.txt holds exactly "bye"', 'content "hello"'),
        ("a file b.txt", "no such file"),
    ]


def test_files_are_seeded_in_the_workdir_before_the_run() -> None:
    result = run(
        case(
            "read",
            config=FILES_CONFIG,
            input="read it",
            files={"notes/n.txt": "seeded text"},
            mock=[{"name": "read_file", "arguments": {"path": "notes/n.txt"}}, "done"],
            expect=[tool_ran("read_file"), check_that("the tool read the seeded file", _read_ok)],
        )
    )
    assert result.status == "passed", result


def _read_ok(trace: Any) -> bool | str:
    content = trace.executed("read_file")[0].content
    return "seeded text" in content or f"read_file returned {content!r}"


def test_output_checks_show_the_output(calc_case: MakeCase) -> None:
    result = run(calc_case(output_contains("5"), output_matches(r"^2 \+ 2 = 5$"), completed()))
    assert [c.status for c in result.checks] == ["failed", "failed", "passed"]
    assert result.checks[0].actual == 'output "2 + 2 = 4"'
    assert result.checks[1].expected == 'the output matches "^2 \\\\+ 2 = 5$" (re.search)'
    assert run(calc_case(output_contains("2 + 2 = 4"))).status == "passed"
    assert run(calc_case(output_contains("2 + 2 = 4".upper(), ignore_case=True))).status == "passed"


def test_outcomes_and_steps() -> None:
    looping = case(
        "loop",
        config={**FILES_CONFIG, "agent": {"max_iterations": 2}},
        input="x",
        mock=[{"name": "read_file", "arguments": {"path": "x"}}] * 3,
        expect=[ended_with("max_iterations"), completed(), max_steps(1)],
    )
    result = run(looping)
    assert [c.status for c in result.checks] == ["passed", "failed", "failed"]
    assert result.checks[1].actual.startswith("outcome max_iterations: stopped after 2 model calls")
    assert result.checks[2].actual == "2 model calls"
    assert result.outcome == "max_iterations"


def test_a_script_that_runs_out_fails_the_run_loudly() -> None:
    result = run(files_case(completed(), mock=[{"name": "read_file", "arguments": {"path": "x"}}]))
    assert result.status == "failed"
    assert "the script has 1 turn(s) but this is model call 2" in only(result).actual


def test_cost_is_checked_at_the_config_prices_under_mock() -> None:
    priced = {**FILES_CONFIG, "llm": {"provider": "scripted", "pricing": {"input": 1000.0}}}
    made = case("cost", config=priced, input="write it", mock=WRITE, expect=[cost_below(0.001)])
    result = run(made)
    assert result.status == "failed"
    assert result.cost_usd > 0.001
    assert only(result).actual.startswith(f"cost ${result.cost_usd:.10g}")
    cheap = case("cost", config=priced, input="x", mock=WRITE, expect=[cost_below(1.0)])
    assert run(cheap).status == "passed"
    # The mock's own prices win over the config's.
    free = case(
        "cost",
        config=priced,
        input="x",
        mock=scripted(WRITE, pricing={"input": 0.0}),
        expect=[cost_below(1e-9)],
    )
    assert run(free).status == "passed"


def test_check_that_reports_the_predicates_verdict(calc_case: MakeCase) -> None:
    result = run(
        calc_case(
            check_that("two model calls", lambda t: t.model_calls == 2),
            check_that("a third call", lambda t: "only two calls" if t.model_calls < 3 else True),
            check_that("never", lambda t: False),
        )
    )
    assert [(c.status, c.actual) for c in result.checks] == [
        ("passed", ""),
        ("failed", "only two calls"),
        ("failed", "the predicate returned False"),
    ]


def test_a_check_that_raises_fails_and_says_so(calc_case: MakeCase) -> None:
    result = run(calc_case(check_that("boom", lambda t: 1 / 0)))
    assert result.status == "failed"
    assert only(result).actual == "it raised ZeroDivisionError: division by zero"


# -- the judge -------------------------------------------------------------------------------


def test_the_judge_is_skipped_never_passed_without_a_model(
    monkeypatch: pytest.MonkeyPatch, calc_case: MakeCase
) -> None:
    monkeypatch.delenv("KOBOI_EVAL_JUDGE", raising=False)
    mocked = run(calc_case(judge("says 4"), completed()))
    assert mocked.status == "passed"
    assert [c.status for c in mocked.checks] == ["skipped", "passed"]
    assert mocked.checks[0].reason == "the judge needs a real model, and --mock runs offline"
    live = run(calc_case(judge("says 4")), mock=False)
    # Nothing was checked: the case is skipped, not passed.
    assert live.status == "skipped"
    assert "pass --judge CONFIG or set KOBOI_EVAL_JUDGE" in live.reason


def _judge_config(tmp_path: Path, reply: str) -> Path:
    import json

    path = tmp_path / "judge.yaml"
    path.write_text(
        "llm:\n  provider: scripted\n  rules:\n    - match: 'Rubric'\n"
        f"      reply: {json.dumps(reply)}\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("reply", "status", "actual"),
    [
        ('{"pass": true, "reason": "it says 4"}', "passed", ""),
        ('Verdict: {"pass": false, "reason": "it says 5"}', "failed", "the judge said: it says 5"),
        ("Looks good to me!", "failed", "the judge said: the judge did not answer with a verdict"),
    ],
)
def test_a_judge_model_grades_the_answer(
    tmp_path: Path, reply: str, status: str, actual: str, calc_case: MakeCase
) -> None:
    result = run(
        calc_case(judge("says 4")), mock=False, judge_config=_judge_config(tmp_path, reply)
    )
    assert result.status == status, result
    assert only(result).actual.startswith(actual)
