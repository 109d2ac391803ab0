"""Child runs: a sub-agent under its parent's pipeline, its events in the parent's stream.

A child runs in a session of its own (its metadata names the parent session,
step and call) with the parent's parts: the same store, sandbox, approver and
interceptors (mode, policy, guardrails, trust, rate limits), and at most the
parent's tools. Every event it yields reaches the parent's stream as a
:class:`~koboi.events.ChildEvent` tagged with the parent's call, as it happens.

What a child may be given is never more than its parent has: a subset of its
tools, its mode or a stricter one, at most its step limit; and it shares the
parent's budgets (tokens, cost, model calls): what it uses is counted against
its parent's, and up the tree, as it happens. It may call a model of its own,
named in the ``providers`` section.

A child is durable like any run. Given a ``session_id`` (derive one with
:func:`child_session_id`), the same call after a crash continues that child:
an interrupted child is resumed (its tool calls under the in-doubt rule), a
finished one answers from its journal without running again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict, Unpack, cast

import anyio

from koboi import journal as J
from koboi.config import mode_within
from koboi.errors import KoboiError, SessionNotFound, ToolError
from koboi.events import ChildEvent, FinalEvent, RunResult
from koboi.messages import Usage
from koboi.store import take_lease
from koboi.toolsets import ToolList

if TYPE_CHECKING:
    from koboi.events import Outcome
    from koboi.loop import AgentRun
    from koboi.store import JournalEvent, Lease, SessionInfo


def child_session_id(parent_session: str, key: str) -> str:
    """A stable session id for the child ``key`` (a node's name, a call id) of a session:
    the same after a crash, so the child is continued rather than started again."""
    return hashlib.sha256(f"{parent_session}\x00{key}".encode()).hexdigest()[:32]


class ChildOptions(TypedDict, total=False):
    """What a child run may be given (``RunHandle.child``, ``ToolContext.run_subagent``)."""

    #: Names of the parent's tools (default: all of them).
    tools: Sequence[str] | None
    system_prompt: str | None
    name: str | None
    #: The child's session: the same after a crash continues the child.
    session_id: str | None
    #: An entry of the ``providers`` section to call instead of the parent's model.
    model: str | None
    #: The parent's mode or a stricter one.
    mode: str | None
    #: At most the parent's.
    max_iterations: int | None
    #: Caps of the child alone (the parent's budgets are shared anyway).
    max_total_tokens: int | None
    max_cost_usd: float | None


async def run_subagent(
    parent: AgentRun,
    message: str,
    *,
    parent_call_id: str | None = None,
    tag: str | None = None,
    **options: Unpack[ChildOptions],
) -> RunResult:
    """Run a child of ``parent`` to its end and return its result (see the module doc)."""
    from koboi.loop import AgentRun

    parts = parent.parts
    child_parts = dataclasses.replace(
        parts,
        **_child_tools(parent, options.get("tools")),
        config=_child_config(parent, options),
        provider=_child_model(parent, options.get("model")),
        # A child is the loop itself: the parent's runner (a DAG, a planner) must not
        # run again inside each of its own nodes.
        runner=None,
    )
    config = child_parts.config
    store = parts.store
    # A child is work the parent starts: what the parent recorded before it (its
    # run_started, a runner's note that the child begins) is committed first.
    await parent.flush()
    info, events = await _child_session(
        parent, options.get("session_id"), parent_call_id, tag, config
    )
    state = J.fold_state(events)
    if state.last_outcome == "cancelled" and not state.interrupted:
        # Stopped with its parent (a server draining, a stream closed): continued where
        # it stopped, as an interrupted run is.
        state.interrupted = True
    if events and not state.interrupted and state.suspended is None and state.last_outcome:
        # Finished before (the parent is being resumed): its journal has the answer.
        result = _journaled_result(info.id, events, state)
        parent.charge(result.usage, result.cost_usd, steps=result.steps, own=False)
        parent.forward(ChildEvent(FinalEvent(result, events[-1].seq), info.id, parent_call_id, tag))
        return result
    lease = await _take(parent, info, config.agent.lease_seconds)
    try:
        child = AgentRun(
            child_parts,
            info.id,
            state,
            lease=lease,
            owner=parent.info.owner,
            approver=parent.approver,
            parent=parent,
        )
        continuing = state.interrupted or state.suspended is not None
        if continuing:
            # What the child used before the crash counts against its parents again.
            parent.charge(state.usage, state.cost_usd, steps=state.step, own=False)
            body = child.resume(trace=parent.info.trace)
        else:
            body = child.execute(message, trace=parent.info.trace)
        final: FinalEvent | None = None
        async with contextlib.aclosing(body) as stream:
            async for event in stream:
                parent.forward(ChildEvent(event, info.id, parent_call_id, tag))
                if isinstance(event, FinalEvent):
                    final = event
    finally:
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            # Best effort: an expired lease frees the session anyway.
            await store.release_lease(lease)
    if final is None:  # pragma: no cover - execute always ends with one
        raise KoboiError("the sub-agent ended without a final event")
    return final.result


def _child_tools(parent: AgentRun, tools: Sequence[str] | None) -> dict[str, Any]:
    available = parent.tools
    if tools is None:
        child_tools = dict(available)
    else:
        unknown = sorted(set(tools) - set(available))
        if unknown:
            raise ToolError(
                f"a sub-agent may only use its parent's tools; not available: {', '.join(unknown)}"
            )
        child_tools = {n: available[n] for n in tools}
    owners = parent.tool_list.plugins
    child_list = ToolList.build(child_tools, (), {n: owners.get(n, "") for n in child_tools})
    return {"tools": child_tools, "toolsets": (), "tool_list": child_list}


def _child_config(parent: AgentRun, options: ChildOptions) -> Any:
    """The parent's config with the child's agent section: never wider than the parent's."""
    config = parent.parts.config
    agent = config.agent
    update: dict[str, Any] = {
        k: options.get(k) for k in ("system_prompt", "name") if options.get(k) is not None
    }
    mode = options.get("mode")
    if mode is not None:
        if not mode_within(mode, agent.mode):
            raise ToolError(
                f"a sub-agent may not run in a wider mode than its parent: it asks for "
                f"'{mode}', its parent runs in '{agent.mode}'"
            )
        if mode != agent.mode and mode in ("chat", "plan") and not _modes_enforced(parent):
            raise ToolError(
                f"a sub-agent's mode '{mode}' needs a plugin that enforces modes, and no "
                "installed plugin enforces modes"
            )
        update["mode"] = mode
    max_iterations = options.get("max_iterations")
    if max_iterations is not None:
        update["max_iterations"] = max(1, min(max_iterations, agent.max_iterations))
    # Its own caps; the parent's budgets bound it anyway (they are shared).
    for cap in ("max_total_tokens", "max_cost_usd"):
        if options.get(cap) is not None:
            update[cap] = options.get(cap)
    return dataclasses.replace(config, agent=agent.model_copy(update=update))


def _modes_enforced(parent: AgentRun) -> bool:
    return any("mode" in i.enforces for i in parent.parts.interceptors)


def _child_model(parent: AgentRun, model: str | None) -> Any:
    parts = parent.parts
    if model is None:
        return parts.provider
    if parts.named_model is None:
        raise KoboiError(f"a sub-agent's model {model!r} cannot be built here")
    return parts.named_model(model)


async def _child_session(
    parent: AgentRun,
    session_id: str | None,
    parent_call_id: str | None,
    tag: str | None,
    config: Any,
) -> tuple[SessionInfo, list[JournalEvent]]:
    """The child's session: created, or the one ``session_id`` names, which must be a
    child of the parent's session."""
    store = parent.parts.store
    if session_id is not None:
        try:
            info = await store.get_session(session_id)
        except SessionNotFound:
            pass
        else:
            if info.metadata.get("parent_session") != parent.session_id:
                raise KoboiError(
                    f"session {session_id} is not a sub-agent session of session "
                    f"{parent.session_id}; a run may only continue its own children"
                )
            return info, await store.read(info.id)
    metadata: dict[str, object] = {"parent_session": parent.session_id, "parent_step": parent.step}
    if parent_call_id is not None:
        metadata["parent_call"] = parent_call_id
    if tag is not None:
        metadata["tag"] = tag
    info = await store.create_session(
        session_id,
        config_name=config.agent.name,
        config_hash=config.config_hash,
        owner=parent.info.owner,
        metadata=metadata,
    )
    return info, []


async def _take(parent: AgentRun, info: SessionInfo, ttl: float) -> Lease:
    """The child's lease; one a dead process of this host held is taken over at once."""
    holder = parent.lease.holder if parent.lease is not None else f"subagent:{parent.session_id}"
    return await take_lease(parent.parts.store, info.id, holder, ttl)


def _journaled_result(
    session_id: str, events: Sequence[JournalEvent], state: J.SessionState
) -> RunResult:
    """The result of a child's last finished run, as its ``run_finished`` says."""
    finished = next(e for e in reversed(events) if e.type == J.RUN_FINISHED)
    data = J.RUN_FINISHED.of(finished)
    return RunResult(
        session_id=session_id,
        outcome=cast("Outcome", data["outcome"]),
        output=data["output"],
        usage=Usage.model_validate(data.get("usage") or {}),
        steps=int(data.get("steps") or 0),
        # Finished: nothing is pending, the folded conversation is the whole of it.
        messages=list(state.messages),
        error=data.get("error"),
        cost_usd=float(data.get("cost_usd") or 0.0),
        suspension=data.get("suspension"),
        refused_by=data.get("refused_by"),
    )
