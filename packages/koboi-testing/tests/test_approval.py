"""The approver contract, run against the kernel's approvers, plus their own behaviour."""

from __future__ import annotations

import pytest

from koboi.approval import (
    AllowAllApprover,
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    CallbackApprover,
    DenyAllApprover,
    arguments_hash,
    canonical_arguments,
)
from koboi.tools import Risk
from koboi_testing.contracts import ApproverContract, sample_request


class TestDenyAllApprover(ApproverContract):
    @pytest.fixture
    def approver(self) -> Approver:
        return DenyAllApprover()

    @pytest.fixture
    def expected_approval(self) -> bool:
        return False


class TestAllowAllApprover(ApproverContract):
    @pytest.fixture
    def approver(self) -> Approver:
        return AllowAllApprover()

    @pytest.fixture
    def expected_approval(self) -> bool:
        return True


class TestCallbackApproverSyncBool(ApproverContract):
    """A sync callback approving only safe calls."""

    @pytest.fixture
    def approver(self) -> Approver:
        return CallbackApprover(lambda request: request.risk is Risk.SAFE)

    @pytest.fixture
    def approval_request(self) -> ApprovalRequest:
        return sample_request(risk=Risk.SAFE)

    @pytest.fixture
    def expected_approval(self) -> bool:
        return True


class TestCallbackApproverAsyncDecision(ApproverContract):
    """An async callback returning full decisions."""

    @pytest.fixture
    def approver(self) -> Approver:
        async def ask(request: ApprovalRequest) -> ApprovalDecision:
            return ApprovalDecision(
                approved=False,
                reason=f"{request.tool_name} refused by policy",
                scope="always",
                decided_by="policy",
            )

        return CallbackApprover(ask)

    @pytest.fixture
    def expected_approval(self) -> bool:
        return False


@pytest.mark.anyio
async def test_deny_all_reason_names_the_tool_and_risk() -> None:
    decision = await DenyAllApprover().decide(sample_request(risk=Risk.MODERATE))
    assert decision.approved is False
    assert "'shell'" in decision.reason
    assert "moderate" in decision.reason
    assert decision.decided_by == "deny"


@pytest.mark.anyio
async def test_callback_receives_the_request_and_bools_become_decisions() -> None:
    seen: list[ApprovalRequest] = []

    def callback(request: ApprovalRequest) -> bool:
        seen.append(request)
        return False

    request = sample_request()
    decision = await CallbackApprover(callback).decide(request)
    assert seen == [request]
    assert decision == ApprovalDecision(approved=False, reason="denied", decided_by="callback")
    approved = await CallbackApprover(lambda r: True).decide(request)
    assert approved.approved is True
    assert approved.decided_by == "callback"


@pytest.mark.anyio
async def test_callback_decision_is_returned_unchanged() -> None:
    decision = ApprovalDecision(approved=True, reason="ok", scope="always", decided_by="bob")
    assert await CallbackApprover(lambda r: decision).decide(sample_request()) is decision


def test_canonical_arguments_ignore_key_order_and_keep_unicode() -> None:
    assert canonical_arguments({"b": 1, "a": "é"}) == '{"a":"é","b":1}'
    assert arguments_hash({"b": 1, "a": 2}) == arguments_hash({"a": 2, "b": 1})
    assert arguments_hash({"a": 1}) != arguments_hash({"a": 2})


def test_request_hash_is_bound_to_its_arguments() -> None:
    request = sample_request(arguments={"command": "ls"})
    assert request.arguments_hash == arguments_hash({"command": "ls"})
    assert len(request.arguments_hash) == 64
    explicit = ApprovalRequest(
        session_id="s",
        step=1,
        call_id="c",
        tool_name="t",
        arguments={},
        risk=Risk.SAFE,
        reason="r",
        arguments_hash="given",
    )
    assert explicit.arguments_hash == "given"
