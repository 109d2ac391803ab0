"""Contract suite for :class:`koboi.approval.Approver` implementations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from koboi.approval import ApprovalDecision, ApprovalRequest, Approver
from koboi.tools import Risk


def sample_request(
    *,
    risk: Risk = Risk.DESTRUCTIVE,
    call_id: str = "call-1",
    arguments: Mapping[str, Any] | None = None,
) -> ApprovalRequest:
    """A typical request: a shell command that needs approval."""
    return ApprovalRequest(
        session_id="contract-session",
        step=3,
        call_id=call_id,
        tool_name="shell",
        arguments=arguments if arguments is not None else {"command": "rm -rf build/"},
        risk=risk,
        reason=f"tool 'shell' is {risk.value}",
    )


class ApproverContract:
    """Behaviour every :class:`~koboi.approval.Approver` must show.

    **Required fixtures** (define them in the subclass):

    ``approver``
        The approver under test, answering without a human (script the human's
        answer if there is one).
    ``expected_approval``
        ``True`` or ``False``: what the approver must decide for
        ``approval_request``.

    **Optional fixture** ``approval_request``: the request whose answer
    ``expected_approval`` states. Default: :func:`sample_request` (a
    destructive ``shell`` call).

    Other tests send variations (each risk level, unicode and nested arguments,
    several at once) and only check that a well-formed decision comes back.
    """

    @pytest.fixture
    def approval_request(self) -> ApprovalRequest:
        return sample_request()

    @staticmethod
    def _check(decision: object) -> ApprovalDecision:
        assert isinstance(decision, ApprovalDecision), f"decide() returned {decision!r}"
        assert isinstance(decision.approved, bool)
        assert isinstance(decision.reason, str)
        assert decision.scope in ("once", "always")
        assert isinstance(decision.decided_by, str)
        if not decision.approved:
            assert decision.reason.strip(), "a denial must say why: the model reads the reason"
        return decision

    def test_has_a_name(self, approver: Approver) -> None:
        assert isinstance(approver, Approver)
        assert isinstance(approver.name, str)
        assert approver.name

    @pytest.mark.anyio
    async def test_decides_as_expected(
        self, approver: Approver, approval_request: ApprovalRequest, expected_approval: bool
    ) -> None:
        decision = self._check(await approver.decide(approval_request))
        assert decision.approved is expected_approval

    @pytest.mark.anyio
    @pytest.mark.parametrize("risk", list(Risk))
    async def test_answers_every_risk_level(self, approver: Approver, risk: Risk) -> None:
        self._check(await approver.decide(sample_request(risk=risk)))

    @pytest.mark.anyio
    async def test_answers_unusual_arguments(self, approver: Approver) -> None:
        for arguments in (
            {},
            {"path": "données/été ☀️.txt", "content": "line\n" * 100},
            {"nested": {"list": [1, None, {"deep": True}]}, "n": 1.5},
        ):
            self._check(await approver.decide(sample_request(arguments=arguments)))

    @pytest.mark.anyio
    async def test_does_not_change_the_request(
        self, approver: Approver, approval_request: ApprovalRequest
    ) -> None:
        before = (approval_request.arguments_hash, dict(approval_request.arguments))
        await approver.decide(approval_request)
        assert (approval_request.arguments_hash, dict(approval_request.arguments)) == before

    @pytest.mark.anyio
    async def test_answers_concurrent_requests(self, approver: Approver) -> None:
        decisions: dict[str, ApprovalDecision] = {}

        async def ask(i: int) -> None:
            call_id = f"call-{i}"
            decisions[call_id] = self._check(
                await approver.decide(sample_request(call_id=call_id, arguments={"i": i}))
            )

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for i in range(5):
                    tg.start_soon(ask, i)
        assert sorted(decisions) == [f"call-{i}" for i in range(5)]
