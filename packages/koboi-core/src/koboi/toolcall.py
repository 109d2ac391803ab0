"""The pipeline of one tool call, and what resume does with a call left in doubt.

Order (see :mod:`koboi.interceptors`)::

    exact lookup -> strict argument validation -> the unattended-destruction rule
    -> before_tool_call (may rewrite the arguments) -> approval (after_approval)
    -> admit_tool_call -> journal "started" + audit "before" -> sandbox.run_tool
    -> after_tool_call -> journal "finished" + audit "after"

A tool that raises :class:`~koboi.errors.Suspend` (``ctx.suspend``) ends the
run suspended: its call runs again, with the reply, when the run continues.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from koboi import journal as J
from koboi.approval import ApprovalDecision, ApprovalRequest, arguments_hash, canonical_arguments
from koboi.errors import Suspend, ToolArgumentError, ToolError, describe_error
from koboi.events import ToolResultEvent
from koboi.interceptors import PendingToolCall, Verdict, namespace_of, speaking
from koboi.logs import get_logger
from koboi.messages import Message, ToolCall, argument_problem
from koboi.tools import Risk, ToolContext, ToolResult

if TYPE_CHECKING:
    from koboi.approval import Approver
    from koboi.events import RunResult
    from koboi.interceptors import Interceptor, RunInfo
    from koboi.loop import LoopParts
    from koboi.masks import Masks
    from koboi.runners import Ending
    from koboi.tools import Tool
    from koboi.toolsets import ToolList

log = get_logger("koboi.toolcall")

_RISK_RANK = {Risk.SAFE: 0, Risk.MODERATE: 1, Risk.DESTRUCTIVE: 2}


@dataclass
class _Refusal:
    stage: str
    reason: str


@dataclass
class Suspended:
    """A call that suspended the run (its tool raised :class:`Suspend`)."""

    call: ToolCall
    step: int
    signal: Suspend

    def suspension(self) -> dict[str, Any]:
        return {
            "reason": self.signal.reason,
            "kind": self.signal.kind,
            "data": dict(self.signal.data),
            "call_id": self.call.id,
            "name": self.call.name,
            "step": self.step,
        }

    @staticmethod
    def combine(suspended: Sequence[Suspended]) -> dict[str, Any]:
        """What ``run_finished.suspension`` says: the first call's reason, every call."""
        first = suspended[0].suspension()
        first["calls"] = [s.call.id for s in suspended]
        return first


Outcome = tuple[Message, ToolResultEvent] | Suspended


