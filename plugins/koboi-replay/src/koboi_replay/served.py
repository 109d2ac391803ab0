"""The parts of a replayed agent that answer from the bundle instead of the world.

- :class:`ReplayProvider` answers the n-th model call of each run with the
  recorded answer (or the recorded failure), and each side call a plugin makes
  with the recorded side call of the same purpose and request, reporting again
  the provider events the recorded call reported;
- :class:`ReplaySandbox` returns each tool call's recorded result (or suspends
  the run again where the tool suspended it), or runs the tool in the config's
  real sandbox (``--tools live``);
- :class:`ReplayApprover` gives each approval the recorded decision.

Work the recorded process never finished (it was killed while a model call,
a tool call or an approval was in flight) raises :class:`InFlight`: the
replay does not finish it either.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel

from koboi.approval import ApprovalDecision, ApprovalRequest, Approver
from koboi.errors import KoboiError, ProviderError, Suspend
from koboi.messages import ModelRequest, ModelResponse, ModelStreamEvent, ResponseDone, TextDelta
from koboi.models import describe_request, request_key
from koboi.provider import ModelProvider, report
from koboi.sandbox import DEFAULT_OUTPUT_LIMIT, ProcessResult, Sandbox
from koboi.sidecalls import call_purpose
from koboi.tools import Tool, ToolContext, ToolResult
from koboi_replay import bundle as B
from koboi_replay import recording
from koboi_replay.comparing_store import ReplayStore
from koboi_replay.errors import BundleError, ReplayError
from koboi_replay.recording import mapping

#: How long a parallel tool call's result waits for its recorded turn before it is
#: handed out anyway (a replay that took another path must not hang).
ORDER_WAIT_SECONDS = 2.0


class InFlight(KoboiError):
    """Work the recorded process never finished (it died): the replay does not finish it either."""


@dataclass
class Cursor:
    """The recorded run being replayed, and how far into it the replay is."""

    run: recording.RecordedRun | None = None
    #: The loop's own model calls asked so far in this run.
    model_calls: int = 0
    #: Side calls asked so far in this run, by purpose; and the recorded ones served.
    side_calls: dict[str, int] = field(default_factory=dict)
    side_served: set[tuple[str, int]] = field(default_factory=set)
    #: Tool results handed out in this run (their keys), for the recorded order.
    handed: set[tuple[int, str]] = field(default_factory=set)
    order: list[tuple[int, str]] = field(default_factory=list)
    waits_for: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)
    #: How many of ``order`` have been handed out, counted from the start.
    next_in_order: int = 0

    def start(self, run: recording.RecordedRun) -> None:
        self.run = run
        self.model_calls = 0
        self.side_calls = {}
        self.side_served = set()
        self.handed = set()
        self.order = [key for key, _ in run.outcome_order]
        self.waits_for = {
            key: (index, committed) for index, (key, committed) in enumerate(run.outcome_order)
        }
        self.next_in_order = 0

    @property
    def index(self) -> int:
        if self.run is None:
            raise ReplayError("no recorded run is being replayed")
        return self.run.index

    def hand_out(self, key: tuple[int, str]) -> None:
        self.handed.add(key)
        while (
            self.next_in_order < len(self.order) and self.order[self.next_in_order] in self.handed
        ):
            self.next_in_order += 1


#: Who a replay's provider says it is when the bundle does not say who answered.
FALLBACK_IDENTITY: dict[str, Any] = {"provider": "replay"}


class ReplayProvider(ModelProvider):
    """Answers each model call with the recorded answer of the same call of the same run.

    The loop's own calls are served in order (the n-th call of a run gets the
    n-th recorded answer); a plugin's side call (``run.model.complete(...,
    purpose=...)``, told apart by :func:`koboi.sidecalls.call_purpose`) gets the
    recorded side call of its run and purpose that asked the same request (the
    first not yet served, in the recorded order), so a plugin that asks
    something else gets no answer and a message that says so.

    ``identity`` is the recorded provider's cache identity: the kernel journals
    request keys (side calls, rewritten requests) hashed with it, so the
    replayed keys are the recorded ones. ``window`` is the context window the
    recorded provider states, for plugins that fit requests to it.
    """

    name = "replay"
    model = "recorded"

    def __init__(
        self,
        calls: Mapping[recording.ModelCallKey, Mapping[str, Any]],
        cursor: Cursor,
        *,
        identity: Mapping[str, Any] | None = None,
        window: int | None = None,
    ) -> None:
        self._calls = calls
        self._window = window
        self._cursor = cursor
        self._identity = dict(identity) if identity else dict(FALLBACK_IDENTITY)
        self._side: dict[tuple[int, str], list[int]] = {}
        for run, purpose, number in sorted(
            (k for k in calls if k[1] is not None), key=lambda k: (k[0], str(k[1]), k[2])
        ):
            self._side.setdefault((run, str(purpose)), []).append(number)

    def cache_identity(self) -> dict[str, Any]:
        return dict(self._identity)

    def context_window(self) -> int | None:
        return self._window

    def _next(self, request: ModelRequest) -> Mapping[str, Any]:
        purpose = call_purpose()
        cursor = self._cursor
        run = cursor.index
        if purpose is not None:
            entry = self._side_call(run, purpose, request)
            what = f"side call {entry.get('call')} ({purpose})"
        else:
            cursor.model_calls += 1
            number = cursor.model_calls
            found = self._calls.get((run, None, number))
            if found is None:
                raise ReplayError(
                    f"replay: the bundle has no recorded answer for model call {number} of run "
                    f"{run} ({describe_request(request)})"
                )
            entry, what = found, f"model call {number}"
        if entry.get("outcome") == "interrupted":
            raise InFlight(f"replay: the recorded process died during {what} of run {run}")
        for item in entry.get("reports") or ():
            details = mapping(item.get("data"))
            report(str(item.get("kind", "")), **details)
        return entry

    def _side_call(self, run: int, purpose: str, request: ModelRequest) -> Mapping[str, Any]:
        cursor = self._cursor
        asked = cursor.side_calls[purpose] = cursor.side_calls.get(purpose, 0) + 1
        recorded = self._side.get((run, purpose), [])
        left = [n for n in recorded if (purpose, n) not in cursor.side_served]
        if not left:
            raise ReplayError(
                f"replay: a plugin asks the model a side call for {purpose!r} (its call "
                f"{asked} for it in run {run}) that the recording never made: the recorded run "
                f"made {len(recorded)}; the plugin asks something the recorded one did not "
                f"({describe_request(request)})"
            )
        key = request_key(self._identity, request)
        number = next((n for n in left if self._calls[(run, purpose, n)].get("key") == key), None)
        if number is None:
            recorded_key = str(self._calls[(run, purpose, left[0])].get("key") or "")
            if recorded_key:
                raise ReplayError(
                    f"replay: side call {asked} for {purpose!r} in run {run} asks the model "
                    f"something other than the recording did (request key {key[:12]}..., "
                    f"recorded {recorded_key[:12]}...): the plugin asks another question "
                    f"({describe_request(request)})"
                )
            number = left[0]  # a record without its key (edited by hand): served in order
        cursor.side_served.add((purpose, number))
        return self._calls[(run, purpose, number)]

    @staticmethod
    def _response(entry: Mapping[str, Any]) -> ModelResponse:
        if entry.get("outcome") == "failed":
            raise RecordedFailure(str(entry.get("error", "")))
        try:
            return ModelResponse.model_validate(entry["response"])
        except (KeyError, ValueError) as exc:
            purpose = entry.get("purpose")
            what = f"model call {entry.get('call')}"
            if purpose is not None:
                what = f"side call {entry.get('call')} ({purpose})"
            raise BundleError(
                f"{B.MODEL_CALLS}: the answer to {what} of run {entry.get('run')} is damaged "
                f"({exc})"
            ) from None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return self._response(self._next(request))

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        entry = self._next(request)
        if entry.get("outcome") == "failed" and entry.get("streamed"):
            yield TextDelta(text=str(entry["streamed"]))
        response = self._response(entry)
        if response.message.content:
            yield TextDelta(text=response.message.content)
        yield ResponseDone(response=response)


class RecordedFailure(ProviderError):
    """A model call that failed in the recording fails again, with the recorded message.

    A :class:`~koboi.errors.ProviderError`, as a provider's failure is: a side
    call raises it to its plugin as it is, so the journaled error is the recorded one.
    """


class ReplaySandbox(Sandbox):
    """Tool calls answered from the bundle (``recorded``) or run for real and compared (``live``)."""

    def __init__(
        self,
        results: Mapping[recording.CallKey, Mapping[str, Any]],
        cursor: Cursor,
        store: ReplayStore,
        *,
        live: Sandbox | None = None,
        recorded: Mapping[str, Any] | None = None,
    ) -> None:
        self._results = results
        self._cursor = cursor
        self._store = store
        self.live = live
        # The loop journals and audits the sandbox's name, and interceptors see whether
        # it isolates: under --tools recorded they are the recorded sandbox's.
        facts = recorded or {}
        self.name = live.name if live is not None else str(facts.get("name", "passthrough"))
        self._isolated = live.isolated if live is not None else bool(facts.get("isolated", False))

    @property
    def isolated(self) -> bool:
        return self._isolated

    def workdir_for(self, session_id: str) -> Path | None:
        return self.live.workdir_for(session_id) if self.live is not None else None

    def describe(self) -> dict[str, Any]:
        if self.live is not None:
            return self.live.describe()
        return {"backend": self.name, "tools": "recorded: served from the bundle"}

    async def aclose(self) -> None:
        if self.live is not None:
            await self.live.aclose()

    async def run_tool(self, tool: Tool, args: BaseModel, ctx: ToolContext) -> ToolResult:
        cursor = self._cursor
        key = (ctx.step, ctx.call_id)
        entry = self._results.get((cursor.index, *key))
        if entry is not None and entry.get("outcome") == "interrupted":
            raise InFlight(
                f"replay: the recorded process died while tool call {ctx.call_id} ({tool.name}) ran"
            )
        await self._wait_for_turn(key)
        try:
            if self.live is not None:
                return await self.live.run_tool(tool, args, ctx)
            if entry is not None and entry.get("outcome") == "suspended":
                # The tool suspended the run (ctx.suspend): it does so again, before doing
                # anything, and runs again with the reply when the run is continued.
                raise Suspend(
                    str(entry.get("reason", "")),
                    kind=str(entry.get("kind") or "input"),
                    data=mapping(entry.get("data")),
                )
            if entry is None:
                raise ReplayError(
                    f"replay: the bundle has no recorded result for tool call {ctx.call_id} "
                    f"({tool.name}, step {ctx.step}, run {cursor.index})"
                )
            return ToolResult(str(entry.get("content", "")), is_error=bool(entry.get("is_error")))
        finally:
            cursor.hand_out(key)

    async def _wait_for_turn(self, key: tuple[int, str]) -> None:
        """Hold a result until the calls the recording finished first have been handed out,
        and what the recording committed before it is committed: parallel calls then
        journal in the recorded order. Sequential calls never wait."""
        cursor, store = self._cursor, self._store
        turn = cursor.waits_for.get(key)
        if turn is None:
            return
        index, committed = turn
        deadline: float | None = None
        while cursor.next_in_order < index or store.committed < committed:
            now = anyio.current_time()
            if deadline is None:
                deadline = now + ORDER_WAIT_SECONDS
            elif now >= deadline:
                return  # the replay took another path; the comparison will say where
            await anyio.sleep(0.0005)

    async def run_process(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        input: bytes | None = None,
        max_output: int = DEFAULT_OUTPUT_LIMIT,
        session_id: str | None = None,
    ) -> ProcessResult:
        if self.live is None:
            raise ReplayError(
                "replay: no process runs under --tools recorded (tool results come from the bundle)"
            )
        return await self.live.run_process(
            argv,
            cwd=cwd,
            env=env,
            timeout=timeout,
            input=input,
            max_output=max_output,
            session_id=session_id,
        )


class ReplayApprover(Approver):
    """Gives every approval the decision the recording has for it; asks nobody."""

    name = "replay"

    def __init__(
        self, decisions: Mapping[recording.CallKey, Mapping[str, Any]], cursor: Cursor
    ) -> None:
        self._decisions = decisions
        self._cursor = cursor

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        run = self._cursor.index
        entry = self._decisions.get((run, request.step, request.call_id))
        if entry is None:
            return ApprovalDecision(
                approved=False,
                reason=(
                    f"replay: the bundle has no recorded decision for tool call "
                    f"{request.call_id} ({request.tool_name}, step {request.step}, run {run})"
                ),
                decided_by=self.name,
            )
        if entry.get("outcome") == "interrupted":
            raise InFlight(
                f"replay: the recorded process died while tool call {request.call_id} "
                "waited for approval"
            )
        decision = mapping(entry.get("decision"))
        scope = decision.get("scope", "once")
        return ApprovalDecision(
            approved=bool(decision.get("approved")),
            reason=str(decision.get("reason", "")),
            scope=scope if scope in ("once", "always") else "once",
            decided_by=str(decision.get("decided_by", "")),
        )
