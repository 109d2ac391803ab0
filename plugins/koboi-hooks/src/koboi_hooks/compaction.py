"""pre_compact hooks, offered to the context plugin through its compaction hook.

koboi-context defines ``koboi_context_register_compaction_hooks(register)``;
each registered object's ``before_compaction(run, details)`` is awaited before
the conversation is summarised and may return extra instructions for the
summary. This module implements that contract without importing koboi-context:
when it is not installed, the hook simply waits (koboi plugins inspect lists
it as waiting for its owner).

What the pre_compact hooks print (plain text, or ``additionalContext``) is
joined into the instructions. A block means nothing here (compaction is not
ours to refuse): it is journaled as ignored. A failing hook follows the
failure rule: ``open`` (the default) goes on without it, ``closed`` raises, so
the context plugin does not compact with instructions missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koboi.errors import KoboiError
from koboi.interceptors import RunInfo, speaking
from koboi_hooks.runner import HookRunner, journal_outcome
from koboi_hooks.settings import HooksSettings

SECTION = "hooks"


class HookFailed(KoboiError):
    """A hook whose failure rule is ``closed`` failed where nothing else can be refused."""


class PreCompactHooks:
    """The ``CompactionHook`` koboi-hooks registers with the context plugin."""

    def __init__(self) -> None:
        self._runners: dict[int, tuple[HooksSettings, HookRunner]] = {}

    def _runner(self, settings: HooksSettings) -> HookRunner:
        kept = self._runners.get(id(settings))
        if kept is None or kept[0] is not settings:
            kept = (settings, HookRunner(settings))
            self._runners[id(settings)] = kept
        return kept[1]

    async def before_compaction(self, run: RunInfo, details: Mapping[str, Any]) -> str | None:
        settings = run.config.section(SECTION)
        if not isinstance(settings, HooksSettings):
            return None
        runner = self._runner(settings)
        hooks = runner.hooks("pre_compact")
        if not hooks:
            return None
        payload = runner.payload(
            "pre_compact",
            run,
            trigger="auto",
            custom_instructions="",
            **{
                k: details[k]
                for k in ("strategy", "tokens_before", "budget", "messages_dropped")
                if k in details
            },
        )
        instructions: list[str] = []
        # The context plugin calls this from its own interceptor: what is journaled here is
        # koboi-hooks' (hooks.*), said in its own name.
        with speaking("hooks", "hooks"):
            for hook in hooks:
                outcome = await runner.run("pre_compact", hook, payload, run)
                if outcome.failed:
                    if settings.fail_rule("pre_compact", hook) == "closed":
                        journal_outcome(
                            run, "pre_compact", hook, outcome, "failed closed: compaction stopped"
                        )
                        raise HookFailed(
                            f"pre_compact hook {hook.label()!r} failed: {outcome.error} (on_error: closed)"
                        )
                    journal_outcome(run, "pre_compact", hook, outcome, "failed open: ignored")
                    continue
                if outcome.context:
                    instructions.append(outcome.context)
                effect = "added instructions" if outcome.context else "none"
                if outcome.action == "block":
                    effect += " (block ignored: compaction is not refused by hooks)"
                journal_outcome(run, "pre_compact", hook, outcome, effect)
        return "\n\n".join(instructions) or None
