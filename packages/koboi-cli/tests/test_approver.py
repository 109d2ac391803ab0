from __future__ import annotations

import io
from collections.abc import Callable

import anyio
import pytest

from koboi.approval import ApprovalRequest, canonical_arguments
from koboi.tools import Risk
from koboi_cli.approver import AssumeYesApprover, TerminalApprover


def request(tool: str = "shell", **arguments: object) -> ApprovalRequest:
    return ApprovalRequest(
        session_id="s",
        step=1,
        call_id="c1",
        tool_name=tool,
        arguments=arguments or {"command": "rm -rf build", "cwd": "/tmp"},
        risk=Risk.DESTRUCTIVE,
        reason="tool risk is destructive",
    )


def answers(*lines: str) -> Callable[[], str]:
    """A read_line that returns ``lines`` in order, then end of input ('')."""
    queue = [f"{line}\n" for line in lines]
    return lambda: queue.pop(0) if queue else ""


@pytest.mark.anyio
async def test_shows_tool_risk_reason_and_exact_arguments() -> None:
    out = io.StringIO()
    approver = TerminalApprover(read_line=answers("y"), out=out)
    req = request()
    decision = await approver.decide(req)
    assert decision.approved
    assert decision.scope == "once"
    shown = out.getvalue()
    assert "shell" in shown
    assert "destructive" in shown
    assert "tool risk is destructive" in shown
    assert canonical_arguments(req.arguments) in shown
    assert "\x1b[" not in shown  # a StringIO is not a terminal


@pytest.mark.anyio
@pytest.mark.parametrize("answer", ["n", "no", "", "N"])
async def test_no_and_empty_answer_deny(answer: str) -> None:
    approver = TerminalApprover(read_line=answers(answer), out=io.StringIO())
    decision = await approver.decide(request())
    assert not decision.approved
    assert "did not approve" in decision.reason


@pytest.mark.anyio
async def test_end_of_input_denies() -> None:
    approver = TerminalApprover(read_line=answers(), out=io.StringIO())
    decision = await approver.decide(request())
    assert not decision.approved
    assert "end of input" in decision.reason


@pytest.mark.anyio
async def test_unclear_answer_asks_again() -> None:
    out = io.StringIO()
    approver = TerminalApprover(read_line=answers("maybe", "yes"), out=out)
    assert (await approver.decide(request())).approved
    assert "please answer y, n or a" in out.getvalue()
    assert out.getvalue().count("approve?") == 2


@pytest.mark.anyio
async def test_always_approves_later_calls_of_that_tool_with_the_same_arguments_only() -> None:
    out = io.StringIO()
    approver = TerminalApprover(read_line=answers("a", "n", "n"), out=out)
    first = await approver.decide(request("shell", command="ls"))
    assert first.approved and first.scope == "always"
    again = await approver.decide(request("shell", command="ls"))
    assert again.approved  # not asked: only one question so far
    assert out.getvalue().count("approve?") == 1
    changed = await approver.decide(request("shell", command="rm -rf x"))
    assert not changed.approved  # other arguments are asked about ("n")
    other = await approver.decide(request("write_file", path="x"))
    assert not other.approved  # a different tool is asked about ("n")
    assert out.getvalue().count("approve?") == 3


@pytest.mark.anyio
async def test_decisions_name_the_request_they_answer() -> None:
    approver = TerminalApprover(read_line=answers("y"), out=io.StringIO())
    asked = request("shell", command="ls")
    decision = await approver.decide(asked)
    assert decision.mismatch(asked) is None
    assert decision.arguments_hash == asked.arguments_hash
    assert decision.session_id == asked.session_id


@pytest.mark.anyio
async def test_concurrent_requests_are_asked_one_at_a_time() -> None:
    out = io.StringIO()
    active = 0
    most = 0

    def read_line() -> str:
        nonlocal active, most
        active += 1
        most = max(most, active)
        import time

        time.sleep(0.02)  # runs in a worker thread; overlap would show here
        active -= 1
        return "y\n"

    approver = TerminalApprover(read_line=read_line, out=out)
    results = []

    async def ask(index: int) -> None:
        results.append(await approver.decide(request(command=f"echo {index}")))

    async with anyio.create_task_group() as tg:
        for index in range(3):
            tg.start_soon(ask, index)
    assert most == 1
    assert len(results) == 3 and all(r.approved for r in results)
    assert out.getvalue().count("approval needed") == 3


@pytest.mark.anyio
async def test_assume_yes_approves_and_warns(capsys: pytest.CaptureFixture[str]) -> None:
    decision = await AssumeYesApprover().decide(request())
    assert decision.approved
    assert "--yes" in capsys.readouterr().err


@pytest.mark.anyio
async def test_the_prompt_masks_secrets_and_reveals_them_only_when_asked() -> None:
    secret = "Zq7-unguessable-literal-9f3k"
    req = ApprovalRequest(
        session_id="s",
        step=1,
        call_id="c1",
        tool_name="deploy",
        arguments={"note": f"key is {secret}", "api_key": "short", "token": "ghp_" + "a1B2" * 9},
        risk=Risk.MODERATE,
        reason="tool risk is moderate",
        # What the kernel hands over: the run's redaction (here, a configured secret).
        shown_arguments={
            "note": "key is [REDACTED]",
            "api_key": "short",
            "token": "ghp_" + "a1B2" * 9,
        },
    )
    out = io.StringIO()
    decision = await TerminalApprover(read_line=answers("r", "y"), out=out).decide(req)
    assert decision.approved
    prompt, revealed = out.getvalue().split("arguments (unmasked):")
    assert secret not in prompt and "short" not in prompt and "ghp_" not in prompt
    assert "[REDACTED]" in prompt and '"api_key":"***"' in prompt
    # Revealed to the person at the terminal, on request only.
    assert secret in revealed


def test_assume_yes_warns_with_the_arguments_masked(capsys: pytest.CaptureFixture[str]) -> None:
    req = ApprovalRequest(
        session_id="s",
        step=1,
        call_id="c1",
        tool_name="deploy",
        arguments={"password": "hunter2hunter2"},
        risk=Risk.MODERATE,
        reason="r",
    )
    decision = anyio.run(AssumeYesApprover().decide, req)
    assert decision.approved
    err = capsys.readouterr().err
    assert "hunter2" not in err and '"password":"***"' in err
