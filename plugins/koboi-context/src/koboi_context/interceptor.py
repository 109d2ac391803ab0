"""The interceptor that fits every model request of a session into the model's window.

It runs late among ``before_model_call`` interceptors (priority 900), so it sees
what earlier ones added, and it counts what the kernel will append after it
(``run.call_context``) and the tools offered. It changes only the request: the
session's journal keeps every message; the kernel journals the rewrite with the
call (``model_call_started.request``).

Strategies that compact (``truncation``, ``smart_truncation``, ``key_facts``,
``summarise``) keep what they dropped as ranges of body positions and move them
only when the kept history no longer fits: each move is a *compaction*, journaled
as a ``context.compacted`` plugin event (with the summary, for ``summarise``) and
handed back by ``restore``, so a later run, a resumed run and a replay send the
same requests. ``sliding_window`` and ``noop`` are pure functions of the
conversation and journal nothing. Every strategy's work per call is bounded by
what it keeps, not by the session's length.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from koboi.errors import BudgetExceeded, KoboiError, ProviderError, describe_error
from koboi.interceptors import Interceptor, RunInfo
from koboi.logs import get_logger
from koboi.messages import Message, ModelRequest, ModelResponse
from koboi_context import facts, history, summary
from koboi_context.errors import ContextOverflow
from koboi_context.history import Ranges
from koboi_tokens.calibration import Calibration
from koboi_tokens.counters import counter_for_config
from koboi_tokens.requests import PER_REPLY, MessageTokens, message_tokens, tools_tokens

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.plugins import PluginHost
    from koboi.registry import Registry
    from koboi.store import JournalEvent
    from koboi_context.config import ContextSettings
    from koboi_context.hookspecs import CompactionHook
    from koboi_tokens.counters import TokenCounter

log = get_logger("koboi.context")

HOOK = "koboi_context_register_compaction_hooks"
COMPACTED = "context.compacted"
HOOK_CALLED = "context.hook"
CALIBRATED = "context.calibrated"
_STATE = "context"
#: Strategies that compact (keep state of what they dropped).
COMPACTING = frozenset({"truncation", "smart_truncation", "key_facts", "summarise"})
SUMMARY_HEADING = "Summary of the earlier conversation (older turns were replaced by it):"


@dataclass
class SessionContext:
    """What the strategy knows about a session: rebuilt from its journal by ``restore``."""

    #: Body positions not sent, merged.
    dropped: Ranges = field(default_factory=list)
    #: (position, fingerprint) of the last dropped message: the ranges still apply.
    check: tuple[int, str] | None = None
    summary: str | None = None
    calibration: Calibration = field(default_factory=Calibration)
    #: The raw estimate of the last request sent (for the calibration).
    sent_estimate: int = 0
    #: Key facts block, by the dropped ranges it was made from.
    facts_for: tuple[tuple[int, int], ...] | None = None
    facts: str | None = None
    #: The system message carrying the summary or the facts, made once per text (so it
    #: is counted once).
    block: Message | None = None

    def block_message(self, text: str) -> Message:
        if self.block is None or self.block.content != text:
            self.block = Message.system(text)
        return self.block


@dataclass
class _Call:
    """One request being fitted."""

    request: ModelRequest
    head: int
    length: int
    room: int
    budget: int
    fixed: int
    tokens: MessageTokens

    def message(self, position: int) -> Message:
        return self.request.messages[self.head + position]

    def role(self, position: int) -> str:
        return self.request.messages[self.head + position].role

    def size(self, position: int) -> int:
        return self.tokens(self.request.messages[self.head + position])

    def head_messages(self) -> list[Message]:
        # By index: slicing a long conversation's view would copy all of it.
        return [self.request.messages[i] for i in range(self.head)]


class ContextStrategy(Interceptor):
    """Fits each request into the window with the configured strategy."""

    name = "context"
    priority = 900
    event_namespace = "context"

    def __init__(self, settings: ContextSettings, config: AgentConfig) -> None:
        self.settings = settings
        self.counter: TokenCounter = counter_for_config(config, settings.tokenizer)
        self._hooks: Registry[Any] | None = None

    # -- state ------------------------------------------------------------------------

    def _state(self, run: RunInfo) -> SessionContext:
        state = run.state.get(_STATE)
        if not isinstance(state, SessionContext):
            state = SessionContext()
            run.state[_STATE] = state
        return state

    def _tokens(self, run: RunInfo) -> MessageTokens:
        counted = run.state.get("context.tokens")
        if not isinstance(counted, MessageTokens):
            counted = MessageTokens(self.counter)
            run.state["context.tokens"] = counted
        return counted

    async def restore(self, events: Sequence[JournalEvent], run: RunInfo) -> None:
        state = self._state(run)
        for event in events:
            data = event.data
            if event.type == COMPACTED:
                state.dropped = [(int(a), int(b)) for a, b in data.get("dropped", [])]
                check = data.get("check")
                state.check = (int(check[0]), str(check[1])) if check else None
                if "summary" in data:
                    state.summary = data["summary"]
            elif event.type == CALIBRATED:
                state.calibration.factor = float(data["factor"])

    # -- the window ---------------------------------------------------------------------

    def _window(self, run: RunInfo) -> int:
        window = self.settings.max_context_tokens or run.model.context_window
        if window is None:
            raise KoboiError(
                "context: the model's context window is unknown; set context.max_context_tokens "
                "or llm.context_window"
            )
        return window

    def _plan(self, request: ModelRequest, run: RunInfo, state: SessionContext) -> _Call:
        settings = self.settings
        window = self._window(run)
        reserve = settings.reserve_output_tokens
        if reserve is None:
            reserve = min(1024, window // 8)
        budget = window - reserve - settings.safety_margin
        counted = self._tokens(run)
        fixed = (
            self._tools_tokens(run, request)
            + PER_REPLY
            + sum(message_tokens(self.counter, Message.system(t)) for t in run.call_context)
        )
        if request.response_format is not None:
            fixed += self.counter.count(str(request.response_format))
        head = history.head_length(request.messages)
        pinned = fixed + counted.total([request.messages[i] for i in range(head)])
        # Budgets are compared with raw counts: a calibrated heuristic scales the budget.
        raw_budget = math.floor(budget / state.calibration.factor)
        call = _Call(
            request=request,
            head=head,
            length=len(request.messages) - head,
            room=raw_budget - pinned,
            budget=budget,
            fixed=fixed,
            tokens=counted,
        )
        if call.room <= 0:
            raise ContextOverflow(
                f"context: the system prompt, tools and added context alone need "
                f"{self._shown(pinned, state)} tokens, over the {budget} a request may take "
                f"({self._budget_text(window, reserve)}); shorten the system prompt or offer "
                "fewer tools, or raise context.max_context_tokens"
            )
        return call

    def _tools_tokens(self, run: RunInfo, request: ModelRequest) -> int:
        """The tools' tokens, counted again only when the run offers other tools."""
        known = run.state.get("context.tools")
        if isinstance(known, tuple) and known[0] is request.tools:
            return int(known[1])
        tokens = tools_tokens(self.counter, request.tools)
        run.state["context.tools"] = (request.tools, tokens)
        return tokens

    def _budget_text(self, window: int, reserve: int) -> str:
        margin = self.settings.safety_margin
        text = f"window {window} - {reserve} for the answer"
        return text + (f" - {margin} safety margin" if margin else "")

    def _shown(self, raw: int, state: SessionContext) -> int:
        return state.calibration.apply(raw)

    # -- before each model call -----------------------------------------------------------

    async def before_model_call(self, request: ModelRequest, run: RunInfo) -> ModelRequest | None:
        state = self._state(run)
        call = self._plan(request, run, state)
        strategy = self.settings.strategy
        if strategy == "noop":
            fitted = None if self._fits(call, (), call.length, []) else self._overflow(call, state)
        elif strategy == "sliding_window":
            fitted = self._sliding_window(call, state)
        else:
            fitted = await self._compacting(call, run, state)
        if not self.counter.exact:
            sent = fitted if fitted is not None else request
            state.sent_estimate = call.fixed + call.tokens.total(sent.messages)
        return fitted

    async def after_model_call(self, response: ModelResponse, run: RunInfo) -> ModelResponse | None:
        if self.counter.exact:
            return None
        state = self._state(run)
        factor = state.calibration.observe(state.sent_estimate, response.usage.input_tokens)
        if factor is not None:
            # Journaled before it is used: a resumed or replayed run decides the same way.
            run.record(
                CALIBRATED, {"step": run.step, "factor": factor, "counter": self.counter.name}
            )
            state.calibration.factor = factor
        return None

    # -- fitting ------------------------------------------------------------------------

    def _fits(self, call: _Call, extra: Sequence[Message], end: int, dropped: Ranges) -> bool:
        """Whether ``extra`` and the kept body fit the room (stops counting once over)."""
        total = sum(call.tokens(m) for m in extra)
        for position in history.kept_backward(end, dropped):
            total += call.size(position)
            if total > call.room:
                return False
        return total <= call.room

    def _request(
        self, call: _Call, extra: Sequence[Message], dropped: Ranges
    ) -> ModelRequest | None:
        if not dropped and not extra:
            return None
        kept = list(history.kept_backward(call.length, dropped))
        kept.reverse()
        messages = [*call.head_messages(), *extra, *(call.message(p) for p in kept)]
        return call.request.model_copy(update={"messages": messages})

    def _overflow(self, call: _Call, state: SessionContext, newest: int | None = None) -> NoReturn:
        """Stop the run: ``newest`` is the smallest part of the conversation the strategy
        must send (None: noop, which sends it all)."""
        pinned = call.fixed + call.tokens.total(call.head_messages())
        if newest is None:
            what = "the whole conversation"
            needed = pinned + sum(call.size(p) for p in range(call.length))
            fix = "choose a strategy that drops old turns (context.strategy)"
        else:
            what = "the newest user message with the newest step after it"
            needed = pinned + newest
            fix = "shorten the message or the tool results"
        raise ContextOverflow(
            f"context: {what} needs {self._shown(needed, state)} tokens with the system prompt, "
            f"tools and added context, over the {call.budget} a request may take (strategy "
            f"{self.settings.strategy}); {fix}, or raise context.max_context_tokens"
        )

    def _current_turn(
        self, call: _Call, state: SessionContext, dropped: Ranges, room: int
    ) -> tuple[int, Ranges] | None:
        """When the newest turn alone is over ``room``: its user message and the newest units
        that fit, as (turn start, the range dropped inside it); None when it fits whole."""
        turn = next(history.turns_backward(call.length, dropped, call.role), [])
        if sum(call.size(p) for p in turn) <= room:
            return None
        first, rest = turn[0], turn[1:]
        if call.role(first) != "user":  # no user message at all: keep the newest units
            first, rest = -1, turn
        used = call.size(first) if first >= 0 else 0
        kept_from = None
        for unit in reversed(history.units(rest, call.message)):
            size = sum(call.size(p) for p in unit)
            if used + size > room:
                break
            used += size
            kept_from = unit[0]
        if kept_from is None:
            newest = history.units(rest, call.message)[-1] if rest else [first]
            self._overflow(
                call,
                state,
                (call.size(first) if first >= 0 else 0) + sum(call.size(p) for p in newest),
            )
        assert kept_from is not None
        start = first if first >= 0 else turn[0]
        inner: Ranges = [(first + 1, kept_from)] if first >= 0 else [(0, kept_from)]
        return start, inner

    def _turns_within(
        self, call: _Call, dropped: Ranges, room: int, *, limit: int | None = None
    ) -> int:
        """The start of the oldest of the newest whole turns that fit ``room`` together
        (at most ``limit`` turns); the newest turn is always counted."""
        used, start = 0, call.length
        for count, turn in enumerate(history.turns_backward(call.length, dropped, call.role)):
            size = sum(call.size(p) for p in turn)
            if count and (used + size > room or (limit is not None and count >= limit)):
                break
            used += size
            start = turn[0]
        return start

    # -- sliding_window ---------------------------------------------------------------

    def _sliding_window(self, call: _Call, state: SessionContext) -> ModelRequest | None:
        start = self._turns_within(call, [], call.room, limit=self.settings.keep_last)
        trimmed = self._current_turn(call, state, [], call.room)
        if trimmed is not None:
            start, inner = trimmed
            dropped = history.merge([(0, start), *inner])
        else:
            dropped = [(0, start)] if start > 0 else []
        return self._request(call, (), dropped)

    # -- the compacting strategies ----------------------------------------------------------

    def _valid(self, call: _Call, state: SessionContext) -> None:
        """Forget ranges that no longer describe this conversation (another plugin reshaped
        the history): everything is sent again, and the next compaction starts over."""
        if state.check is None:
            return
        position, expected = state.check
        if position < call.length and history.fingerprint(call.message(position)) == expected:
            return
        log.warning(
            "context: the history no longer matches what was compacted (position %d); "
            "compacting again from the start",
            position,
        )
        state.dropped, state.check, state.summary, state.facts_for = [], None, None, None

    def _extra(self, call: _Call, state: SessionContext, dropped: Ranges) -> list[Message]:
        strategy = self.settings.strategy
        if not dropped:
            return []
        if strategy == "summarise":
            if not state.summary:
                return []
            return [state.block_message(f"{SUMMARY_HEADING}\n{state.summary}")]
        if strategy == "key_facts":
            block = self._facts(call, state, dropped)
            return [state.block_message(block)] if block else []
        if strategy == "smart_truncation":
            first = self._first_user(call)
            if first is not None and any(a <= first < b for a, b in dropped):
                return [call.message(first)]
        return []

    def _first_user(self, call: _Call) -> int | None:
        for position in range(call.length):
            if call.role(position) == "user":
                return position
        return None

    def _facts(self, call: _Call, state: SessionContext, dropped: Ranges) -> str | None:
        key = tuple(dropped)
        if state.facts_for != key:
            limit = self._extra_room(call)
            lines = facts.facts_block(
                _dropped_backward(dropped), call.message, self.counter.count, limit
            )
            # Lines were counted one by one; the block as sent is counted whole, and
            # shortened in the rare case joining them made it longer.
            while lines is not None and message_tokens(self.counter, Message.system(lines)) > (
                limit + message_tokens(self.counter, Message.system(facts.HEADING))
            ):
                lines = facts.render(lines.split("\n- ")[1:][::-1][:-1])
            state.facts, state.facts_for = lines, key
        return state.facts

    def _extra_room(self, call: _Call) -> int:
        """What the summary or the facts may take."""
        settings = self.settings
        explicit = (
            settings.summary_tokens if settings.strategy == "summarise" else settings.facts_tokens
        )
        return explicit if explicit is not None else max(64, call.room // 5)

    async def _compacting(
        self, call: _Call, run: RunInfo, state: SessionContext
    ) -> ModelRequest | None:
        self._valid(call, state)
        extra = self._extra(call, state, state.dropped)
        if self._fits(call, extra, call.length, state.dropped):
            return self._request(call, extra, state.dropped)
        return await self._compact(call, run, state, extra)

    async def _compact(
        self, call: _Call, run: RunInfo, state: SessionContext, extra_before: list[Message]
    ) -> ModelRequest | None:
        settings = self.settings
        strategy = settings.strategy
        reserved = self._reserved(call, strategy)
        hard = call.room - reserved
        before = state.dropped
        trimmed = self._current_turn(call, state, before, hard)
        if trimmed is not None:
            start, inner = trimmed
            dropped = history.merge([*before, (0, start), *inner])
        else:
            target = max(1, math.floor(hard * settings.compact_to))
            start = self._turns_within(call, before, target)
            dropped = history.merge([*before, (0, start)])
        newly = [p for a, b in history.subtract(dropped, before) for p in range(a, b)]
        details = {
            "strategy": strategy,
            "tokens_before": self._shown(
                call.fixed
                + call.tokens.total(call.head_messages())
                + sum(call.tokens(m) for m in extra_before)
                + sum(call.size(p) for p in history.kept_backward(call.length, before)),
                state,
            ),
            "budget": call.budget,
            "messages_dropped": len(newly),
        }
        instructions = await self._ask_hooks(run, details)
        last = max(newly) if newly else None
        state.dropped = dropped
        state.check = (last, history.fingerprint(call.message(last))) if last is not None else None
        record: dict[str, Any] = {
            "step": run.step,
            **details,
            "dropped": [list(r) for r in dropped],
        }
        if state.check is not None:
            record["check"] = list(state.check)
        if strategy == "summarise":
            state.summary = await self._summary(call, run, state, newly, instructions, record)
            record["summary"] = state.summary
        extra = self._extra(call, state, dropped)
        if not self._fits(call, extra, call.length, dropped):
            # The summary or facts were clamped to their room; this is a bug if reached.
            raise ContextOverflow(
                "context: the compacted request still does not fit; raise "
                "context.max_context_tokens or lower context.summary_tokens/facts_tokens"
            )
        kept = sum(call.size(p) for p in history.kept_backward(call.length, dropped))
        record["tokens_after"] = self._shown(
            call.fixed
            + call.tokens.total(call.head_messages())
            + sum(call.tokens(m) for m in extra)
            + kept,
            state,
        )
        run.record(COMPACTED, record)
        return self._request(call, extra, dropped)

    def _reserved(self, call: _Call, strategy: str) -> int:
        if strategy in ("summarise", "key_facts"):
            return message_tokens(self.counter, Message.system(SUMMARY_HEADING)) + self._extra_room(
                call
            )
        if strategy == "smart_truncation":
            first = self._first_user(call)
            return call.size(first) if first is not None else 0
        return 0

    # -- summaries -------------------------------------------------------------------

    async def _summary(
        self,
        call: _Call,
        run: RunInfo,
        state: SessionContext,
        newly: Sequence[int],
        instructions: Sequence[str],
        record: dict[str, Any],
    ) -> str | None:
        settings = self.settings
        room = self._extra_room(call)
        prompt = settings.summary_prompt or summary.DEFAULT_PROMPT
        if instructions:
            prompt = prompt + "\n\n" + "\n".join(instructions)
        # One summary call must fit the window too: the prompt, the longest summary,
        # the text to add, and room for the answer (a summary of the longest size).
        side_room = (
            call.budget - message_tokens(self.counter, Message.system(prompt)) - 3 * room - 64
        )
        if side_room <= 0:
            raise ContextOverflow(
                "context: the summary prompt and summary_tokens leave no room in the window "
                "for the text to summarise; lower context.summary_tokens"
            )
        lines = [summary.render(call.message(p), settings.summarization_truncation) for p in newly]
        words = max(20, room * 3 // 4)
        try:
            text = await summary.summarise(
                run,
                state.summary,
                lines,
                prompt=prompt,
                words=words,
                size=self.counter.count,
                room=side_room,
            )
        except (ProviderError, BudgetExceeded) as exc:
            # The turns are dropped all the same (the request must fit); the summary keeps
            # what it had. Journaled with the compaction, logged: it does not vanish.
            reason = describe_error(exc)
            log.warning("context: the summary call failed (%s); the dropped turns are lost", reason)
            record["summary_error"] = reason
            return state.summary
        return self._clamp(text, room)

    def _clamp(self, text: str, room: int) -> str:
        """``text`` cut (at a word) so its message takes at most ``room`` tokens."""

        def size(candidate: str) -> int:
            return message_tokens(self.counter, Message.system(f"{SUMMARY_HEADING}\n{candidate}"))

        heading = size("")
        if size(text) - heading <= room:
            return text
        low, high = 0, len(text)
        while low < high:
            middle = (low + high + 1) // 2
            if size(text[:middle] + "…") - heading <= room:
                low = middle
            else:
                high = middle - 1
        cut = text[:low].rsplit(" ", 1)[0] if " " in text[:low] else text[:low]
        return cut + "…"

    # -- pre-compaction hooks --------------------------------------------------------------

    def _registry(self, host: PluginHost | None) -> Registry[Any]:
        if self._hooks is None:
            from koboi.plugins import default_host

            self._hooks = (host or default_host()).collect(
                HOOK, kind="compaction hook", validate=_check_hook
            )
        return self._hooks

    async def _ask_hooks(self, run: RunInfo, details: Mapping[str, Any]) -> list[str]:
        instructions: list[str] = []
        for entry in self._registry(run.host):
            hook: CompactionHook = entry.target
            data: dict[str, Any] = {
                "step": run.step,
                "hook": entry.name,
                "plugin": entry.plugin,
                "details": dict(details),
            }
            try:
                answer = await hook.before_compaction(run, dict(details))
                if answer is not None and not isinstance(answer, str):
                    raise KoboiError(f"returned {answer!r}, not a string or None")
            except Exception as exc:  # a hook never stops a compaction: logged and journaled
                data["error"] = describe_error(exc)
                log.warning(
                    "context: compaction hook %r (plugin %r) failed: %s",
                    entry.name,
                    entry.plugin,
                    data["error"],
                )
            else:
                data["instructions"] = answer
                if answer:
                    instructions.append(answer)
            run.record(HOOK_CALLED, data)
        return instructions


def _check_hook(entry: Any) -> None:
    from koboi.errors import RegistrationError

    method = getattr(entry.target, "before_compaction", None)
    if not callable(method):
        raise RegistrationError(
            f"compaction hook {entry.name!r} has no before_compaction(run, details) method"
        )


def _dropped_backward(dropped: Ranges) -> Iterator[int]:
    for start, end in reversed(dropped):
        yield from range(end - 1, start - 1, -1)