class ToolCallPipeline:
    """The tool-call half of :class:`koboi.loop.AgentRun` (a mixin: state lives there)."""

    # What the pipeline uses of the run (set by AgentRun.__init__).
    parts: LoopParts
    session_id: str
    config: Any
    state: J.SessionState
    step: int
    info: RunInfo
    approver: Approver
    ending: Ending | None
    tool_list: ToolList
    _masks: Masks
    _before_tool: list[Interceptor]
    _admit_tool: list[Interceptor]
    _after_tool: list[Interceptor]
    _after_approval: list[Interceptor]
    _waiting_approvals: dict[str, Mapping[str, Any]]
    _max_argument_bytes: int
    _tool_timeout: float | None

    if TYPE_CHECKING:

        @property
        def tools(self) -> Mapping[str, Tool]: ...

        async def record(
            self, type_: str, data: Mapping[str, Any], *, commit: bool = True
        ) -> int: ...

        def emit(self, event_type: str, data: Mapping[str, Any], call_id: str | None) -> None: ...

        async def _run_subagent(self, message: str, **options: Any) -> RunResult: ...

    # -- several calls -------------------------------------------------------------

    async def _run_calls(self, calls: Sequence[ToolCall], step: int) -> list[Outcome]:
        """The calls of one model turn: in order, or at once (``agent.parallel_tool_calls``)."""
        if not (self.config.agent.parallel_tool_calls and len(calls) > 1):
            return [await self._run_tool_call(c, step) for c in calls]
        results: list[Outcome | None] = [None] * len(calls)

        async def one(index: int, call: ToolCall) -> None:
            results[index] = await self._run_tool_call(call, step)

        async with anyio.create_task_group() as tg:
            for index, call in enumerate(calls):
                tg.start_soon(one, index, call)
        return [r for r in results if r is not None]

    # -- one call -------------------------------------------------------------------

    async def _run_tool_call(self, call: ToolCall, step: int, *, reply: Any = None) -> Outcome:
        """The documented pipeline of one call; see koboi.interceptors for the order."""
        trail: list[dict[str, str]] = []
        decided = await self._decide(call, step, trail)
        audit = {
            "action": "tool_call",
            "step": step,
            "call_id": call.id,
            "tool": call.name,
            "arguments_hash": arguments_hash(call.arguments),
        }
        if isinstance(decided, _Refusal):
            self.info.audit(
                {
                    **audit,
                    "phase": "decision",
                    "decision": "deny",
                    "stage": decided.stage,
                    "reason": decided.reason,
                    "stages": trail,
                }
            )
            seq = await self.record(
                J.TOOL_CALL_REFUSED,
                {
                    "step": step,
                    "call_id": call.id,
                    "name": call.name,
                    "stage": decided.stage,
                    "reason": decided.reason,
                },
                commit=False,
            )
            return (
                Message.tool_result(call, decided.reason, is_error=True),
                ToolResultEvent(call.id, call.name, decided.reason, True, step, decided.stage, seq),
            )
        pending, rewritten_by = decided
        tool = pending.tool
        sandbox = self.parts.sandbox
        ctx = ToolContext(
            session_id=self.session_id,
            call_id=call.id,
            step=step,
            sandbox=sandbox,
            workdir=sandbox.workdir_for(self.session_id),
            resources=self.parts.resources,
            subagent_runner=self._run_subagent,
            run=self.info,
            reply=reply,
            emitter=lambda event_type, data: self.emit(event_type, data, call.id),
        )
        arguments = pending.call.arguments
        # The "started" marker is committed as late as possible: after every decision,
        # immediately before the effect begins; the audit trail's "before" record with it.
        self.info.audit(
            {
                **audit,
                "phase": "before",
                "decision": "allow",
                "stages": trail,
                "arguments": arguments,
                "risk": tool.risk.value,
                "sandbox": sandbox.name,
            }
        )
        started: J.ToolCallStartedData = {
            "step": step,
            "call_id": call.id,
            "name": call.name,
            "arguments": dict(arguments),
            "idempotent": tool.idempotent,
            # Which stages allowed it, and why: each decision is in the journal.
            "decision": trail,  # type: ignore[typeddict-item]
        }
        if rewritten_by:
            started["rewritten_by"] = rewritten_by
            started["original_arguments_hash"] = arguments_hash(call.arguments)
        await self.record(J.TOOL_CALL_STARTED, started)
        try:
            result = await self._invoke(pending, ctx)
        except Suspend as signal:
            self.info.audit({**audit, "phase": "suspended", "reason": signal.reason})
            await self.record(
                J.TOOL_CALL_SUSPENDED,
                {
                    "step": step,
                    "call_id": call.id,
                    "name": call.name,
                    "reason": signal.reason,
                    "kind": signal.kind,
                    "data": dict(signal.data),
                },
                commit=False,
            )
            return Suspended(call, step, signal)
        for icp in self._after_tool:
            with speaking(icp.name, namespace_of(icp)):
                result = await icp.after_tool_call(pending, result, self.info) or result
        self.info.audit(
            {
                **audit,
                "phase": "after",
                "outcome": "error" if result.is_error else "ok",
                "result_chars": len(result.content),
            }
        )
        seq = await self.record(
            J.TOOL_CALL_FINISHED,
            {
                "step": step,
                "call_id": call.id,
                "name": call.name,
                "content": result.content,
                "is_error": result.is_error,
            },
            commit=False,
        )
        return (
            Message.tool_result(call, result.content, is_error=result.is_error),
            ToolResultEvent(call.id, call.name, result.content, result.is_error, step, None, seq),
        )

    async def _decide(
        self, call: ToolCall, step: int, trail: list[dict[str, str]]
    ) -> tuple[PendingToolCall, list[str]] | _Refusal:
        """Every stage of the pipeline, in order; ``trail`` collects what each one said.

        Returns the call as it will run (its arguments maybe rewritten) and who
        rewrote them, or the refusal.
        """
        # Exact lookup: no case folding, no trimming, no Unicode normalisation, so a
        # name that merely looks like a tool's never reaches it.
        tools = self.tools
        tool = tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(tools)) or "none"
            return _Refusal(
                "lookup", f"unknown tool {call.name!r} (names must match exactly); tools: {known}"
            )
        if call.raw_arguments is not None:
            return _Refusal(
                "arguments",
                f"invalid arguments for tool '{call.name}': {argument_problem(call.raw_arguments)}",
            )
        refusal = self._size_refusal(call.name, call.arguments)
        if refusal is not None:
            return refusal
        try:
            args = tool.parse_arguments(call.arguments)
        except ToolArgumentError as exc:
            return _Refusal("arguments", str(exc))
        pending = PendingToolCall(call=call, tool=tool, args=args, step=step)
        if (
            self.parts.autonomous
            and tool.risk == Risk.DESTRUCTIVE
            and not self.parts.sandbox.isolated
        ):
            # Checked again at each call: the run may have started with a sandbox that
            # was swapped since, or with tools a toolset added later.
            from koboi.loop import unattended_destruction_refusal

            return _Refusal(
                "sandbox",
                unattended_destruction_refusal(
                    tool.name, self.parts.sandbox.name, _isolating(self)
                ),
            )

        verdicts: list[Verdict] = []
        rewritten_by: list[str] = []
        for icp in self._before_tool:
            with speaking(icp.name, namespace_of(icp)):
                verdict = await icp.before_tool_call(pending, self.info)
            if verdict is None:
                continue
            stage = verdict.stage or icp.name
            trail.append({"stage": stage, "action": verdict.action, "reason": verdict.reason})
            if verdict.action == "deny":
                return _Refusal(stage, verdict.reason or "denied")
            if verdict.arguments is not None:
                rewritten = self._rewrite(pending, verdict.arguments, stage)
                if isinstance(rewritten, _Refusal):
                    return rewritten
                pending = rewritten
                rewritten_by.append(stage)
            verdicts.append(verdict)
        needs_approval = _RISK_RANK[tool.risk] >= _RISK_RANK[Risk(self.config.agent.approval_risk)]
        if any(v.action == "ask" for v in verdicts):
            needs_approval = True
        elif verdicts and all(v.action == "allow" and v.skip_approval for v in verdicts):
            needs_approval = False
        if needs_approval:
            refused = await self._approve(pending, verdicts)
            trail.append({"stage": "approval", "action": "deny" if refused else "allow"})
            if refused is not None:
                return refused
        for icp in self._admit_tool:
            with speaking(icp.name, namespace_of(icp)):
                verdict = await icp.admit_tool_call(pending, self.info)
            if verdict is None:
                continue
            stage = verdict.stage or icp.name
            trail.append({"stage": stage, "action": verdict.action, "reason": verdict.reason})
            if verdict.action == "deny":
                return _Refusal(stage, verdict.reason or "not admitted")
        return pending, rewritten_by

    def _size_refusal(self, name: str, arguments: Mapping[str, Any]) -> _Refusal | None:
        size = len(canonical_arguments(arguments).encode())
        if size > self._max_argument_bytes:
            return _Refusal(
                "arguments",
                f"the arguments of tool '{name}' are {size} bytes, more than the "
                f"{self._max_argument_bytes} allowed (tools.max_argument_bytes)",
            )
        return None

    def _rewrite(
        self, pending: PendingToolCall, arguments: Mapping[str, Any], stage: str
    ) -> PendingToolCall | _Refusal:
        """``pending`` with the arguments an interceptor gave, validated like the model's."""
        name = pending.call.name
        if not isinstance(arguments, Mapping):
            return _Refusal(stage, f"{stage} rewrote the arguments of '{name}' into a non-object")
        refusal = self._size_refusal(name, arguments)
        if refusal is not None:
            return _Refusal(stage, f"{stage} rewrote the arguments: {refusal.reason}")
        try:
            args = pending.tool.parse_arguments(arguments)
        except ToolArgumentError as exc:
            return _Refusal(stage, f"{stage} rewrote the arguments, and they are invalid: {exc}")
        call = pending.call.model_copy(update={"arguments": dict(arguments)})
        return dataclasses.replace(pending, call=call, args=args)

    async def _approve(self, pending: PendingToolCall, verdicts: list[Verdict]) -> _Refusal | None:
        """Ask the approver, within the journaled deadline; the answer must fit the request.

        A request still waiting when the run was interrupted is asked again under
        the same id and deadline, so it stays one pending approval across a crash.
        """
        call, tool = pending.call, pending.tool
        reasons = [v.reason for v in verdicts if v.action == "ask" and v.reason]
        reason = "; ".join(reasons) or f"tool risk is {tool.risk.value}"
        digest = arguments_hash(call.arguments)
        waiting = self._waiting_approvals.pop(call.id, None)
        if waiting is not None and waiting.get("arguments_hash") == digest:
            approval_id = str(waiting.get("approval_id") or "")
            expires_at = float(waiting.get("expires_at") or 0.0)
        else:
            approval_id = f"ap_{uuid.uuid4().hex}"
            expires_at = time.time() + self.config.agent.approval_timeout_seconds
        shown = self._masks.data(call.arguments) if self._masks.active else call.arguments
        request = ApprovalRequest(
            session_id=self.session_id,
            step=pending.step,
            call_id=call.id,
            tool_name=call.name,
            arguments=call.arguments,
            risk=tool.risk,
            reason=reason,
            arguments_hash=digest,
            approval_id=approval_id,
            expires_at=expires_at,
            shown_arguments=shown,
            owner=self.info.owner,
        )
        base = {
            "action": "approval",
            "step": pending.step,
            "call_id": call.id,
            "tool": call.name,
            "approval_id": approval_id,
            "arguments_hash": digest,
        }
        if waiting is None or waiting.get("approval_id") != approval_id:
            self.info.audit({**base, "phase": "requested", "reason": reason})
            await self.record(
                J.APPROVAL_REQUESTED,
                {
                    "step": pending.step,
                    "call_id": call.id,
                    "name": call.name,
                    "risk": tool.risk.value,
                    "arguments_hash": digest,
                    "reason": reason,
                    "approval_id": approval_id,
                    "expires_at": expires_at,
                },
            )
        decision = await self._ask_approver(request)
        mismatch = decision.mismatch(request) if decision.approved else None
        if mismatch is not None:
            decision = dataclasses.replace(
                decision, approved=False, reason=f"approval refused: {mismatch}"
            )
        # Committed with what comes next (the call's start, or its refusal): losing a
        # decision to a crash only means the approver is asked again on resume.
        await self.record(
            J.APPROVAL_DECIDED,
            {
                "step": pending.step,
                "call_id": call.id,
                "approval_id": approval_id,
                "approved": decision.approved,
                "reason": decision.reason,
                "decided_by": decision.decided_by,
                "scope": decision.scope,
            },
            commit=False,
        )
        self.info.audit(
            {
                **base,
                "phase": "decided",
                "approved": decision.approved,
                "reason": decision.reason,
                "decided_by": decision.decided_by,
                "scope": decision.scope,
            }
        )
        for icp in self._after_approval:
            try:
                with speaking(icp.name, namespace_of(icp)):
                    await icp.after_approval(pending, request, decision, self.info)
            except Exception as exc:  # the decision stands; what failed is logged and audited
                error = describe_error(exc)
                if self._masks.active:
                    error = self._masks.text(error)
                log.warning(
                    "interceptor %r (plugin %r) failed after the approval %s of session %s: %s",
                    icp.name,
                    icp.plugin,
                    approval_id,
                    self.session_id,
                    error,
                )
                self.info.audit(
                    {
                        **base,
                        "phase": "interceptor_failed",
                        "interceptor": icp.name,
                        "method": "after_approval",
                        "error": error,
                    }
                )
        if decision.approved:
            return None
        return _Refusal("approval", decision.reason or f"tool '{call.name}' was not approved")

    async def _ask_approver(self, request: ApprovalRequest) -> ApprovalDecision:
        """The approver's decision; a failure or no answer before the deadline is a no."""
        approver = self.approver
        left = (request.expires_at or 0.0) - time.time()
        if left <= 0:
            return ApprovalDecision(
                approved=False,
                reason=f"the approval request for '{request.tool_name}' expired before a decision",
                decided_by="deadline",
            )
        try:
            with anyio.move_on_after(left):
                return await approver.decide(request)
        except Exception as exc:  # a broken approver is a "no", with its reason
            return ApprovalDecision(
                approved=False,
                reason=f"the approver failed: {describe_error(exc)}",
                decided_by=approver.name,
            )
        return ApprovalDecision(
            approved=False,
            reason=f"no decision on '{request.tool_name}' within {left:.0f} s "
            "(agent.approval_timeout_seconds): denied",
            decided_by="deadline",
        )

    async def _invoke(self, pending: PendingToolCall, ctx: ToolContext) -> ToolResult:
        tool = pending.tool
        try:
            with speaking(tool.name, self.tool_list.plugins.get(tool.name, "")):
                if self._tool_timeout is None:
                    return await self.parts.sandbox.run_tool(tool, pending.args, ctx)
                with anyio.CancelScope(deadline=anyio.current_time() + self._tool_timeout):
                    return await self.parts.sandbox.run_tool(tool, pending.args, ctx)
            raise TimeoutError  # only reached when the deadline cancelled the call
        except TimeoutError:
            return ToolResult(
                f"tool '{tool.name}' timed out after {self._tool_timeout:g} s "
                "(tools.timeout_seconds)",
                is_error=True,
            )
        except Suspend:
            raise
        except ToolError as exc:
            return ToolResult(f"tool '{tool.name}' failed: {exc}", is_error=True)
        except Exception as exc:  # whatever a tool raises, the model reads it as the result
            return ToolResult(f"tool '{tool.name}' failed: {describe_error(exc)}", is_error=True)

    # -- resume -----------------------------------------------------------------------

    async def _resume_call(self, pending: J.PendingCall) -> Outcome | None:
        """Settle one call left without an outcome. None: the run was ended (policy 'fail')."""
        from koboi.runners import Ending

        call, step = pending.call, pending.step
        if pending.suspended or not pending.started or pending.idempotent:
            # Never started, harmless to repeat, or it suspended the run (it did nothing).
            return await self._run_tool_call(call, step, reply=pending.reply)
        policy = self.config.agent.on_interrupted_tool
        if policy == "ask":
            tool = self.tools.get(call.name)
            if tool is not None:
                args = tool.parse_arguments(call.arguments)
                refused = await self._approve(
                    PendingToolCall(call=call, tool=tool, args=args, step=step),
                    [
                        Verdict(
                            "ask",
                            "this call was interrupted and its outcome is unknown; run it again?",
                            stage="resume",
                        )
                    ],
                )
                if refused is None:
                    return await self._run_tool_call(call, step)
        seq = await self.record(
            J.TOOL_CALL_INTERRUPTED,
            {"step": step, "call_id": call.id, "name": call.name, "policy": policy},
            commit=False,
        )
        if policy == "fail" or pending.direct:
            self.ending = Ending(
                "failed",
                "",
                f"tool call '{call.name}' ({call.id}) was interrupted and its outcome is unknown"
                + (" (agent.on_interrupted_tool: fail)" if policy == "fail" else ""),
            )
            return None
        return (
            Message.tool_result(call, J.INTERRUPTED_RESULT, is_error=True),
            ToolResultEvent(call.id, call.name, J.INTERRUPTED_RESULT, True, step, "resume", seq),
        )


def _isolating(run: ToolCallPipeline) -> str:
    """How to get an isolating sandbox, from the hints plugins registered."""
    host = run.parts.host
    if host is None:
        return ""
    return isolating_sandboxes(host.catalog().hints.isolating_sandboxes())


def isolating_sandboxes(known: Mapping[str, str]) -> str:
    """What to do for isolation, in words, given ``{backend: distribution}`` hints."""
    if not known:
        return "use an isolating backend"
    named = ", ".join(f"'{name}' from {dist}" for name, dist in sorted(known.items()))
    return f"use an isolating backend such as {named}"
