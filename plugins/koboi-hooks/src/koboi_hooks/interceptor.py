"""The interceptor that runs the ``hooks`` section's hooks at each event of a run.

| event | kernel seam | block | context | other |
|---|---|---|---|---|
| session_start | ``on_run_start`` (the session's first run) | refuses the run | kept in the session | |
| user_prompt | ``on_run_start`` (each new message) | refuses the run (the user reads why) | kept in the session | |
| before_tool_call | ``before_tool_call`` | refuses the call (the model reads why) | kept in the session | ``ask``: approval; ``updatedInput``: rewritten, re-validated arguments |
| after_tool_call | ``after_tool_call`` | the result is withheld (the model reads why) | kept in the session | |
| before_finish | ``before_finish`` | the run continues with the reason as the next message | kept in the session | bounded by ``agent.max_continuations`` |
| run_end | ``on_event(run_finished)`` | nothing left to block | | |

A resumed run (after a crash or a suspension) does not run session_start and
user_prompt hooks again: they ran when the run began, and what they added is in
the journal. When a hook fails, the event's failure rule decides: ``closed``
does what a block would (refuses the call, the run; withholds the result; for
before_finish replaces the answer with a notice), ``open`` goes on as if the
hook had said nothing. Both are journaled and audited.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from koboi import journal as J
from koboi.interceptors import (
    FinishDecision,
    Interceptor,
    PendingToolCall,
    Refusal,
    RunInfo,
    Verdict,
)
from koboi.store import JournalEvent
from koboi.tools import ToolResult
from koboi_hooks.contract import HookOutcome
from koboi_hooks.runner import HookRunner, journal_outcome
from koboi_hooks.settings import HookSpec

#: The interceptor's priority: before the policy (100), so the policy, the approver and
#: the journal judge arguments a hook rewrote; after the mode (50).
PRIORITY = 90
SESSION_MARK = "hooks.session_started"


class CommandHooks(Interceptor):
    """Runs command and URL hooks (see the module doc)."""

    name = "hooks"
    priority = PRIORITY
    event_namespace = "hooks"

    def __init__(self, runner: HookRunner) -> None:
        self.runner = runner

    def _rule(self, event: str, hook: HookSpec) -> str:
        return self.runner.settings.fail_rule(event, hook)

    def _context(self, run: RunInfo, hook: HookSpec, outcome: HookOutcome) -> None:
        if outcome.context:
            run.add_context(outcome.context, scope="session", source=f"hook:{hook.label()}")

    async def restore(self, events: Sequence[JournalEvent], run: RunInfo) -> None:
        if any(e.type == SESSION_MARK for e in events):
            run.state[SESSION_MARK] = True

    # -- session_start, user_prompt ---------------------------------------------------

    async def on_run_start(self, run: RunInfo) -> Refusal | None:
        if run.resumed:
            return None  # they ran when the run began; what they added is journaled
        if self.runner.hooks("session_start") and not run.state.get(SESSION_MARK):
            run.state[SESSION_MARK] = True
            run.record(SESSION_MARK, {})
            refusal = await self._prompt_event("session_start", run, source="startup")
            if refusal is not None:
                return refusal
        if self.runner.hooks("user_prompt"):
            return await self._prompt_event("user_prompt", run, prompt=run.input)
        return None

    async def _prompt_event(self, event: str, run: RunInfo, **extra: Any) -> Refusal | None:
        payload = self.runner.payload(event, run, **extra)
        for hook in self.runner.hooks(event):
            outcome = await self.runner.run(event, hook, payload, run)
            if outcome.failed:
                if self._rule(event, hook) == "closed":
                    reason = f"hook {hook.label()!r} failed: {outcome.error} (on_error: closed)"
                    journal_outcome(run, event, hook, outcome, "failed closed: refused the run")
                    return Refusal(reason, stage="hooks")
                journal_outcome(run, event, hook, outcome, "failed open: ignored")
                continue
            self._context(run, hook, outcome)
            if outcome.action == "block":
                journal_outcome(run, event, hook, outcome, "refused the run")
                return Refusal(outcome.reason or f"blocked by hook {hook.label()!r}", stage="hooks")
            journal_outcome(run, event, hook, outcome, _effect(outcome))
        return None

    # -- before_tool_call, after_tool_call -----------------------------------------------

    async def before_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
        event = "before_tool_call"
        call = pending.call
        hooks = self.runner.hooks(event, call.name)
        if not hooks:
            return None
        arguments: dict[str, Any] = dict(call.arguments)
        rewritten, allowed, asks = False, False, []
        where = {"tool": call.name, "call_id": call.id}
        for hook in hooks:
            payload = self.runner.payload(
                event, run, tool_name=call.name, tool_input=arguments, tool_use_id=call.id
            )
            outcome = await self.runner.run(event, hook, payload, run)
            if outcome.failed:
                if self._rule(event, hook) == "closed":
                    journal_outcome(
                        run, event, hook, outcome, "failed closed: refused the call", **where
                    )
                    return Verdict(
                        "deny",
                        f"hook {hook.label()!r} failed: {outcome.error} (on_error: closed)",
                        stage="hooks",
                    )
                journal_outcome(run, event, hook, outcome, "failed open: ignored", **where)
                continue
            self._context(run, hook, outcome)
            if outcome.action == "block":
                journal_outcome(run, event, hook, outcome, "refused the call", **where)
                return Verdict(
                    "deny", outcome.reason or f"blocked by hook {hook.label()!r}", stage="hooks"
                )
            if outcome.updated_input is not None:
                arguments, rewritten = dict(outcome.updated_input), True
            if outcome.action == "ask":
                asks.append(outcome.reason or f"hook {hook.label()!r} asks for approval")
            allowed = allowed or outcome.action == "allow"
            journal_outcome(run, event, hook, outcome, _effect(outcome), **where)
        new_arguments = arguments if rewritten else None
        if asks:
            return Verdict("ask", "; ".join(asks), stage="hooks", arguments=new_arguments)
        if rewritten or allowed:
            reason = "arguments rewritten by a hook" if rewritten else "allowed by a hook"
            return Verdict("allow", reason, stage="hooks", arguments=new_arguments)
        return None

    async def after_tool_call(
        self, pending: PendingToolCall, result: ToolResult, run: RunInfo
    ) -> ToolResult | None:
        event = "after_tool_call"
        call = pending.call
        hooks = self.runner.hooks(event, call.name)
        if not hooks:
            return None
        where = {"tool": call.name, "call_id": call.id}
        payload = self.runner.payload(
            event,
            run,
            tool_name=call.name,
            tool_input=dict(call.arguments),
            tool_use_id=call.id,
            tool_response={"content": result.content, "is_error": result.is_error},
        )
        for hook in hooks:
            outcome = await self.runner.run(event, hook, payload, run)
            if outcome.failed:
                if self._rule(event, hook) == "closed":
                    journal_outcome(
                        run, event, hook, outcome, "failed closed: withheld the result", **where
                    )
                    return ToolResult(
                        f"The result of {call.name} was withheld: hook {hook.label()!r} failed "
                        f"({outcome.error}).",
                        is_error=True,
                    )
                journal_outcome(run, event, hook, outcome, "failed open: ignored", **where)
                continue
            self._context(run, hook, outcome)
            if outcome.action == "block":
                journal_outcome(run, event, hook, outcome, "withheld the result", **where)
                why = outcome.reason or f"blocked by hook {hook.label()!r}"
                return ToolResult(f"The result of {call.name} was withheld: {why}", is_error=True)
            journal_outcome(run, event, hook, outcome, _effect(outcome), **where)
        return None

    # -- before_finish, run_end -------------------------------------------------------------

    async def before_finish(self, answer: str, run: RunInfo) -> FinishDecision | None:
        event = "before_finish"
        hooks = self.runner.hooks(event)
        if not hooks:
            return None
        continued = int(run.state.get("hooks.continued", 0))
        payload = self.runner.payload(
            event, run, stop_hook_active=continued > 0, last_assistant_message=answer
        )
        for hook in hooks:
            outcome = await self.runner.run(event, hook, payload, run)
            if outcome.failed:
                if self._rule(event, hook) == "closed":
                    journal_outcome(run, event, hook, outcome, "failed closed: replaced the answer")
                    return FinishDecision.replace(
                        f"The answer was withheld: hook {hook.label()!r} failed ({outcome.error}).",
                        reason="hook failed (on_error: closed)",
                    )
                journal_outcome(run, event, hook, outcome, "failed open: ignored")
                continue
            self._context(run, hook, outcome)
            if outcome.action == "block":
                run.state["hooks.continued"] = continued + 1
                # The kernel refuses continuations past agent.max_continuations (audited);
                # the journal says so rather than claim a continuation that did not happen.
                effect = (
                    "continued the run"
                    if continued < run.config.agent.max_continuations
                    else "asked to continue; refused (agent.max_continuations)"
                )
                journal_outcome(run, event, hook, outcome, effect)
                message = outcome.reason or "Please continue: a check asked for more work."
                return FinishDecision.continue_with(message, reason=f"hook {hook.label()!r}")
            journal_outcome(run, event, hook, outcome, _effect(outcome))
        return None

    async def on_event(self, event: JournalEvent, run: RunInfo) -> None:
        if event.type != J.RUN_FINISHED:
            return
        hooks = self.runner.hooks("run_end")
        if not hooks:
            return
        data = event.data
        payload = self.runner.payload(
            "run_end",
            run,
            reason=str(data.get("outcome", "")),
            outcome=data.get("outcome"),
            error=data.get("error"),
        )
        for hook in hooks:
            outcome = await self.runner.run("run_end", hook, payload, run)
            effect = (
                "failed: nothing left to block" if outcome.failed else "none (the run has ended)"
            )
            journal_outcome(run, "run_end", hook, outcome, effect)


def _effect(outcome: HookOutcome) -> str:
    parts = []
    if outcome.updated_input is not None:
        parts.append("rewrote the arguments")
    if outcome.action == "ask":
        parts.append("asked for approval")
    elif outcome.action == "allow":
        parts.append("allowed")
    if outcome.context:
        parts.append("added context")
    return ", ".join(parts) or "none"
